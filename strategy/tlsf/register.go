package tlsf

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    name,
		Summary: "two-level segregated fit (TLSF, Masmano et al. 2004): O(1) good fit with splitting and coalescing inside device segments",
		Params: []gpualloc.Param{
			{Name: "round", Default: "512", Doc: "every request is rounded up to a multiple of this many bytes, a power of two of at least 256"},
			{Name: "min_block", Default: "512", Doc: "smallest block handed out in bytes, a multiple of round"},
			{Name: "chunk", Default: "20971520", Doc: "smallest segment taken from the device in bytes (20 MiB, as bestfit's default and PyTorch's large segments)"},
		},
		New: param.Opener(readConfig, New),
	})
}

// readConfig reads a Config from resolved registry parameters.
func readConfig(r *param.Reader) Config {
	return Config{Round: r.Size("round"), MinBlock: r.Size("min_block"), Chunk: r.Size("chunk")}
}
