package tlsf

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "tlsf"

// A Pool is a TLSF allocator over device segments, with the policy and
// costs the package describes. It implements [gpualloc.Allocator],
// [gpualloc.StatsReporter], [gpualloc.Releaser] (ReleaseAll returns every
// entirely free segment to the device), [gpualloc.Specer] and
// [gpualloc.FreeSpaceReporter]. A Pool is not safe for concurrent use.
type Pool struct {
	front // with TLSF's lists of free blocks
	c     Config
}

// front is the pool's allocator, embedded under this unexported name so
// that a Pool gains its methods, not a field.
type front = segment.Front

// New returns an empty pool that takes its memory from b. An invalid
// configuration is an error that names the parameter and wraps a
// [*gpualloc.ParamError]: Round not a power of two of at least 256,
// MinBlock not a positive multiple of Round, Chunk not positive.
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	spec := fmt.Sprintf("%s:round=%d,min_block=%d,chunk=%d", name, c.Round, c.MinBlock, c.Chunk)
	p := &Pool{c: c}
	if err := segment.InitFront(&p.front, b, name, spec, c.segment(), segment.GoodFit); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }
