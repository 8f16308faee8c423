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
//	64|128|inf    each alternative in turn; an alternative may itself be a range
//
// When several parameters vary, the variants are their cartesian product,
// the first parameter in the strategy's order varying slowest. A value in
// PYTORCH_CUDA_ALLOC_CONF syntax (a parameter declared with Settings, such as
// the pytorch strategy's conf) varies setting by setting:
// "max_split_size_mb:64|128,expandable_segments:True|False" is four
// variants. The same holds where the value comes from: a spec, or an
// environment variable (GPUALLOC_POOL_TYPE, PYTORCH_CUDA_ALLOC_CONF,
// MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF...).

// MaxVariants bounds the variants one spec may expand to.
const MaxVariants = 4096

// IsSweep reports whether a value names several values: whether it holds a
// range ("..") or a list ("|").
func IsSweep(v string) bool { return strings.Contains(v, "..") || strings.Contains(v, "|") }

// ExpandValue returns the values a parameter's value stands for, in order:
// the value itself when it is no sweep. Its errors say what is wrong with
// the range or list, without naming the parameter (the caller does).
func ExpandValue(v string) ([]string, error) {
	if !IsSweep(v) {
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
		vals, err := expandRange(alt, MaxVariants-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, vals...)
		if len(out) > MaxVariants {
			return nil, fmt.Errorf("%q: more than %d values", v, MaxVariants)
		}
	}
	if len(out) > MaxVariants {
		return nil, fmt.Errorf("%q: more than %d values", v, MaxVariants)
	}
	return out, nil
}

// expandRange expands "a..b" or "a..b/s" into at most limit values.
func expandRange(r string, limit int) ([]string, error) {
	bounds, step, hasStep := strings.Cut(r, "/")
	lo, hi, _ := strings.Cut(bounds, "..")
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
		return nil, fmt.Errorf("range %q: more than %d values", r, MaxVariants)
	}
	n := span + 1
	out := make([]string, 0, n)
	for i := uint64(0); i < n; i++ {
		out = append(out, strconv.FormatInt(a+int64(i*uint64(s)), 10))
	}
	return out, nil
}

// expandSettings expands a value in PYTORCH_CUDA_ALLOC_CONF syntax: items
// "key:value" separated by commas outside brackets, each value expanded by
// [ExpandValue]; the variants are the product of the items', the first
// varying slowest, each written back in the same syntax.
func expandSettings(v string) ([]string, error) {
	if !IsSweep(v) {
		return []string{v}, nil
	}
	out := []string{""}
	for i, item := range SplitSettings(v) {
		k, val, ok := strings.Cut(item, ":")
		alts := []string{item}
		if ok && IsSweep(val) {
			vals, err := ExpandValue(val)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", strings.TrimSpace(k), err)
			}
			alts = alts[:0]
			for _, x := range vals {
				alts = append(alts, strings.TrimSpace(k)+":"+x)
			}
		}
		var next []string
		for _, prefix := range out {
			for _, a := range alts {
				if i > 0 {
					a = prefix + "," + a
				}
				next = append(next, a)
			}
		}
		if len(next) > MaxVariants {
			return nil, fmt.Errorf("%q: more than %d variants", v, MaxVariants)
		}
		out = next
	}
	return out, nil
}

// SplitSettings splits a value in PYTORCH_CUDA_ALLOC_CONF syntax into its
// settings ("key:value") at the commas outside brackets, as PyTorch's parser
// reads it (c10/core/AllocatorConfig.cpp): one trailing comma after the last
// setting is allowed and gives no setting, so that "a:1," and "a:1" are the
// same and a blank string has none; any other empty setting ("a:1,,b:2",
// ",a:1") is kept, as "", for the caller to reject as PyTorch does.
// Settings are not trimmed.
func SplitSettings(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, s[start:])
	}
	return out
}

// Expand returns the variants that p stands for: p itself when no value
// it was given (by the spec or by an environment variable) is a sweep, else
// one Params per combination of the values, as described above, in order.
// An error names the parameter and where its value came from, as
// [Params.Errorf] does.
func (p *Params) Expand() ([]*Params, error) {
	out := []*Params{p}
	for i, v := range p.vals {
		if v.source == "" || !IsSweep(v.value) {
			continue
		}
		expand := ExpandValue
		if v.Settings {
			expand = expandSettings
		}
		vals, err := expand(v.value)
		if err != nil {
			return nil, p.Errorf(v.Name, "%v", err)
		}
		if len(out)*len(vals) > MaxVariants {
			return nil, p.Errorf(v.Name, "the variants of %s number more than %d", p.strategy, MaxVariants)
		}
		next := make([]*Params, 0, len(out)*len(vals))
		for _, q := range out {
			for _, x := range vals {
				c := *q
				c.vals = append([]paramValue(nil), q.vals...)
				c.vals[i].value = x
				next = append(next, &c)
			}
		}
		out = next
	}
	return out, nil
}
