package segment

import (
	"fmt"
	"math/bits"

	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// Growth is how a [Heap] sizes the segments it takes from the device.
type Growth uint8

const (
	// GrowExact takes a segment of exactly the request (after rounding), as
	// Paddle's auto-growth allocator does with chunk size 0 and CuPy's pool
	// always does.
	GrowExact Growth = iota
	// GrowChunk takes a segment of at least Config.Chunk bytes, more only
	// for a request that does not fit in one.
	GrowChunk
	// GrowDouble takes segments that double in size, from Config.Chunk
	// bytes, as TensorFlow's BFC allocator grows its regions.
	GrowDouble
)

// String returns the name of g as a spec writes it: "exact", "chunk" or
// "double".
func (g Growth) String() string { return param.Name(growthNames[:], "Growth", g) }

var growthNames = [...]string{GrowExact: "exact", GrowChunk: "chunk", GrowDouble: "double"}

// GrowthNames is what a bad growth policy is told.
const GrowthNames = "must be exact, chunk or double"

// ParseGrowth returns the Growth named s, as String writes it.
func ParseGrowth(s string) (Growth, bool) { return param.Parse[Growth](growthNames[:], s) }

// MinRound is the smallest rounding a Heap accepts: the alignment cudaMalloc
// guarantees, so that every block a Heap hands out is as aligned as a
// device allocation.
const MinRound = 256

// Config says how a [Heap] rounds requests, splits free blocks and grows.
type Config struct {
	// Round is the granularity of blocks, a power of two of at least
	// MinRound: a request is rounded up to a multiple of it.
	Round int64
	// MinBlock is the smallest block handed out, a multiple of Round.
	MinBlock int64
	// SplitThreshold is the smallest rest worth keeping as a free block:
	// a free block larger than the request is split when the rest is at
	// least SplitThreshold bytes, else handed out whole.
	SplitThreshold int64
	// Grow is the growth policy, and Chunk its segment size: the smallest
	// segment under GrowChunk, the first under GrowDouble. Segment sizes
	// are rounded up to a multiple of Round.
	Grow  Growth
	Chunk int64
	// Initial, if positive, is the size of a segment taken from the device
	// when the Heap is made (rounded up to a multiple of Round).
	Initial int64
}

// Validate reports the first parameter of c out of range, as an error that
// names the strategy, the parameter and the value and wraps a
// [*gpualloc.ParamError]. The keys are the registry's: round, min_block,
// split_threshold, grow, chunk, initial.
func (c Config) Validate(strategy string) error {
	switch {
	case c.Round < MinRound || bits.OnesCount64(uint64(c.Round)) != 1:
		return param.Error(strategy, "round", c.Round, "must be a power of two of at least 256")
	case c.MinBlock < c.Round || c.MinBlock%c.Round != 0:
		return param.Error(strategy, "min_block", c.MinBlock, fmt.Sprintf("must be a positive multiple of round (%d)", c.Round))
	case c.SplitThreshold < 0:
		return param.Error(strategy, "split_threshold", c.SplitThreshold, "must not be negative")
	case c.Grow > GrowDouble:
		return param.Error(strategy, "grow", c.Grow, GrowthNames)
	case c.Chunk < 1:
		return param.Error(strategy, "chunk", c.Chunk, "must be positive")
	case c.Initial < 0:
		return param.Error(strategy, "initial", c.Initial, "must not be negative")
	}
	return nil
}

// RoundSize returns the size of the block set aside for a request of size
// bytes: max(MinBlock, size rounded up to a multiple of Round). It returns 0
// for a size below 1 and for one whose rounded size would not fit in an
// int64. c must be valid.
func (c Config) RoundSize(size int64) int64 {
	if size < 1 {
		return 0
	}
	s, ok := alignUp(size, c.Round)
	if !ok {
		return 0
	}
	return max(s, c.MinBlock)
}

// alignUp rounds x >= 0 up to a multiple of the power of two a, reporting
// false when the result would not fit in an int64.
func alignUp(x, a int64) (int64, bool) {
	s := (uint64(x) + uint64(a) - 1) &^ (uint64(a) - 1)
	return int64(s), s <= 1<<63-1
}
