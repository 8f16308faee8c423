package fidelity

import (
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// Conf turns a snapshot's allocator_settings into a configuration in
// PYTORCH_CUDA_ALLOC_CONF syntax, for the pytorch strategy's ParseConf.
//
// The keys read are the effective settings that PyTorch records:
//
//   - max_split_size (bytes, -1 or the largest size_t for no limit):
//     max_split_size_mb;
//   - roundup_power2_divisions (a dict from an interval's size in MiB,
//     "1" to "32768", to its divisions; or one integer):
//     roundup_power2_divisions, as one integer when every interval has the
//     same divisions, as a list "[1:4,2:8,...]" otherwise; all 0 is left out;
//   - garbage_collection_threshold (0 for off);
//   - expandable_segments (a bool);
//   - last_allocator_settings: a dict of the same keys, read for those that
//     the top level lacks.
//
// When none of these keys is there (a file from before PyTorch recorded
// them), the raw PYTORCH_CUDA_ALLOC_CONF string is read instead, keeping
// only its options among those above. Every other key (the pinned-memory
// options, release_lock_on_cudamalloc, the backend) is ignored: it does not
// change where a block goes. The defaults give "".
func Conf(settings map[string]any) (string, error) {
	get := func(k string) (any, bool) {
		if v, ok := settings[k]; ok && v != nil {
			return v, true
		}
		if last, ok := settings["last_allocator_settings"].(map[string]any); ok {
			if v, ok := last[k]; ok && v != nil {
				return v, true
			}
		}
		return nil, false
	}
	var opts []string
	found := false
	if v, ok := get("max_split_size"); ok {
		found = true
		n, ok := toInt(v)
		switch {
		case !ok && isMaxUint(v):
		case !ok:
			return "", fmt.Errorf("allocator_settings.max_split_size: not an integer: %v", v)
		case n >= 0 && n < math.MaxInt64:
			opts = append(opts, "max_split_size_mb:"+strconv.FormatInt(n>>20, 10))
		}
	}
	if v, ok := get("roundup_power2_divisions"); ok {
		found = true
		s, err := divisions(v)
		if err != nil {
			return "", err
		}
		if s != "" {
			opts = append(opts, "roundup_power2_divisions:"+s)
		}
	}
	if v, ok := get("garbage_collection_threshold"); ok {
		found = true
		f, ok := toFloat(v)
		if !ok {
			return "", fmt.Errorf("allocator_settings.garbage_collection_threshold: not a number: %v", v)
		}
		if f > 0 {
			opts = append(opts, "garbage_collection_threshold:"+strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	if v, ok := get("expandable_segments"); ok {
		found = true
		b, ok := v.(bool)
		if !ok {
			n, isInt := toInt(v)
			if !isInt {
				return "", fmt.Errorf("allocator_settings.expandable_segments: not a bool: %v", v)
			}
			b = n != 0
		}
		if b {
			opts = append(opts, "expandable_segments:True")
		}
	}
	if !found {
		if raw, ok := settings["PYTORCH_CUDA_ALLOC_CONF"].(string); ok {
			for _, o := range splitConf(raw) {
				k, _, _ := strings.Cut(o, ":")
				switch strings.TrimSpace(k) {
				case "max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold", "expandable_segments":
					opts = append(opts, strings.TrimSpace(o))
				}
			}
		}
	}
	return strings.Join(opts, ","), nil
}

// splitConf splits a PYTORCH_CUDA_ALLOC_CONF string at the commas outside
// brackets.
func splitConf(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
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

func divisions(v any) (string, error) {
	if n, ok := toInt(v); ok {
		if n == 0 {
			return "", nil
		}
		return strconv.FormatInt(n, 10), nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "", fmt.Errorf("allocator_settings.roundup_power2_divisions: not a dict: %v", v)
	}
	type iv struct{ mb, div int64 }
	var ivs []iv
	for k, d := range m {
		mb, err := strconv.ParseInt(k, 10, 64)
		n, ok := toInt(d)
		if err != nil || !ok || mb <= 0 || n < 0 {
			return "", fmt.Errorf("allocator_settings.roundup_power2_divisions: bad entry %q: %v", k, d)
		}
		ivs = append(ivs, iv{mb, n})
	}
	if len(ivs) == 0 {
		return "", nil
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].mb < ivs[j].mb })
	same := true
	for _, x := range ivs {
		same = same && x.div == ivs[0].div
	}
	if same {
		if ivs[0].div == 0 {
			return "", nil
		}
		return strconv.FormatInt(ivs[0].div, 10), nil
	}
	parts := make([]string, len(ivs))
	for i, x := range ivs {
		parts[i] = strconv.FormatInt(x.mb, 10) + ":" + strconv.FormatInt(x.div, 10)
	}
	return "[" + strings.Join(parts, ",") + "]", nil
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func isMaxUint(v any) bool {
	b, ok := v.(*big.Int)
	return ok && b.Sign() > 0
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	}
	return 0, false
}
