// Package caching holds the rules of PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp) that strategy/pytorch and
// strategy/gmlake, which adapts it, both follow: its constants, the
// rounding of a request to whole blocks and the size of the segment
// allocated for one.
package caching

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
