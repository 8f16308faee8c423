package bfc

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "bfc"

// A Pool is TensorFlow's BFC allocator over a device. It implements
// [gpualloc.Allocator], [gpualloc.StatsReporter], [gpualloc.Releaser],
// [gpualloc.Specer] and [gpualloc.FreeSpaceReporter]. A Pool is not safe
// for concurrent use.
type Pool struct {
	nodes []segment.Node // every chunk; nodes[0] is unused
	spare []int32        // unused indexes of nodes
	free  segment.Sorted // the free chunks: the bins
	regs  []region       // regions, by address
	live  blocktable.Table[int32]
	m     gpualloc.Meter
	dev   gpualloc.Backend
	c     Config
	spec  string

	limit     int64 // memory_limit_
	curr      int64 // curr_region_allocation_bytes_
	total     int64 // total_region_allocated_bytes_
	maxFrag   int64 // max_internal_fragmentation_bytes_
	freeBytes int64 // bytes in free chunks
}

// A chunk is BFCAllocator::Chunk, a piece of a region, free or in use: a
// [segment.Node], linked to the chunks before and after it in its region
// and referred to by index, as BFCAllocator's ChunkHandles are; index 0
// means none.
//
// The bins are BFCAllocator's kNumBins bins of free chunks, each a
// std::set ordered by (size, address); FindChunkPtr walks them from the
// request's bin upward and takes the first chunk that fits: the smallest
// free chunk of at least the request, the lowest address among those of
// its size, since every chunk of a higher bin is larger than every chunk of
// a lower one. The pool keeps its free chunks in a [segment.Sorted], whose
// finer size classes (32 per power of two) find that same chunk: best fit
// on (size, address).

// A region is BFCAllocator::AllocationRegion: one device allocation,
// tiled by chunks from first on.
type region struct {
	addr  uint64
	size  int64
	first int32
}

// New returns a pool that takes its memory from b with configuration c. Its
// memory limit is c.MemoryLimit if set, else c.MemoryFraction of the total
// memory b.MemInfo reports now. No memory is taken until the first Alloc,
// as BFCAllocator takes none in its constructor. An invalid configuration
// is an error that names the parameter and wraps a [*gpualloc.ParamError]:
// MemoryFraction outside (0, 1], MemoryLimit negative,
// FragmentationFraction outside [0, 1].
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	if b == nil {
		return nil, errors.New(name + ": nil Backend")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	_, total := b.MemInfo()
	p := &Pool{nodes: make([]segment.Node, 1, 64), dev: b, c: c, spec: c.spec()}
	p.limit = c.limit(total)
	p.maxFrag = c.maxInternalFragmentation(p.limit)
	// The BFCAllocator constructor: curr_region_allocation_bytes_ is
	// RoundedBytes(min(total_memory, 2 MiB)) with allow_growth, else
	// RoundedBytes(total_memory).
	if c.AllowGrowth {
		p.curr = roundUp(min(p.limit, GrowthStart))
	} else {
		p.curr = roundUp(p.limit)
	}
	return p, nil
}

// roundUp is RoundedBytes for any n >= 0, 0 included, saturating.
func roundUp(n int64) int64 {
	if n == 0 {
		return 0
	}
	if r := RoundedBytes(n); r != 0 {
		return r
	}
	return n &^ (MinAllocationSize - 1)
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }

// MemoryLimit returns the pool's memory limit in bytes: the most it holds
// from the device at once.
func (p *Pool) MemoryLimit() int64 { return p.limit }

// Spec returns the pool's full spec, as
// "bfc:allow_growth=true,preallocate=false,memory_fraction=1,memory_limit=0,garbage_collection=true,fragmentation_fraction=0".
func (p *Pool) Spec() string { return p.spec }

// Stats returns the pool's counters. Allocated counts the chunks handed
// out, which may be larger than the rounded requests (see [Pool.Alloc]),
// as TensorFlow's bytes_in_use does; Reserved the regions held.
func (p *Pool) Stats() gpualloc.Stats { return p.m.Stats() }

