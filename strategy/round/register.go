package round

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
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
	var c Config
	var err error
	if c.Page, err = p.Size("page"); err != nil {
		return nil, err
	}
	cutoff, err := p.Int("cutoff")
	if err != nil {
		return nil, err
	}
	if c.Cutoff = int(cutoff); int64(c.Cutoff) != cutoff {
		return nil, p.Errorf("cutoff", "%s", cutoffRange)
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
