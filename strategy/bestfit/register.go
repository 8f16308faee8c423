package bestfit

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name: name,
		Summary: "best fit on (size, address) with splitting and coalescing inside device segments, O(log n): " +
			"the family of TensorFlow's BFC (round=256,min_block=256,split_threshold=256,grow=double,chunk=2MiB), " +
			"RMM's pool with initial_pool_size S (round=256,min_block=256,split_threshold=256,grow=double,chunk=S,initial=S), " +
			"Paddle's auto_growth (round=256,min_block=256,split_threshold=256,grow=exact) and CuPy (grow=exact)",
		Params: []gpualloc.Param{
			{Name: "round", Default: "512", Doc: "every request is rounded up to a multiple of this many bytes, a power of two of at least 256 (TensorFlow, RMM and Paddle use 256, CuPy and PyTorch 512)"},
			{Name: "min_block", Default: "512", Doc: "smallest block handed out in bytes, a multiple of round"},
			{Name: "split_threshold", Default: "512", Doc: "a free block larger than the request is split when the rest is at least this many bytes, else handed out whole (at most round: always split, so Size is exactly the rounded request)"},
			{Name: "grow", Default: "chunk", Doc: "segment size when no free block fits: exact (the block needed: Paddle auto_growth, CuPy), chunk (at least chunk bytes), double (from chunk, doubling: TensorFlow BFC, RMM pool)"},
			{Name: "chunk", Default: "20971520", Doc: "smallest segment in bytes with grow=chunk, first segment with grow=double (20 MiB: PyTorch's large segment)"},
			{Name: "initial", Default: "0", Doc: "bytes of a segment taken from the device when the pool is made, as RMM's initial_pool_size (0: none)"},
		},
		New: param.Opener(readConfig, New),
	})
}

// readConfig reads a Config from resolved registry parameters.
func readConfig(r *param.Reader) Config {
	return Config{
		Round:          r.Size("round"),
		MinBlock:       r.Size("min_block"),
		SplitThreshold: r.Size("split_threshold"),
		Grow:           Growth(param.Enum(r, "grow", segment.ParseGrowth, segment.GrowthNames)),
		Chunk:          r.Size("chunk"),
		Initial:        r.Size("initial"),
	}
}
