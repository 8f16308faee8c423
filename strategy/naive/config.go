package naive

import (
	"math"

	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// Config are the parameters of a Naive pool.
type Config struct {
	// Page is the granularity of blocks: every request is rounded up to a
	// multiple of Page bytes. It must be at least 32. MXNet reads it from
	// MXNET_GPU_MEM_POOL_PAGE_SIZE (MXNet 2: MXNET_GPU_POOL_PAGE_SIZE).
	Page int64

	// LargeRound is the granularity of large blocks: a request that rounds
	// to more than LargeRound bytes is rounded up again to a multiple of
	// LargeRound, so that large blocks fill whole slabs of the driver. It
	// must be positive; 1 turns the second rounding off. MXNet reads it from
	// MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE.
	LargeRound int64

	// Reserve is the share of the device, in percent from 0 to 100, to keep
	// free: before a device allocation that would leave less free, the pool
	// releases every cached block. MXNet reads it from
	// MXNET_GPU_MEM_POOL_RESERVE.
	Reserve int
}

// DefaultConfig returns MXNet's defaults: 4096-byte pages, large blocks
// rounded to 2 MiB, 5% of the device kept free.
func DefaultConfig() Config {
	return Config{Page: 4096, LargeRound: 2 << 20, Reserve: 5}
}

// RoundSize returns the size of the block a pool with configuration c sets
// aside for a request of size bytes, MXNet's RoundAllocSize:
//
//	size = RoundToMultiple(size, Page)
//	if size > LargeRound { size = RoundToMultiple(size, LargeRound) }
//
// where RoundToMultiple(x, m) = ((x + m - 1) / m) * m. It returns 0 for a
// size below 1 and for one whose rounded size would not fit in an int64.
// c must be valid (see [New]).
func (c Config) RoundSize(size int64) int64 {
	if size < 1 {
		return 0
	}
	s := roundToMultiple(uint64(size), uint64(c.Page))
	if s > math.MaxInt64 {
		return 0
	}
	if s > uint64(c.LargeRound) {
		s = roundToMultiple(s, uint64(c.LargeRound))
	}
	if s > math.MaxInt64 {
		return 0
	}
	return int64(s)
}

// roundToMultiple is MXNet's RoundToMultiple. For x and m below 2^63 it
// cannot overflow.
func roundToMultiple(x, m uint64) uint64 { return (x + m - 1) / m * m }

// validate reports the first parameter of c, other than Reserve, that MXNet
// would reject; [mxnetpool.New] checks Reserve.
func (c Config) validate() error {
	switch {
	case c.Page < 32:
		return param.Error(name, "page", c.Page, "must be at least 32")
	case c.LargeRound <= 0:
		return param.Error(name, "large_round", c.LargeRound, "must be positive")
	}
	return nil
}
