package bestfit

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "bestfit"

// A Pool is a best-fit allocator over device segments, with the policy and
// costs the package describes. It implements [gpualloc.Allocator],
// [gpualloc.StatsReporter], [gpualloc.Releaser] (ReleaseAll returns every
// entirely free segment to the device), [gpualloc.Specer] and
// [gpualloc.FreeSpaceReporter]. A Pool is not safe for concurrent use.
type Pool struct {
	front // with free blocks by (size, address)
	c     Config
}

// front is the pool's allocator, embedded under this unexported name so
// that a Pool gains its methods, not a field.
type front = segment.Front

// New returns a pool that takes its memory from b, with an initial segment
// of c.Initial bytes if that is positive. An invalid configuration is an
// error that names the parameter and wraps a [*gpualloc.ParamError]: Round
// not a power of two of at least 256, MinBlock not a positive multiple of
// Round, SplitThreshold or Initial negative, Chunk not positive, Grow
// unknown. A device that cannot supply the initial segment gives an error
// wrapping [gpualloc.ErrOutOfMemory].
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	spec := fmt.Sprintf("%s:round=%d,min_block=%d,split_threshold=%d,grow=%s,chunk=%d,initial=%d",
		name, c.Round, c.MinBlock, c.SplitThreshold, c.Grow, c.Chunk, c.Initial)
	p := &Pool{c: c}
	if err := segment.InitFront(&p.front, b, name, spec, c.segment(), segment.BestFit); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }
