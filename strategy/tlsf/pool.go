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
	heap segment.Pool // with TLSF's lists of free blocks
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
	if err := p.heap.Init(b, name, c.segment(), segment.GoodFit); err != nil {
		return nil, err
	}
	return p, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }

// Spec returns the pool's full spec, as "tlsf:round=512,min_block=512,chunk=20971520".
func (p *Pool) Spec() string { return p.spec }

// Stats returns the pool's counters.
func (p *Pool) Stats() gpualloc.Stats { return p.heap.Stats() }

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
	addr, bsize, handle, err := p.heap.Alloc(size)
	if err != nil {
		return gpualloc.Block{}, err
	}
	return gpualloc.Block{Addr: addr, Size: bsize, Requested: size, Handle: handle}, nil
}

// Free puts a live block back on the list of its size, merged first with
// the free blocks just before and after it in its segment, in O(1); no
// memory goes back to the device. A block that is not live, or whose Size
// or Requested differ from what Alloc returned, gives an error wrapping
// [gpualloc.ErrInvalidFree] and changes nothing.
func (p *Pool) Free(b gpualloc.Block) error { return p.heap.Free(b) }

// ReleaseAll returns every entirely free segment to the device. Live blocks,
// and the segments that hold them, stay. A segment the device refuses to
// free stays too, and the device's errors are joined in the one returned.
func (p *Pool) ReleaseAll() error { return p.heap.ReleaseFree() }

// FreeSpace returns the largest free block and the total bytes of free
// blocks in the segments the pool holds. The total takes O(1); the largest
// two bit scans to find the highest non-empty list, then a scan of that
// list, whose blocks are within 1/32 of each other in size: O(k) for the k
// blocks in it, usually a handful.
func (p *Pool) FreeSpace() (largest, total int64) { return p.heap.FreeSpace() }
