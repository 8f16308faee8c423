// Package mxnetpool is the pooled storage manager that MXNet's Naive and
// Round GPU pools share (src/storage/pooled_storage_manager.h): cached
// blocks on LIFO free lists by rounded size, the reserve rule, and releasing
// the cache and retrying once when the device runs out of memory. The two
// pools differ only in how they round a request, which they pass to [New].
package mxnetpool

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
)

// Options configure a [Pool].
type Options struct {
	// Name is the strategy's registry name, the prefix of every error:
	// "naive".
	Name string

	// Spec is the strategy's full spec, which [Pool.Spec] reports.
	Spec string

	// Reserve is the share of the device, in percent from 0 to 100, that a
	// device allocation must leave free; before one that would leave less,
	// the pool releases every cached block.
	Reserve int

	// Round returns the size of the block set aside for a request of size
	// bytes (size >= 1): at least size, or 0 when that would not fit in an
	// int64. Requests of the same rounded size share a free list.
	Round func(size int64) int64
}

// A Pool is MXNet's pooled storage manager with a rounding function. It
// implements [gpualloc.Allocator], [gpualloc.StatsReporter],
// [gpualloc.Releaser] and [gpualloc.Specer]. A Pool is not safe for
// concurrent use.
type Pool struct {
	b       gpualloc.Backend
	name    string
	spec    string
	reserve int
	round   func(int64) int64
	m       gpualloc.Meter

	live   blocktable.Table[block] // blocks handed out, by Handle
	lists  map[int64]*freeList     // cached blocks by rounded size, a list for every size handed out
	dirty  []*freeList             // lists that may hold blocks, in the order they first did
	cached int64                   // bytes of the cached blocks
}

// A block is what the pool knows of a live block: its sizes, and the free
// list it goes back to.
type block struct {
	size, requested int64
	list            *freeList
}

// A freeList holds the addresses of cached blocks of one rounded size, the
// most recently freed last.
type freeList struct {
	size   int64
	addrs  []uint64
	listed bool // in Pool.dirty
}

// New returns an empty pool that takes its memory from b. A nil b is an
// error, and so is a Reserve outside 0 to 100 (see [param.Error]). o.Round
// must not be nil.
func New(b gpualloc.Backend, o Options) (*Pool, error) {
	if b == nil {
		return nil, errors.New(o.Name + ": nil Backend")
	}
	if o.Reserve < 0 || o.Reserve > 100 {
		return nil, param.Error(o.Name, "reserve", o.Reserve, reserveRange)
	}
	return &Pool{
		b:       b,
		name:    o.Name,
		spec:    o.Spec,
		reserve: o.Reserve,
		round:   o.Round,
		lists:   make(map[int64]*freeList),
	}, nil
}

// Spec returns Options.Spec.
func (p *Pool) Spec() string { return p.spec }

// Stats returns the pool's counters.
func (p *Pool) Stats() gpualloc.Stats { return p.m.Stats() }

// Alloc returns a block of Options.Round(size) bytes: the most recently
// freed block of that size if there is one, else a new device allocation.
// Before allocating, if the device's free memory minus the block would fall
// below Reserve percent of its total, the pool releases its whole cache; if
// the device still fails, it releases the cache and tries once more, and if
// that fails too the error wraps [gpualloc.ErrOutOfMemory]. A size that
// rounds to 0 fails with [gpualloc.ErrOutOfMemory] at once.
func (p *Pool) Alloc(size int64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: %w", p.name, size, gpualloc.ErrInvalidSize)
	}
	rounded := p.round(size)
	if rounded == 0 {
		p.m.CountOOM()
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: rounded size overflows: %w", p.name, size, gpualloc.ErrOutOfMemory)
	}
	var addr uint64
	l := p.lists[rounded]
	hit := l != nil && len(l.addrs) > 0
	if hit {
		addr = l.addrs[len(l.addrs)-1]
		l.addrs = l.addrs[:len(l.addrs)-1]
		p.cached -= rounded
	} else {
		var err error
		if addr, err = p.deviceMalloc(rounded); err != nil {
			return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes (%d rounded): %w", p.name, size, rounded, err)
		}
		if l == nil {
			l = &freeList{size: rounded}
			p.lists[rounded] = l
		}
	}
	h := p.live.Put(addr, block{size: rounded, requested: size, list: l})
	p.m.CountAlloc(size, rounded, hit)
	return gpualloc.Block{Addr: addr, Size: rounded, Requested: size, Handle: h}, nil
}

