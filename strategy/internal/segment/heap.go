// Package segment is the machinery of the strategies that carve blocks out
// of device segments, splitting free blocks and coalescing them again: best
// fit (strategy/bestfit) and TLSF (strategy/tlsf), which differ only in
// their index of free blocks, so that everything else, their Alloc and
// Free included, lives here. The other strategies that split and merge
// blocks (bfc, dualcursor, and pytorch and gmlake through
// strategy/internal/cachepool) use its nodes and its [Sorted] index, and
// cachepool its [Book] of blocks.
//
// A [Heap] holds segments, each one device allocation, tiled by blocks in
// address order. Every block records its neighbours within its segment, so
// that a freed block merges with a free neighbour in O(1); a segment's first
// and last blocks have no neighbour on that side, so blocks never merge
// across segments even when two segments happen to be adjacent in the
// device's address space. Blocks live in one slice, referred to by int32
// indexes rather than pointers: the garbage collector has nothing to scan
// and no write barrier to run, and freed records are reused. Live blocks are
// found from their [gpualloc.Block] Handle through a blocktable, in O(1).
//
// A [Pool] is a Heap with its index of free blocks, [Sorted] for best fit
// or [Lists] for TLSF's good fit, chosen by its [Fit]. On the hot paths it
// calls the Heap and its index directly, picking the index by a branch:
// Alloc is a lookup in the index, then [Heap.Take], which splits the block
// and hands it out; Free is [Book.Release], then [Heap.MergeNext] with each
// free neighbour (removed from the index first), then an insert into the
// index. Only the slow paths ([Heap.Grow], [Heap.ReleaseFree], the initial
// segment, tests) reach the index through the [Index] interface. A
// [Front] is a Pool with the methods of an allocator, which bestfit and
// tlsf embed.
package segment

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
)

// A Node is a block of a segment, free or live.
type Node struct {
	Addr      uint64
	Size      int64
	Requested int64 // bytes asked for, while the block is live

	// Prev and Next are the blocks before and after this one in its
	// segment, 0 at the segment's ends.
	Prev, Next int32
	Free       bool

	// Left, Right and Key are the free-block index's to use while the
	// block is free.
	Left, Right int32
	Key         uint32
}

// An Index is a strategy's index of free blocks, which the [Heap] updates on
// its slow paths. Insert adds a free block; Remove takes out a block that
// Insert added, before its size changes.
type Index interface {
	Insert(nodes []Node, n int32)
	Remove(nodes []Node, n int32)
}

// A Heap is a set of device segments tiled by blocks. The zero Heap is not
// ready: call [Heap.Init]. A Heap is not safe for concurrent use.
type Heap struct {
	// Book's Nodes holds every block. The slice may be replaced as it
	// grows: callers reload it after any call that can add a block (Take,
	// Grow).
	Book
	spare []int32 // unused indexes of Nodes

	segs      []seg   // segments; a zero size marks an unused slot
	spareSegs []int32 // unused indexes of segs

	b   gpualloc.Backend
	idx Index
	c   Config

	mask  uint64 // Round - 1
	split int64  // smallest rest that is split off, at least 1
	next  int64  // the chunk under GrowChunk, the next segment's size under GrowDouble
	free  int64  // bytes in free blocks
}

type seg struct {
	addr  uint64
	size  int64
	first int32 // the block at addr
}

// Init makes h an empty heap named name (the prefix of its errors) that takes
// memory from b with configuration c, after checking c (see
// [Config.Validate]), and, if c.Initial is positive, takes the initial
// segment and inserts it in idx. A nil b is an error.
func (h *Heap) Init(b gpualloc.Backend, name string, c Config, idx Index) error {
	if b == nil {
		return errors.New(name + ": nil Backend")
	}
	if err := c.Validate(name); err != nil {
		return err
	}
	*h = Heap{
		Book:  Book{Nodes: make([]Node, 1, 64), Name: name},
		b:     b,
		idx:   idx,
		c:     c,
		mask:  uint64(c.Round) - 1,
		split: max(c.SplitThreshold, 1),
	}
	h.next = h.segmentSize(c.Chunk)
	if c.Initial > 0 {
		size := h.segmentSize(c.Initial)
		addr, err := b.Malloc(size)
		if err != nil {
			return fmt.Errorf("%s: initial segment of %d bytes: %w", name, size, err)
		}
		idx.Insert(h.Nodes, h.addSegment(addr, size))
	}
	return nil
}

// Stats returns the heap's counters.
func (h *Heap) Stats() gpualloc.Stats { return h.M.Stats() }

// FreeBytes returns the bytes in free blocks, in O(1).
func (h *Heap) FreeBytes() int64 { return h.free }

// Round returns the size of the block set aside for a request of size >= 1
// bytes, [Config.RoundSize], or 0 when that would not fit in an int64.
func (h *Heap) Round(size int64) int64 {
	s := (uint64(size) + h.mask) &^ h.mask
	if s > 1<<63-1 {
		return 0
	}
	return max(int64(s), h.c.MinBlock)
}

// ErrTooLarge returns the error of an Alloc whose rounded size overflows,
// and counts it as out of memory.
func (h *Heap) ErrTooLarge(size int64) error {
	h.M.CountOOM()
	return fmt.Errorf("%s: alloc of %d bytes: rounded size overflows: %w", h.Name, size, gpualloc.ErrOutOfMemory)
}

// ErrInvalidSize returns the error of an Alloc of size < 1 bytes.
func (h *Heap) ErrInvalidSize(size int64) error {
	return fmt.Errorf("%s: alloc of %d bytes: %w", h.Name, size, gpualloc.ErrInvalidSize)
}

// Take hands out the free block n, which the caller has taken out of its
// index, for a request of requested bytes rounded to rounded <= its size,
// and returns the block's address, size and Handle. If the rest is at least
// Config.SplitThreshold bytes it becomes a new free block after n, which
// Take returns for the caller to index (else 0, and the block handed out
// keeps the whole size). hit says whether the request was served without a
// device allocation. Take may replace h.Nodes.
//
// (Take returns scalars rather than a gpualloc.Block: a struct result is
// spilled and copied at every level, and the copy stalls on store
// forwarding.)
func (h *Heap) Take(n int32, rounded, requested int64, hit bool) (addr uint64, size int64, handle uint64, rem int32) {
	if h.Nodes[n].Size-rounded >= h.split {
		rem = h.newNode()
		SplitAt(h.Nodes, n, rem, rounded)
	}
	addr, size, handle = h.Hand(n, requested, hit)
	h.free -= size
	return addr, size, handle, rem
}

// MergeNext merges into the free block n the free block that follows it in
// its segment, which the caller has taken out of its index (as n, if it was
// in it: n's size changes).
func (h *Heap) MergeNext(n int32) { h.recycle(MergeNext(h.Nodes, n)) }

// Grow takes a new segment from the device for a request of request bytes,
// rounded to rounded, and returns it as one free block, not indexed.
// fit >= rounded is the smallest segment the strategy's index would find
// again for such a request; the growth policy sizes the segment from it.
//
// If the device is out of memory, Grow returns every entirely free segment
// to the device and, if that freed anything, tries again; if the device
// still refuses a segment larger than rounded, it tries once more with a
// segment of exactly rounded bytes. Each attempt after a refusal counts as a
// retry. If all fail, the error wraps [gpualloc.ErrOutOfMemory] and counts
// as out of memory. Grow may replace h.Nodes.
func (h *Heap) Grow(request, rounded, fit int64) (int32, error) {
	size, next := h.growSize(fit)
	addr, size, err := MallocRetry(h.b, &h.M, size, rounded, h.releaseFree, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: alloc of %d bytes (%d rounded): segment of %d bytes: %w", h.Name, request, rounded, size, err)
	}
	h.next = next
	return h.addSegment(addr, size), nil
}

