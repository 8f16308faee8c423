package tlsf

import "github.com/gpualloc/gpualloc/strategy/internal/segment"

// Config are the parameters of a TLSF pool. Every size is in bytes.
type Config struct {
	// Round is the granularity of blocks, a power of two of at least 256
	// (the alignment cudaMalloc guarantees): every request is rounded up to
	// a multiple of Round.
	Round int64

	// MinBlock is the smallest block handed out, a multiple of Round. A
	// block's Size is max(MinBlock, size rounded up to Round); see
	// [Config.RoundSize].
	MinBlock int64

	// Chunk is the smallest segment taken from the device, rounded up to a
	// multiple of Round; a request that does not fit in one gets a segment
	// of its own (see the package documentation). It must be positive.
	Chunk int64
}

// DefaultConfig returns the defaults: 512-byte rounding and smallest block,
// as bestfit's defaults, and segments of at least 20 MiB, as bestfit's and
// PyTorch's large segments, so that a comparison of the two strategies
// isolates their free-block index: best fit against TLSF's good fit.
func DefaultConfig() Config {
	return Config{Round: 512, MinBlock: 512, Chunk: 20 << 20}
}

// RoundSize returns the size of the block a pool with configuration c sets
// aside for a request of size bytes: max(MinBlock, size rounded up to a
// multiple of Round). It returns 0 for a size below 1 and for one whose
// rounded size would not fit in an int64. c must be valid (see [New]).
func (c Config) RoundSize(size int64) int64 { return c.segment().RoundSize(size) }

func (c Config) segment() segment.Config {
	return segment.Config{
		Round:          c.Round,
		MinBlock:       c.MinBlock,
		SplitThreshold: c.Round, // every rest is split off
		Grow:           segment.GrowChunk,
		Chunk:          c.Chunk,
	}
}
