package round

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

func init() {
	mxnetpool.Register(name,
		"MXNet's Round GPU pool: sizes rounded to powers of two up to 2^cutoff, to multiples of 2^cutoff beyond; LIFO free lists per bucket",
		"smallest block in bytes, a power of two (at least 32)",
		gpualloc.Param{
			Name:    "cutoff",
			Default: "24",
			Doc:     "log2 of the size where rounding turns from powers of two to multiples of 2^cutoff (20 to 34)",
			Env:     []string{"MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF"},
		},
		func(r *param.Reader) Config {
			return Config{Page: r.Size("page"), Cutoff: r.Int("cutoff", cutoffRange), Reserve: mxnetpool.Reserve(r)}
		}, New)
}
