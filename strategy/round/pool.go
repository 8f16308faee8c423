package round

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
)

// name is the strategy's registry name.
const name = "round"

// A Pool is MXNet's Round GPU memory pool. It implements
// [gpualloc.Allocator], [gpualloc.StatsReporter], [gpualloc.Releaser] and
// [gpualloc.Specer]. A Pool is not safe for concurrent use.
type Pool struct {
	p *mxnetpool.Pool
	c Config
}

// New returns an empty Round pool that takes its memory from b. An invalid
// configuration is an error that names the parameter and wraps a
// [*gpualloc.ParamError], as MXNet checks it: Page below 32 or not a power
// of two, Cutoff outside 20 to 34 or below log2(Page), Reserve outside 0 to
// 100.
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	p, err := mxnetpool.New(b, mxnetpool.Options{
		Name:    name,
		Spec:    fmt.Sprintf("round:page=%d,cutoff=%d,reserve=%d", c.Page, c.Cutoff, c.Reserve),
		Reserve: c.Reserve,
		Round:   c.RoundSize,
	})
	if err != nil {
		return nil, err
	}
	return &Pool{p: p, c: c}, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }

// Spec returns the pool's full spec, as "round:page=4096,cutoff=24,reserve=5".
func (p *Pool) Spec() string { return p.p.Spec() }

// Stats returns the pool's counters.
func (p *Pool) Stats() gpualloc.Stats { return p.p.Stats() }

// FreeSpace reports the cached blocks, which only a request of their own
// size can use, as the pool's free space: the largest cached block and the
// bytes of them all. It implements [gpualloc.FreeSpaceReporter].
func (p *Pool) FreeSpace() (largest, total int64) { return p.p.FreeSpace() }

// Alloc returns a block of [Config.RoundSize](size) bytes: the most recently
// freed block of its bucket if there is one, else a new device allocation.
// Before allocating, if the device's free memory minus the block would fall
// below Reserve percent of its total, the pool releases its whole cache; if
// the device still fails, it releases the cache and tries once more, and if
// that fails too the error wraps [gpualloc.ErrOutOfMemory].
func (p *Pool) Alloc(size int64) (gpualloc.Block, error) { return p.p.Alloc(size) }

// Free caches a live block for reuse by a request of the same bucket; no
// memory goes back to the device. A block that is not live, or whose Size
// or Requested differ from what Alloc returned, gives an error wrapping
// [gpualloc.ErrInvalidFree] and changes nothing.
func (p *Pool) Free(b gpualloc.Block) error { return p.p.Free(b) }

// ReleaseAll returns every cached block to the device, as MXNet's
// ReleaseAll (Context.empty_cache in Python) does. Live blocks are untouched.
func (p *Pool) ReleaseAll() error { return p.p.ReleaseAll() }