// Alloc returns a chunk for a request of size bytes, as
// BFCAllocator::AllocateRawInternal does. The request is rounded up to a
// multiple of 256 bytes ([RoundedBytes]). The pool takes the smallest free
// chunk of at least that size, the lowest address among those of its size
// (FindChunkPtr); it splits the chunk, handing out the front and keeping
// the rest free, only if the chunk is at least twice the rounded request or
// the rest at least the fragmentation bound (128 MiB by default), and
// otherwise hands out the whole chunk, whose Size is then larger than the
// rounded request. If no free chunk fits, the pool takes a new region
// (Extend; see the package documentation) and serves the request from it;
// if that fails and garbage collection is on, it returns its entirely free
// regions to the device and tries once more (DeallocateFreeRegions). If all
// fail, the error wraps [gpualloc.ErrOutOfMemory] and the pool stays
// usable.
func (p *Pool) Alloc(size int64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: %w", name, size, gpualloc.ErrInvalidSize)
	}
	rounded := RoundedBytes(size)
	if rounded == 0 {
		p.m.CountOOM()
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: rounded size overflows: %w", name, size, gpualloc.ErrOutOfMemory)
	}
	n := p.free.TakeBest(p.nodes, rounded)
	hit := n != 0
	if !hit {
		var err error
		if n, err = p.grow(size, rounded); err != nil {
			return gpualloc.Block{}, err
		}
	}
	return p.take(n, rounded, size, hit), nil
}

// take hands out the free chunk n, out of its bin, for a request of
// requested bytes rounded to rounded, splitting it by FindChunkPtr's rule.
func (p *Pool) take(n int32, rounded, requested int64, hit bool) gpualloc.Block {
	if sz := p.nodes[n].Size; sz >= rounded*2 || sz-rounded >= p.maxFrag {
		p.split(n, rounded)
	}
	c := &p.nodes[n]
	c.Free = false
	c.Requested = requested
	p.freeBytes -= c.Size
	handle := p.live.Put(c.Addr, n)
	p.m.CountAlloc(requested, c.Size, hit)
	return gpualloc.Block{Addr: c.Addr, Size: c.Size, Requested: requested, Handle: handle}
}

// split is BFCAllocator::SplitChunk: the chunk n keeps its first size
// bytes, and the rest becomes a new free chunk after it, in its bin.
func (p *Pool) split(n int32, size int64) {
	r := segment.NewNode(&p.nodes, &p.spare)
	segment.SplitAt(p.nodes, n, r, size)
	p.free.Insert(p.nodes, r)
}

// grow serves a request that no free chunk fits from a new region, as the
// rest of AllocateRawInternal does: Extend, then, if that fails and garbage
// collection is on, DeallocateFreeRegions and Extend again. It returns the
// new region's chunk, out of its bin.
func (p *Pool) grow(requested, rounded int64) (int32, error) {
	ok, err := p.extend(rounded)
	var gcErr error
	if err == nil && !ok && p.c.GarbageCollection {
		var freed bool
		freed, gcErr = p.deallocateFreeRegions(rounded)
		if freed {
			p.m.CountRetry()
			ok, err = p.extend(rounded)
		}
	}
	if err == nil && ok {
		// The new region is the only free chunk that fits.
		return p.free.TakeBest(p.nodes, rounded), nil
	}
	if err == nil {
		p.m.CountOOM()
		err = fmt.Errorf("%s: alloc of %d bytes (%d rounded): %d of the memory limit's %d bytes held, no region can be added: %w",
			name, requested, rounded, p.total, p.limit, gpualloc.ErrOutOfMemory)
	} else {
		err = fmt.Errorf("%s: alloc of %d bytes (%d rounded): %w", name, requested, rounded, err)
	}
	if gcErr != nil {
		err = errors.Join(err, gcErr)
	}
	return 0, err
}

// extend is BFCAllocator::Extend: it adds a region that can hold a chunk of
// rounded bytes, and reports whether it could. Only a device error other
// than running out of memory is returned as an error.
func (p *Pool) extend(rounded int64) (bool, error) {
	// The bytes left under the limit, rounded down to 256.
	available := (p.limit - p.total) &^ (MinAllocationSize - 1)
	if rounded > available {
		return false, nil
	}
	// Double the region size until the request fits.
	increased := false
	for rounded > p.curr {
		p.curr = double(p.curr)
		increased = true
	}
	bytes := min(p.curr, available)
	addr, err := p.dev.Malloc(bytes)
	// Back off by kBackpedalFactor while the device refuses and the
	// region still holds the request. Below 2560 bytes, 90% rounded up to
	// 256 is the size itself, and TensorFlow would ask for it forever: the
	// pool gives up there instead.
	for errors.Is(err, gpualloc.ErrOutOfMemory) {
		less := backpedal(bytes)
		if less < rounded || less == bytes {
			return false, nil
		}
		bytes = less
		addr, err = p.dev.Malloc(bytes)
	}
	if err != nil {
		return false, err
	}
	if !increased {
		p.curr = double(p.curr)
	}
	p.total += bytes
	p.m.CountDeviceMalloc(bytes)
	n := segment.NewNode(&p.nodes, &p.spare)
	p.nodes[n] = segment.Node{Addr: addr, Size: bytes, Free: true}
	i, _ := slices.BinarySearchFunc(p.regs, addr, func(r region, a uint64) int { return cmp.Compare(r.addr, a) })
	p.regs = slices.Insert(p.regs, i, region{addr: addr, size: bytes, first: n})
	p.freeBytes += bytes
	p.free.Insert(p.nodes, n)
	return true, nil
}

