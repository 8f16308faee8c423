package bestfit

import "github.com/gpualloc/gpualloc/strategy/internal/segment"

// Growth is how a [Pool] sizes the segments it takes from the device when no
// free block fits a request.
type Growth uint8

const (
	// GrowExact takes a segment of exactly the block needed, as Paddle's
	// auto-growth allocator (with FLAGS_auto_growth_chunk_size_in_mb=0,
	// its default) and CuPy's memory pool do.
	GrowExact Growth = iota
	// GrowChunk takes a segment of Config.Chunk bytes, or of the block
	// needed if that is larger.
	GrowChunk
	// GrowDouble takes segments that double in size, from Config.Chunk
	// bytes, by TensorFlow's rule (BFCAllocator::Extend): the size doubles
	// until the block needed fits, and after a segment that did not need
	// that, the next is twice as large. RMM's pool_memory_resource grows by
	// max(request, pool size), doubling the pool: with Chunk and Initial
	// both its initial pool size S, the segments are the same, S, S, 2S,
	// 4S and so on, as long as requests are smaller than the pool.
	GrowDouble
)

// String returns the name of g in a spec: "exact", "chunk" or "double".
func (g Growth) String() string { return segment.Growth(g).String() }

// Config are the parameters of a best-fit pool. Every size is in bytes.
type Config struct {
	// Round is the granularity of blocks, a power of two of at least 256
	// (the alignment cudaMalloc guarantees, so that every block is as
	// aligned as a device allocation): every request is rounded up to a
	// multiple of Round.
	Round int64

	// MinBlock is the smallest block handed out, a multiple of Round. A
	// block's Size is max(MinBlock, size rounded up to Round); see
	// [Config.RoundSize].
	MinBlock int64

	// SplitThreshold is the smallest rest worth keeping as a free block:
	// when the best free block is larger than the rounded request, it is
	// split if the rest is at least SplitThreshold bytes, and handed out
	// whole otherwise (its Size then exceeds the rounded request). Since
	// every size is a multiple of Round, a SplitThreshold of at most Round
	// always splits, and every block's Size is exactly the rounded request;
	// a larger one trades that exactness for fewer small free blocks.
	SplitThreshold int64

	// Grow is the growth policy, and Chunk its segment size: the smallest
	// segment under GrowChunk, the first under GrowDouble (ignored under
	// GrowExact). It must be positive. Segment sizes are rounded up to a
	// multiple of Round.
	Grow  Growth
	Chunk int64

	// Initial, if positive, is the size of a segment that [New] takes from
	// the device at once, as RMM's pool_memory_resource takes its initial
	// pool and TensorFlow its first region. It is an ordinary segment: a
	// release returns it to the device once it is entirely free. 0 means
	// none.
	Initial int64
}

// DefaultConfig returns the defaults: 512-byte rounding and smallest block
// (PyTorch's and CuPy's granularity), every rest split off, segments of at
// least 20 MiB (PyTorch's large segments), no initial segment.
func DefaultConfig() Config {
	return Config{
		Round:          512,
		MinBlock:       512,
		SplitThreshold: 512,
		Grow:           GrowChunk,
		Chunk:          20 << 20,
	}
}

// RoundSize returns the size of the block a pool with configuration c sets
// aside for a request of size bytes, when no split is refused:
// max(MinBlock, size rounded up to a multiple of Round). It returns 0 for a
// size below 1 and for one whose rounded size would not fit in an int64. c
// must be valid (see [New]).
func (c Config) RoundSize(size int64) int64 { return c.segment().RoundSize(size) }

func (c Config) segment() segment.Config {
	return segment.Config{
		Round:          c.Round,
		MinBlock:       c.MinBlock,
		SplitThreshold: c.SplitThreshold,
		Grow:           segment.Growth(c.Grow),
		Chunk:          c.Chunk,
		Initial:        c.Initial,
	}
}