// deviceMalloc allocates size bytes from the device, applying MXNet's
// reserve rule first and releasing the cache and retrying once if the device
// runs out of memory.
func (p *Pool) deviceMalloc(size int64) (uint64, error) {
	free, total := p.b.MemInfo()
	if reserve := percent(total, p.reserve); free <= reserve || size > free-reserve {
		if err := p.releaseAll(); err != nil {
			return 0, err
		}
	}
	addr, err := p.b.Malloc(size)
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		if err := p.releaseAll(); err != nil {
			return 0, err
		}
		p.m.CountRetry()
		addr, err = p.b.Malloc(size)
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			p.m.CountOOM()
		}
	}
	if err != nil {
		return 0, err
	}
	p.m.CountDeviceMalloc(size)
	return addr, nil
}

// percent returns total*pct/100 rounded down, as MXNet's unsigned arithmetic
// computes it, without overflowing for any total.
func percent(total int64, pct int) int64 {
	n := int64(pct)
	return total/100*n + total%100*n/100
}

// Free caches a live block for reuse by a request of the same rounded size;
// no memory goes back to the device. A block that is not live, or whose
// Size or Requested differ from what Alloc returned, gives an error
// wrapping [gpualloc.ErrInvalidFree] and changes nothing.
func (p *Pool) Free(b gpualloc.Block) error {
	rec := p.live.Get(b.Handle, b.Addr)
	if rec == nil {
		return blocktable.NotLive(p.name, b)
	}
	lb := *rec
	if lb.size != b.Size || lb.requested != b.Requested {
		return blocktable.Mismatch(p.name, b, lb.size, lb.requested)
	}
	p.live.Delete(b.Handle)
	l := lb.list
	l.addrs = append(l.addrs, b.Addr)
	p.cached += l.size
	if !l.listed {
		l.listed = true
		p.dirty = append(p.dirty, l)
	}
	p.m.CountFree(lb.requested, lb.size)
	return nil
}

// FreeSpace reports the cached blocks as the pool's free space: the largest
// cached block and the bytes of them all. It costs O(number of sizes
// cached since the last release).
func (p *Pool) FreeSpace() (largest, total int64) {
	for _, l := range p.dirty {
		if len(l.addrs) > 0 {
			largest = max(largest, l.size)
		}
	}
	return largest, p.cached
}

// ReleaseAll returns every cached block to the device, as MXNet's
// ReleaseAll (Context.empty_cache in Python) does. Live blocks are untouched.
// A block the device refuses to free leaves the cache all the same, and the
// device's errors are joined in the one returned.
func (p *Pool) ReleaseAll() error {
	if err := p.releaseAll(); err != nil {
		return fmt.Errorf("%s: release: %w", p.name, err)
	}
	return nil
}

// releaseAll frees the cached blocks, list by list in the order the lists
// were first filled since the last release, oldest block first. A block the
// device refuses to free is dropped from the cache and its error reported.
func (p *Pool) releaseAll() error {
	var errs []error
	for _, l := range p.dirty {
		for _, addr := range l.addrs {
			if err := p.b.Free(addr, l.size); err != nil {
				errs = append(errs, err)
				continue
			}
			p.m.CountDeviceFree(l.size)
		}
		p.cached -= l.size * int64(len(l.addrs))
		l.addrs = l.addrs[:0]
		l.listed = false
	}
	clear(p.dirty)
	p.dirty = p.dirty[:0]
	return errors.Join(errs...)
}