// MallocRetry takes size bytes from the device b for a pool's growth, with
// the retries that Heap and dualcursor share: if the device is out of
// memory, release returns the pool's entirely free segments and, if that
// freed anything, the device is asked again, for resize() bytes (size again
// if resize is nil); if it still refuses a size larger than least, it is
// asked once more for least bytes. Each attempt after a refusal counts as
// a retry in m, and a last refusal as out of memory. It returns the address
// and the size taken, or the size last asked for and the device's error,
// joined with release's if that failed too.
func MallocRetry(b gpualloc.Backend, m *gpualloc.Meter, size, least int64,
	release func() (int64, error), resize func() int64) (uint64, int64, error) {
	addr, err := b.Malloc(size)
	var relErr error
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		var released int64
		released, relErr = release()
		if released > 0 {
			m.CountRetry()
			if resize != nil {
				size = resize()
			}
			addr, err = b.Malloc(size)
		}
		if errors.Is(err, gpualloc.ErrOutOfMemory) && size > least {
			size = least
			m.CountRetry()
			addr, err = b.Malloc(size)
		}
	}
	if err != nil {
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			m.CountOOM()
		}
		if relErr != nil {
			err = errors.Join(err, relErr)
		}
	}
	return addr, size, err
}

// growSize returns the size of the segment to take for a request that needs
// fit bytes, and the value h.next takes if it is taken.
func (h *Heap) growSize(fit int64) (size, next int64) {
	switch h.c.Grow {
	case GrowChunk:
		return max(h.next, fit), h.next
	case GrowDouble:
		// TensorFlow's BFCAllocator::Extend: double the region size until
		// the request fits; if it did not have to, double it for the next
		// region.
		n, raised := h.next, false
		for n < fit && n <= maxSegment/2 {
			n *= 2
			raised = true
		}
		size, next = max(n, fit), n
		if !raised && n <= maxSegment/2 {
			next = n * 2
		}
		return size, next
	}
	return fit, h.next
}

// maxSegment bounds the sizes GrowDouble doubles to.
const maxSegment = 1 << 62

// segmentSize rounds a segment size up to a multiple of Round, or down if
// up would overflow.
func (h *Heap) segmentSize(size int64) int64 {
	if s, ok := alignUp(size, h.c.Round); ok {
		return s
	}
	return size &^ int64(h.mask)
}

// addSegment records a segment of size bytes at addr, fresh from the device,
// and returns its one free block.
func (h *Heap) addSegment(addr uint64, size int64) int32 {
	h.M.CountDeviceMalloc(size)
	n := h.newNode()
	h.Nodes[n] = Node{Addr: addr, Size: size, Free: true}
	s := seg{addr: addr, size: size, first: n}
	if k := len(h.spareSegs); k > 0 {
		h.segs[h.spareSegs[k-1]] = s
		h.spareSegs = h.spareSegs[:k-1]
	} else {
		h.segs = append(h.segs, s)
	}
	h.free += size
	return n
}

// ReleaseFree returns every entirely free segment to the device, taking its
// block out of the index. A segment the device refuses to free stays, and
// the device's errors are joined in the one returned.
func (h *Heap) ReleaseFree() error {
	if _, err := h.releaseFree(); err != nil {
		return fmt.Errorf("%s: release: %w", h.Name, err)
	}
	return nil
}

func (h *Heap) releaseFree() (released int64, err error) {
	var errs []error
	for i := range h.segs {
		s := h.segs[i]
		if s.size == 0 {
			continue
		}
		n := s.first
		if nd := &h.Nodes[n]; !nd.Free || nd.Size != s.size {
			continue
		}
		if err := h.b.Free(s.addr, s.size); err != nil {
			errs = append(errs, err)
			continue
		}
		h.idx.Remove(h.Nodes, n)
		h.recycle(n)
		h.segs[i] = seg{}
		h.spareSegs = append(h.spareSegs, int32(i))
		h.M.CountDeviceFree(s.size)
		h.free -= s.size
		released += s.size
	}
	return released, errors.Join(errs...)
}

// Segments returns the number of segments held.
func (h *Heap) Segments() int { return len(h.segs) - len(h.spareSegs) }

func (h *Heap) newNode() int32 { return NewNode(&h.Nodes, &h.spare) }

func (h *Heap) recycle(n int32) { RecycleNode(h.Nodes, &h.spare, n) }
