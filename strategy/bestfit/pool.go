package bestfit

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "bestfit"

// A Pool is a best-fit allocator over device segments. It implements
// [gpualloc.Allocator], [gpualloc.StatsReporter], [gpualloc.Releaser],
// [gpualloc.Specer] and [gpualloc.FreeSpaceReporter]. A Pool is not safe for
// concurrent use.
type Pool struct {
	heap segment.Pool // with free blocks by (size, address)
	c    Config
	spec string
}

// New returns a pool that takes its memory from b, with an initial segment
// of c.Initial bytes if that is positive. An invalid configuration is an
// error that names the parameter and wraps a [*gpualloc.ParamError]: Round
// not a power of two of at least 256, MinBlock not a positive multiple of
// Round, SplitThreshold or Initial negative, Chunk not positive, Grow
// unknown. A device that cannot supply the initial segment gives an error
// wrapping [gpualloc.ErrOutOfMemory].
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	p := &Pool{c: c}
	p.spec = fmt.Sprintf("%s:round=%d,min_block=%d,split_threshold=%d,grow=%s,chunk=%d,initial=%d",
		name, c.Round, c.MinBlock, c.SplitThreshold, c.Grow, c.Chunk, c.Initial)
	if err := p.heap.Init(b, name, c.segment(), segment.BestFit); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }

// Spec returns the pool's full spec, as
// "bestfit:round=512,min_block=512,split_threshold=512,grow=chunk,chunk=20971520,initial=0".
func (p *Pool) Spec() string { return p.spec }

// Stats returns the pool's counters.
func (p *Pool) Stats() gpualloc.Stats { return p.heap.Stats() }

// Alloc returns a block for a request of size bytes, rounded to
// [Config.RoundSize](size): the smallest free block that fits, the one at the
// lowest address among those of its size, split if the rest is at least
// SplitThreshold bytes. If no free block fits, the pool takes a new segment
// from the device as its growth policy says; if the device is out of memory
// it returns its entirely free segments to the device and tries again, then
// tries a segment of just the block needed, and if that fails too the error
// wraps [gpualloc.ErrOutOfMemory]. The pool stays usable after a failure.
func (p *Pool) Alloc(size int64) (gpualloc.Block, error) {
	addr, bsize, handle, err := p.heap.Alloc(size)
	if err != nil {
		return gpualloc.Block{}, err
	}
	return gpualloc.Block{Addr: addr, Size: bsize, Requested: size, Handle: handle}, nil
}

// Free returns a live block to the pool's tree of free blocks, merged first
// with the free blocks just before and after it in its segment, in
// O(log n); no memory goes back to the device. A block that is not live, or
// whose Size or Requested differ from what Alloc returned, gives an error
// wrapping [gpualloc.ErrInvalidFree] and changes nothing.
func (p *Pool) Free(b gpualloc.Block) error { return p.heap.Free(b) }

// ReleaseAll returns every entirely free segment to the device. Live blocks,
// and the segments that hold them, stay. A segment the device refuses to
// free stays too, and the device's errors are joined in the one returned.
func (p *Pool) ReleaseAll() error { return p.heap.ReleaseFree() }

// FreeSpace returns the largest free block and the total bytes of free
// blocks in the segments the pool holds: the total in O(1), the largest in
// O(log k) for the k free blocks of the highest non-empty size class (the
// rightmost block of its tree).
func (p *Pool) FreeSpace() (largest, total int64) { return p.heap.FreeSpace() }
