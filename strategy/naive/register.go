package naive

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
)

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    name,
		Summary: "MXNet's default GPU pool: sizes rounded to pages (large ones to large_round), exact-size LIFO free lists",
		Params: []gpualloc.Param{
			mxnetpool.PageParam("every request is rounded up to a multiple of this many bytes (at least 32)"),
			{
				Name:    "large_round",
				Default: "2097152",
				Doc:     "a request rounded to more than this is rounded up to a multiple of it (1 turns this off)",
				Env:     []string{"MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE"},
			},
			mxnetpool.ReserveParam(),
		},
		New: open,
	})
}

// open builds a Pool from resolved registry parameters.
func open(b gpualloc.Backend, p *gpualloc.Params) (gpualloc.Allocator, error) {
	var c Config
	var err error
	if c.Page, err = p.Size("page"); err != nil {
		return nil, err
	}
	if c.LargeRound, err = p.Size("large_round"); err != nil {
		return nil, err
	}
	if c.Reserve, err = mxnetpool.Reserve(p); err != nil {
		return nil, err
	}
	pool, err := New(b, c)
	if err != nil {
		return nil, err
	}
	return pool, nil
}
