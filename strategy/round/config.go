package round

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// Config are the parameters of a Round pool.
type Config struct {
	// Page is the smallest block: every request takes at least Page bytes.
	// It must be a power of two, at least 32. MXNet reads it from
	// MXNET_GPU_MEM_POOL_PAGE_SIZE (MXNet 2: MXNET_GPU_POOL_PAGE_SIZE).
	Page int64

	// Cutoff is where rounding turns from exponential to linear: a request
	// of up to 2^Cutoff bytes is rounded up to a power of two, a larger one
	// to a multiple of 2^Cutoff. It must be from 20 (1 MiB) to 34 (16 GiB)
	// and at least log2(Page). MXNet reads it from
	// MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF.
	Cutoff int

	// Reserve is the share of the device, in percent from 0 to 100, to keep
	// free: before a device allocation that would leave less free, the pool
	// releases every cached block. MXNet reads it from
	// MXNET_GPU_MEM_POOL_RESERVE.
	Reserve int
}

// DefaultConfig returns MXNet's defaults: 4096-byte pages, cutoff 24
// (16 MiB), 5% of the device kept free.
func DefaultConfig() Config {
	return Config{Page: 4096, Cutoff: 24, Reserve: 5}
}

// Bucket returns the bucket of a request of size bytes, MXNet's get_bucket:
//
//	L = ilog2ul(size - 1)                         // ceil(log2(size)) for size >= 2
//	if L > Cutoff { return ceil(size / 2^Cutoff) - 1 + Cutoff }
//	return max(L, log2(Page))
//
// where ilog2ul(a) counts the bits of a, and 1 for a = 0. A size below 1
// counts as 1. c must be valid (see [New]).
func (c Config) Bucket(size int64) int {
	size = max(size, 1)
	l := ilog2ul(uint64(size - 1))
	if l > c.Cutoff {
		// ceil(size / 2^Cutoff), as MXNet's div_pow2_round_up
		q := uint64(size) >> c.Cutoff
		if uint64(size) > q<<c.Cutoff {
			q++
		}
		return int(q) - 1 + c.Cutoff
	}
	return max(l, log2(c.Page))
}

// BucketSize returns the size of the blocks of a bucket, MXNet's get_size:
// 2^b up to the cutoff, (b - Cutoff + 1) * 2^Cutoff beyond. It returns 0 for
// a negative bucket and for one whose size would not fit in an int64.
func (c Config) BucketSize(b int) int64 {
	if b < 0 {
		return 0
	}
	if b <= c.Cutoff {
		return 1 << b
	}
	k := uint64(b - c.Cutoff + 1)
	if k > math.MaxInt64>>c.Cutoff {
		return 0
	}
	return int64(k << c.Cutoff)
}

// RoundSize returns the size of the block a pool with configuration c sets
// aside for a request of size bytes: BucketSize(Bucket(size)). Up to
// 2^Cutoff it is the next power of two (at least Page); beyond, the next
// multiple of 2^Cutoff. It returns 0 for a size whose rounded size would not
// fit in an int64.
func (c Config) RoundSize(size int64) int64 { return c.BucketSize(c.Bucket(size)) }

// ilog2ul is MXNet's common::ilog2ul: k = 1; while (a >>= 1) k++; return k.
func ilog2ul(a uint64) int { return max(bits.Len64(a), 1) }

// log2 returns the base-2 logarithm of a power of two.
func log2(page int64) int { return bits.TrailingZeros64(uint64(page)) }

// validate reports the first parameter of c, other than Reserve, that MXNet
// would reject, in MXNet's order, but for a page above 2^34, which no
// cutoff suits: MXNet blames the cutoff, validate the page.
// [mxnetpool.New] checks Reserve last.
func (c Config) validate() error {
	switch {
	case c.Page < 32:
		return param.Error(name, "page", c.Page, "must be at least 32")
	case c.Page&(c.Page-1) != 0:
		return param.Error(name, "page", c.Page, "must be a power of two")
	case c.Page > 1<<maxCutoff:
		// No cutoff could be at least log2(page): the page is what is
		// wrong, though MXNet would name the cutoff.
		return param.Error(name, "page", c.Page, fmt.Sprintf("must be at most 2^%d (16 GiB), as the cutoff, at most %d, must be at least log2(page)", maxCutoff, maxCutoff))
	case c.Cutoff < minCutoff || c.Cutoff > maxCutoff:
		return param.Error(name, "cutoff", c.Cutoff, cutoffRange)
	case c.Cutoff < log2(c.Page):
		return param.Error(name, "cutoff", c.Cutoff, fmt.Sprintf("must be at least log2(page) = %d", log2(c.Page)))
	}
	return nil
}

// The bounds MXNet puts on the cutoff: 1 MiB to 16 GiB (its LOG2_MAX_MEM).
const (
	minCutoff = 20
	maxCutoff = 34
)

// cutoffRange is what a cutoff outside the bounds is told.
var cutoffRange = fmt.Sprintf("must be from %d to %d", minCutoff, maxCutoff)
