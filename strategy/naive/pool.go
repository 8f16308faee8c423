package naive

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
)

// name is the strategy's registry name.
const name = "naive"

// A Pool is MXNet's Naive GPU memory pool, with the policy and costs the
// package describes. It implements [gpualloc.Allocator],
// [gpualloc.StatsReporter], [gpualloc.Releaser], [gpualloc.Specer] (its
// spec is "naive:page=4096,large_round=2097152,reserve=5" by default) and
// [gpualloc.FreeSpaceReporter] (the cached blocks). A Pool is not safe for
// concurrent use.
type Pool struct {
	*storage
	c Config
}

// storage is the pooled storage manager of both MXNet pools, embedded
// under this unexported name so that a Pool gains its methods, not a field.
type storage = mxnetpool.Pool

// New returns an empty Naive pool that takes its memory from b. An invalid
// configuration is an error that names the parameter and wraps a
// [*gpualloc.ParamError]: Page below 32, LargeRound not positive, Reserve
// outside 0 to 100.
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	p, err := mxnetpool.New(b, mxnetpool.Options{
		Name:    name,
		Spec:    fmt.Sprintf("naive:page=%d,large_round=%d,reserve=%d", c.Page, c.LargeRound, c.Reserve),
		Reserve: c.Reserve,
		Round:   c.RoundSize,
	})
	if err != nil {
		return nil, err
	}
	return &Pool{storage: p, c: c}, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }
