package snapshot

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc/internal/torchsize"
)

// Rules are the settings of PyTorch's caching allocator that decide the
// sizes of its blocks, and so what a snapshot's trace implies about them:
// how a request is rounded and when the rest of a free block is split off.
type Rules struct {
	// Divisions are roundup_power2_divisions, per interval.
	Divisions [Intervals]int64
	// MaxSplitSize is max_split_size in bytes, or NoMaxSplitSize.
	MaxSplitSize int64
	// MaxNonSplitRounding is max_non_split_rounding in bytes: a request of
	// at least MaxSplitSize is served from a free block at most this much
	// larger, which it takes whole.
	MaxNonSplitRounding int64
	// Expandable is expandable_segments.
	Expandable bool
	// Pad is the bytes added to every request before rounding it: 0 for
	// PyTorch, NPUPad for torch_npu.
	Pad int64
}

// DefaultRules are the rules of an allocator configured with nothing.
func DefaultRules() Rules {
	return Rules{MaxSplitSize: NoMaxSplitSize, MaxNonSplitRounding: torchsize.LargeBuffer}
}

// Rules returns the rules of the allocator that took the snapshot: from its
// effective settings where the file records them, else from Conf
// (max_split_size_mb, roundup_power2_divisions, expandable_segments);
// max_non_split_rounding_mb always from Conf, since PyTorch does not record
// it. Settings s nil give [DefaultRules]. A value of Conf that PyTorch
// would not have accepted is an error naming it.
func (s *AllocatorSettings) Rules() (Rules, error) {
	r := DefaultRules()
	if s == nil {
		return r, nil
	}
	if s.Effective {
		r.Divisions, r.MaxSplitSize, r.Expandable = s.RoundupPower2Divisions, s.MaxSplitSize, s.ExpandableSegments
	}
	for _, item := range SplitConf(s.Conf) {
		k, v, _ := strings.Cut(item, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		bad := func(err error) (Rules, error) {
			return r, fmt.Errorf("allocator_settings: %s:%s: %v", k, v, err)
		}
		switch {
		case k == "max_non_split_rounding_mb":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > math.MaxInt64>>20 {
				return bad(fmt.Errorf("not a number of MiB"))
			}
			r.MaxNonSplitRounding = n << 20
		case s.Effective:
		case k == "max_split_size_mb":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < torchsize.LargeBuffer>>20 {
				return bad(fmt.Errorf("not a number of MiB of at least 20"))
			}
			if n < math.MaxInt64>>20 {
				r.MaxSplitSize = n << 20
			}
		case k == "roundup_power2_divisions":
			d, err := torchsize.ParseDivisions(v)
			if err != nil {
				return bad(err)
			}
			r.Divisions = d
		case k == "expandable_segments":
			r.Expandable = v == "True"
		}
	}
	return r, nil
}

// RoundSize returns the size of the block for a request of n bytes
// (round_size).
func (r *Rules) RoundSize(n int64) int64 {
	if n < 1 || n > math.MaxInt64-r.Pad {
		return torchsize.RoundSize(n, &r.Divisions)
	}
	return torchsize.RoundSize(n+r.Pad, &r.Divisions)
}

// split reports whether PyTorch splits rest bytes off a free block that
// serves a request rounded to rounded bytes (should_split): in the small
// pool and with expandable segments when the rest is at least 512 bytes;
// in the large pool when the request is under max_split_size and the rest
// more than 1 MiB.
func (r *Rules) split(small bool, rounded, rest int64) bool {
	if small || r.Expandable {
		return rest >= torchsize.MinBlockSize
	}
	return !r.oversize(rounded) && rest > torchsize.SmallSize
}

// oversize reports whether a block of the large pool of size bytes is
// never split: at least max_split_size.
func (r *Rules) oversize(size int64) bool {
	return r.MaxSplitSize != NoMaxSplitSize && size >= r.MaxSplitSize
}
