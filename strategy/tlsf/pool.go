package tlsf

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "tlsf"

// A Pool is a TLSF allocator over device segments. It implements
// [gpualloc.Allocator], [gpualloc.StatsReporter], [gpualloc.Releaser],
// [gpualloc.Specer] and [gpualloc.FreeSpaceReporter]. A Pool is not safe for
// concurrent use.
type Pool struct {
	h    segment.Heap
	ix   index
	c    Config
	spec string
}

// New returns an empty pool that takes its memory from b. An invalid
// configuration is an error that names the parameter and wraps a
// [*gpualloc.ParamError]: Round not a power of two of at least 256,
// MinBlock not a positive multiple of Round, Chunk not positive.
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	p := &Pool{c: c}
	p.spec = fmt.Sprintf("%s:round=%d,min_block=%d,chunk=%d", name, c.Round, c.MinBlock, c.Chunk)
	if err := p.h.Init(b, name, c.segment(), &p.ix); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }

// Spec returns the pool's full spec, as "tlsf:round=512,min_block=512,chunk=20971520".
func (p *Pool) Spec() string { return p.spec }

// Stats returns the pool's counters.
func (p *Pool) Stats() gpualloc.Stats { return p.h.Stats() }

// Alloc returns a block of [Config.RoundSize](size) bytes: the first free
// block of the first non-empty list whose blocks all fit, split, the rest
// going back to the index. If there is none, the pool takes a segment of
// Chunk bytes from the device, or for a larger request a segment of the
// request rounded up to the start of its list, so that once free it serves
// the same request again. If the device is out of memory, the pool returns
// its entirely free segments to the device and tries again, then tries a
// segment of just the block needed, and if that fails too the error wraps
// [gpualloc.ErrOutOfMemory]. The pool stays usable after a failure.
func (p *Pool) Alloc(size int64) (gpualloc.Block, error) {
	h := &p.h
	if size < 1 {
		return gpualloc.Block{}, h.ErrInvalidSize(size)
	}
	rounded := h.Round(size)
	if rounded == 0 {
		return gpualloc.Block{}, h.ErrTooLarge(size)
	}
	n := p.ix.take(h.Nodes, rounded)
	hit := n != 0
	if !hit {
		var err error
		if n, err = h.Grow(size, rounded, segment.ClassStart(rounded)); err != nil {
			return gpualloc.Block{}, err
		}
	}
	addr, bsize, handle, rest := h.Take(n, rounded, size, hit)
	if rest != 0 {
		p.ix.Insert(h.Nodes, rest)
	}
	return gpualloc.Block{Addr: addr, Size: bsize, Requested: size, Handle: handle}, nil
}

// Free returns a live block to the pool, merged with the free blocks just
// before and after it in its segment; no memory goes back to the device. A
// block that is not live, or whose Size or Requested differ from what Alloc
// returned, gives an error wrapping [gpualloc.ErrInvalidFree] and changes
// nothing.
func (p *Pool) Free(b gpualloc.Block) error {
	h := &p.h
	n, err := h.Release(b)
	if err != nil {
		return err
	}
	nodes := h.Nodes
	if prev := nodes[n].Prev; prev != 0 && nodes[prev].Free {
		p.ix.Remove(nodes, prev)
		h.MergeNext(prev)
		n = prev
	}
	if next := nodes[n].Next; next != 0 && nodes[next].Free {
		p.ix.Remove(nodes, next)
		h.MergeNext(n)
	}
	p.ix.Insert(nodes, n)
	return nil
}

// ReleaseAll returns every entirely free segment to the device. Live blocks,
// and the segments that hold them, stay. A segment the device refuses to
// free stays too, and the device's errors are joined in the one returned.
func (p *Pool) ReleaseAll() error { return p.h.ReleaseFree() }

// FreeSpace returns the largest free block and the total bytes of free
// blocks in the segments the pool holds. The total takes O(1); the largest
// two bit scans to find the highest non-empty list, then a scan of that
// list, whose blocks are within 1/32 of each other in size: O(k) for the k
// blocks in it, usually a handful.
func (p *Pool) FreeSpace() (largest, total int64) {
	return p.ix.largest(p.h.Nodes), p.h.FreeBytes()
}
