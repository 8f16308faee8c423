package tlsf

import "github.com/gpualloc/gpualloc"

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    name,
		Summary: "two-level segregated fit (TLSF, Masmano et al. 2004): O(1) good fit with splitting and coalescing inside device segments",
		Params: []gpualloc.Param{
			{Name: "round", Default: "512", Doc: "every request is rounded up to a multiple of this many bytes, a power of two of at least 256"},
			{Name: "min_block", Default: "512", Doc: "smallest block handed out in bytes, a multiple of round"},
			{Name: "chunk", Default: "20971520", Doc: "smallest segment taken from the device in bytes (20 MiB, as bestfit's default and PyTorch's large segments)"},
		},
		New: open,
	})
}

// open builds a Pool from resolved registry parameters.
func open(b gpualloc.Backend, p *gpualloc.Params) (gpualloc.Allocator, error) {
	var c Config
	var err error
	if c.Round, err = p.Size("round"); err != nil {
		return nil, err
	}
	if c.MinBlock, err = p.Size("min_block"); err != nil {
		return nil, err
	}
	if c.Chunk, err = p.Size("chunk"); err != nil {
		return nil, err
	}
	pool, err := New(b, c)
	if err != nil {
		return nil, err
	}
	return pool, nil
}
