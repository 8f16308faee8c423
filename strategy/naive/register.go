package naive

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

func init() {
	mxnetpool.Register(name,
		"MXNet's default GPU pool: sizes rounded to pages (large ones to large_round), exact-size LIFO free lists",
		"every request is rounded up to a multiple of this many bytes (at least 32)",
		gpualloc.Param{
			Name:    "large_round",
			Default: "2097152",
			Doc:     "a request rounded to more than this is rounded up to a multiple of it (1 turns this off)",
			Env:     []string{"MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE"},
		},
		func(r *param.Reader) Config {
			return Config{Page: r.Size("page"), LargeRound: r.Size("large_round"), Reserve: mxnetpool.Reserve(r)}
		}, New)
}
