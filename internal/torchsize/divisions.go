package torchsize

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Intervals is the number of intervals of roundup_power2_divisions
// (kRoundUpPowerOfTwoIntervals): [1, 2) MiB with the smaller sizes, [2, 4)
// MiB, ..., [32, 64) GiB with the larger sizes.
const Intervals = 16

// Interval returns the roundup_power2_divisions interval of size >= 1.
func Interval(size int64) int {
	i := bits.Len64(uint64(size)) - 1 - 20
	return min(max(i, 0), Intervals-1)
}

// MiBInterval returns the interval that a key of roundup_power2_divisions
// names by its first MiB, mb, a power of two: the interval [mb, 2*mb) MiB,
// the last one for mb of 32768 and more.
func MiBInterval(mb uint64) int {
	return min(bits.Len64(mb)-1, Intervals-1)
}

// RoundSize returns the size of the block PyTorch sets aside for a request
// of size bytes (round_size in c10/cuda/CUDACachingAllocator.cpp), with
// divisions the roundup_power2_divisions of each interval: 512 bytes at
// least; with d the divisions of the request's interval, if d > 1 and size
// > 512*d, the next of d equal steps between the powers of two around size
// (a power of two stays); else a multiple of 512. It returns 0 for size < 1
// or when the result would overflow.
func RoundSize(size int64, divisions *[Intervals]int64) int64 {
	if size < 1 {
		return 0
	}
	if size < MinBlockSize {
		return MinBlockSize
	}
	d := divisions[Interval(size)]
	if d > 1 && size > MinBlockSize*d {
		if size&(size-1) == 0 {
			return size
		}
		floor := int64(1) << (bits.Len64(uint64(size)) - 1)
		step := floor >> (bits.Len64(uint64(d)) - 1)
		if step == 0 {
			return floor << 1
		}
		r := size &^ (step - 1)
		if r == size {
			return size
		}
		if r > math.MaxInt64-step {
			return 0
		}
		return r + step
	}
	return RoundToBlock(size)
}

// ParseDivisions parses roundup_power2_divisions as PyTorch's
// CUDAAllocatorConfig::parseRoundUpPower2Divisions reads it: one number for
// every interval, or a list "[256:1,512:2,>:8]" of MiB:divisions (0: none)
// (";" may stand for ",", and the brackets may be left out, so that a spec
// can carry it). The first entry also sets every interval below it, and ">"
// sets every interval from the last one named (that one included) on.
func ParseDivisions(v string) ([Intervals]int64, error) {
	var d [Intervals]int64
	s := strings.TrimSpace(v)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	s = strings.ReplaceAll(s, ";", ",")
	if !strings.Contains(s, ":") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < 0 || n&(n-1) != 0 {
			return d, fmt.Errorf("divisions must be a power of two (or 0: none)")
		}
		for i := range d {
			d[i] = n
		}
		return d, nil
	}
	first, last := true, 0
	for _, e := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(e, ":")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		if !ok {
			return d, fmt.Errorf("entry %q: want MiB:divisions", e)
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 || n&(n-1) != 0 {
			return d, fmt.Errorf("entry %q: divisions must be a power of two (or 0: none)", e)
		}
		if k == ">" {
			for i := last; i < Intervals; i++ {
				d[i] = n
			}
			continue
		}
		mb, err := strconv.ParseInt(k, 10, 64)
		if err != nil || mb <= 0 || mb&(mb-1) != 0 {
			return d, fmt.Errorf("entry %q: the interval must be a power of two of MiB", e)
		}
		i := MiBInterval(uint64(mb))
		if first {
			for j := 0; j < i; j++ {
				d[j] = n
			}
			first = false
		}
		d[i] = n
		last = i
	}
	return d, nil
}

// FormatDivisions writes roundup_power2_divisions in PYTORCH_CUDA_ALLOC_CONF
// syntax: one number when every interval has the same divisions, else a
// list of the intervals with divisions, "[1:4,2:8,1024:2]", in which an
// interval not named has none ("1:0" comes first when the first interval
// has none, since PyTorch gives the intervals before the first one named
// its divisions).
func FormatDivisions(d [Intervals]int64) string {
	same := true
	for _, x := range d {
		same = same && x == d[0]
	}
	if same {
		return strconv.FormatInt(d[0], 10)
	}
	var parts []string
	for i, x := range d {
		if x != 0 || i == 0 {
			parts = append(parts, strconv.FormatInt(1<<i, 10)+":"+strconv.FormatInt(x, 10))
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}