// backpedal returns RoundedBytes(bytes * kBackpedalFactor), the product
// in single precision as C++ computes a size_t times a float, truncated to
// an integer.
func backpedal(bytes int64) int64 {
	return roundUp(int64(float32(bytes) * BackpedalFactor))
}

// double returns 2n, or math.MaxInt64 where that would overflow, where
// TensorFlow's size_t would wrap.
func double(n int64) int64 {
	if n > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * n
}

// deallocateFreeRegions is BFCAllocator::DeallocateFreeRegions: it returns
// every entirely free region to the device, if there is one and if the
// request could fit in what that leaves under the limit, and reports
// whether it did.
func (p *Pool) deallocateFreeRegions(rounded int64) (bool, error) {
	var free int64
	for _, r := range p.regs {
		if p.regionFree(r) {
			free += r.size
		}
	}
	// "Rough estimation to check whether deallocation can help."
	if free == 0 || rounded > p.limit-p.total+free {
		return false, nil
	}
	released, err := p.release()
	return released > 0, err
}

// regionFree reports whether the region r holds no chunk in use: since
// free neighbours always merge, whether its first chunk is free and spans
// it.
func (p *Pool) regionFree(r region) bool {
	c := &p.nodes[r.first]
	return c.Free && c.Size == r.size
}

// release returns every entirely free region to the device, as
// BFCAllocator::DeallocateRegions does, and the bytes it returned. A region
// the device refuses to free stays, and the device's errors are joined.
func (p *Pool) release() (int64, error) {
	var released int64
	var errs []error
	p.regs = slices.DeleteFunc(p.regs, func(r region) bool {
		if !p.regionFree(r) {
			return false
		}
		if err := p.dev.Free(r.addr, r.size); err != nil {
			errs = append(errs, err)
			return false
		}
		p.free.Remove(p.nodes, r.first)
		segment.RecycleNode(p.nodes, &p.spare, r.first)
		p.total -= r.size
		p.freeBytes -= r.size
		p.m.CountDeviceFree(r.size)
		released += r.size
		return true
	})
	return released, errors.Join(errs...)
}

// Free returns a live chunk to the pool, merged with the free chunks just
// after and before it in its region (BFCAllocator::TryToCoalesce), never
// with a chunk of another region; no memory goes back to the device. A
// block that is not live, or whose Size or Requested differ from what Alloc
// returned, gives an error wrapping [gpualloc.ErrInvalidFree] and changes
// nothing.
func (p *Pool) Free(b gpualloc.Block) error {
	ref := p.live.Get(b.Handle, b.Addr)
	if ref == nil {
		return blocktable.NotLive(name, b)
	}
	n := *ref
	nodes := p.nodes
	c := &nodes[n]
	if c.Size != b.Size || c.Requested != b.Requested {
		return blocktable.Mismatch(name, b, c.Size, c.Requested)
	}
	p.live.Delete(b.Handle)
	p.m.CountFree(c.Requested, c.Size)
	p.freeBytes += c.Size
	c.Free = true
	c.Requested = 0
	if next := c.Next; next != 0 && nodes[next].Free {
		p.free.Remove(nodes, next)
		p.merge(n)
	}
	if prev := nodes[n].Prev; prev != 0 && nodes[prev].Free {
		p.free.Remove(nodes, prev)
		p.merge(prev)
		n = prev
	}
	p.free.Insert(nodes, n)
	return nil
}

// merge is BFCAllocator::Merge: the free chunk just after the free chunk a,
// out of its bin, joins a.
func (p *Pool) merge(a int32) { segment.RecycleNode(p.nodes, &p.spare, segment.MergeNext(p.nodes, a)) }

// ReleaseAll returns every entirely free region to the device, as garbage
// collection does when the pool cannot grow; TensorFlow has no call that
// does it on demand. Live chunks, and the regions that hold them, stay. A
// region the device refuses to free stays too, and the device's errors are
// joined in the one returned.
func (p *Pool) ReleaseAll() error {
	if _, err := p.release(); err != nil {
		return fmt.Errorf("%s: release: %w", name, err)
	}
	return nil
}

// FreeSpace returns the largest free chunk and the total bytes of free
// chunks in the regions the pool holds: the total in O(1), the largest in
// O(log k) for the k chunks of the highest non-empty size class.
func (p *Pool) FreeSpace() (largest, total int64) {
	if n := p.free.Max(p.nodes); n != 0 {
		largest = p.nodes[n].Size
	}
	return largest, p.freeBytes
}
