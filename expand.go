package gpualloc

import (
	"fmt"
	"strconv"
	"strings"
)

// Sweeps: a parameter's value may name several values, and a spec then
// stands for one variant per combination.
//
//	20..24        the integers 20, 21, 22, 23 and 24
//	0..64/16      0, 16, 32, 48 and 64 (a step; the end is kept only when a step lands on it)
//	2.1..2.11     the releases 2.1, 2.2, ..., 2.11: ends with the same first number (not 0) count by the second
//	64|128|inf    each alternative in turn; an alternative may itself be a range
//
// When several parameters vary, the variants are their cartesian product,
// the first parameter in the strategy's order varying slowest. A value made
// of settings (a parameter with a Settings parser, such as the pytorch
// strategy's conf) varies setting by setting:
// "max_split_size_mb:64|128,expandable_segments:True|False" is four
// variants. The same holds where the value comes from: a spec, or an
// environment variable (GPUALLOC_POOL_TYPE, PYTORCH_CUDA_ALLOC_CONF,
// MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF...).
//
// The grammar is the registry's own: [Params.Expand] applies it, and
// [Params.Open] refuses a value that still holds a sweep.

// maxVariants bounds the variants one spec may expand to.
const maxVariants = 4096

// isSweep reports whether a value names several values: whether it holds a
// range ("..") or a list ("|").
func isSweep(v string) bool { return strings.Contains(v, "..") || strings.Contains(v, "|") }

// expandValue returns the values a parameter's value stands for, in order:
// the value itself when it is no sweep. Its errors say what is wrong with
// the range or list, without naming the parameter (the caller does).
func expandValue(v string) ([]string, error) {
	if !isSweep(v) {
		return []string{v}, nil
	}
	var out []string
	for _, alt := range strings.Split(v, "|") {
		alt = strings.TrimSpace(alt)
		if alt == "" {
			return nil, fmt.Errorf("%q: an empty alternative in the list", v)
		}
		if !strings.Contains(alt, "..") {
			out = append(out, alt)
			continue
		}
		vals, err := expandRange(alt, maxVariants-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, vals...)
		if len(out) > maxVariants {
			return nil, fmt.Errorf("%q: more than %d values", v, maxVariants)
		}
	}
	if len(out) > maxVariants {
		return nil, fmt.Errorf("%q: more than %d values", v, maxVariants)
	}
	return out, nil
}

// expandRange expands "a..b" or "a..b/s" into at most limit values.
func expandRange(r string, limit int) ([]string, error) {
	bounds, step, hasStep := strings.Cut(r, "/")
	lo, hi, _ := strings.Cut(bounds, "..")
	if lm, lr, ok := strings.Cut(strings.TrimSpace(lo), "."); ok && lm != "0" {
		// Releases, "2.1..2.11": the second numbers, after the same first.
		if hm, hr, ok := strings.Cut(strings.TrimSpace(hi), "."); ok && hm == lm {
			if _, err := strconv.ParseUint(lm, 10, 64); err == nil {
				inner := lr + ".." + hr + r[len(bounds):]
				vals, err := expandRange(inner, limit)
				if err != nil {
					// Said of the range as written: 'end "x"' of "2.1..2.x".
					return nil, fmt.Errorf("range %q: %s", r, strings.TrimPrefix(err.Error(), fmt.Sprintf("range %q: ", inner)))
				}
				for i := range vals {
					vals[i] = lm + "." + vals[i]
				}
				return vals, nil
			}
		}
	}
	a, err := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("range %q: start %q is not an integer", r, strings.TrimSpace(lo))
	}
	b, err := strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("range %q: end %q is not an integer", r, strings.TrimSpace(hi))
	}
	s := int64(1)
	if hasStep {
		s, err = strconv.ParseInt(strings.TrimSpace(step), 10, 64)
		if err != nil || s <= 0 {
			return nil, fmt.Errorf("range %q: step %q is not a positive integer", r, strings.TrimSpace(step))
		}
	}
	if a > b {
		return nil, fmt.Errorf("range %q: start %d is above end %d", r, a, b)
	}
	// (b-a)/s+1 values, computed in unsigned arithmetic (b-a may not fit
	// in an int64), with
	// the +1 after the comparison, where it cannot overflow.
	span := (uint64(b) - uint64(a)) / uint64(s)
	if limit <= 0 || span > uint64(limit-1) {
		return nil, fmt.Errorf("range %q: more than %d values", r, maxVariants)
	}
	n := span + 1
	out := make([]string, 0, n)
	for i := uint64(0); i < n; i++ {
		out = append(out, strconv.FormatInt(a+int64(i*uint64(s)), 10))
	}
	return out, nil
}

// expandSettings expands a value made of settings, read by parse (a
// [Param]'s Settings): each setting's value expanded by [expandValue]; the
// variants are the product of the settings', the first varying slowest,
// each written back by the parser.
func expandSettings(v string, parse func(string) ([]KeyValue, func([]string) string)) ([]string, error) {
	settings, with := parse(v)
	combos := [][]string{nil}
	for _, s := range settings {
		alts := []string{s.Value}
		if isSweep(s.Value) {
			vals, err := expandValue(s.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", s.Key, err)
			}
			alts = vals
		}
		if len(combos)*len(alts) > maxVariants {
			return nil, fmt.Errorf("%q: more than %d variants", v, maxVariants)
		}
		next := make([][]string, 0, len(combos)*len(alts))
		for _, prefix := range combos {
			for _, a := range alts {
				next = append(next, append(prefix[:len(prefix):len(prefix)], a))
			}
		}
		combos = next
	}
	out := make([]string, len(combos))
	for i, values := range combos {
		out[i] = with(values)
	}
	return out, nil
}

// Expand returns the variants that p stands for: p itself when no value
// it was given (by the spec or by an environment variable) is a sweep, else
// one Params per combination of the values, as described above, in order,
// each of which records the parameters the sweep chose (see
// [Params.Swept]). An error names the parameter and where its value came
// from, as [Params.Errorf] does.
func (p *Params) Expand() ([]*Params, error) {
	out := []*Params{p}
	for i, v := range p.vals {
		if v.source == "" || !isSweep(v.value) {
			continue
		}
		var vals []string
		var err error
		if v.Settings != nil {
			vals, err = expandSettings(v.value, v.Settings)
		} else {
			vals, err = expandValue(v.value)
		}
		if err != nil {
			return nil, p.Errorf(v.Name, "%v", err)
		}
		if len(out)*len(vals) > maxVariants {
			return nil, p.Errorf(v.Name, "the variants of %s number more than %d", p.strategy, maxVariants)
		}
		next := make([]*Params, 0, len(out)*len(vals))
		for _, q := range out {
			for _, x := range vals {
				c := *q
				c.vals = append([]paramValue(nil), q.vals...)
				c.vals[i].value, c.vals[i].swept = x, true
				next = append(next, &c)
			}
		}
		out = next
	}
	return out, nil
}
