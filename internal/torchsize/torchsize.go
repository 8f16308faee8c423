// Package torchsize holds the size rules of PyTorch's CUDA caching
// allocator (c10/cuda/CUDACachingAllocator.cpp) that every part of the
// module modelling it follows: the pytorch strategy, the gmlake strategy
// (which adapts it), and the snapshot package's rebuild of a snapshot's
// starting state. They are its constants, the rounding of a request to a
// block (round_size, with roundup_power2_divisions), the size of the
// segment allocated for a block (get_allocation_size), and the syntax of
// roundup_power2_divisions. Each is O(1) and allocates nothing, but for
// the parsing and formatting of divisions.
package torchsize

import "math"

// PyTorch's constants.
const (
	MinBlockSize  = 512      // kMinBlockSize: every block is a multiple of this
	SmallSize     = 1 << 20  // kSmallSize: largest request of the small pool
	SmallBuffer   = 2 << 20  // kSmallBuffer: segment of the small pool
	LargeBuffer   = 20 << 20 // kLargeBuffer: segment for requests under MinLargeAlloc
	MinLargeAlloc = 10 << 20 // kMinLargeAlloc
	RoundLarge    = 2 << 20  // kRoundLarge: larger segments are multiples of this
)

// RoundToBlock returns size rounded up to a multiple of MinBlockSize, at
// least MinBlockSize: round_size without roundup_power2_divisions. It
// returns 0 for size < 1 or when the result would overflow.
func RoundToBlock(size int64) int64 {
	switch {
	case size < 1:
		return 0
	case size < MinBlockSize:
		return MinBlockSize
	case size > math.MaxInt64-(MinBlockSize-1):
		return 0
	}
	return (size + MinBlockSize - 1) &^ (MinBlockSize - 1)
}

// AllocationSize returns the size of the segment allocated for a block of
// rounded bytes (get_allocation_size): SmallBuffer for the small pool (at
// most SmallSize), LargeBuffer for requests under MinLargeAlloc, else
// rounded up to a multiple of RoundLarge; 0 when that would overflow.
func AllocationSize(rounded int64) int64 {
	switch {
	case rounded <= SmallSize:
		return SmallBuffer
	case rounded < MinLargeAlloc:
		return LargeBuffer
	case rounded > math.MaxInt64-(RoundLarge-1):
		return 0
	}
	return (rounded + RoundLarge - 1) &^ (RoundLarge - 1)
}
