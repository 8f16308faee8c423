package round

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    name,
		Summary: "MXNet's Round GPU pool: sizes rounded to powers of two up to 2^cutoff, to multiples of 2^cutoff beyond; LIFO free lists per bucket",
		Params: []gpualloc.Param{
			mxnetpool.PageParam("smallest block in bytes, a power of two (at least 32)"),
			{
				Name:    "cutoff",
				Default: "24",
				Doc:     "log2 of the size where rounding turns from powers of two to multiples of 2^cutoff (20 to 34)",
				Env:     []string{"MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF"},
			},
			mxnetpool.ReserveParam(),
		},
		New: open,
	})
}

// open builds a Pool from resolved registry parameters.
func open(b gpualloc.Backend, p *gpualloc.Params) (gpualloc.Allocator, error) {
	r := param.NewReader(p)
	c := Config{Page: r.Size("page"), Cutoff: r.Int("cutoff", cutoffRange), Reserve: mxnetpool.Reserve(r)}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return param.Open(New(b, c))
}
