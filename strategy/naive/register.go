package naive

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
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
	r := param.NewReader(p)
	c := Config{Page: r.Size("page"), LargeRound: r.Size("large_round"), Reserve: mxnetpool.Reserve(r)}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return param.Open(New(b, c))
}
