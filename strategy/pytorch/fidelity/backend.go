package fidelity

import (
	"fmt"
	"math"
	"sort"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/torchsize"
	"github.com/gpualloc/gpualloc/snapshot"
)

// backend is the replay's device: Malloc hands out the recorded segments,
// Reserve and Map the recorded mapped ranges.
//
// Following the record (forced), it refuses memory where the record says
// PyTorch's device did: every allocation of a recorded oom, the pages of
// a map that failed, and any allocation while a segment that the record
// frees before it is held. Free-running, it is the device that a replay
// of the snapshot gives the strategy (package sim, on the memory that
// package traces' reader reports): it refuses an allocation past its
// capacity, counting the memory of its segments and of the pages it made,
// mapped or not, and nothing else.
type backend struct {
	forced   bool
	capacity int64 // free-running: the device's memory
	used     int64 // free-running: bytes of segments and pages made
	unmapped int64 // the bytes of the last Unmap
	res      *Result
	dev      int
	index    int                   // of the current entry
	pending  []snapshot.TraceEntry // segment_alloc and segment_map entries recorded before the current alloc
	taken    bool                  // a segment_alloc of pending was taken by a Malloc
	mapped   []uint64              // pages mapped for the current alloc, by address
	full     bool                  // every allocation fails
	// failAt, when not 0, is the number of entries of pending recorded
	// before the current alloc's failed map (see mapFailed): once their
	// pages are mapped, the device refuses the next page.
	failAt int
	// refused: the device refused the current alloc's page at failAt.
	refused bool
	oom     bool  // the current allocation is recorded as failed
	total   int64 // the device's memory
	// releases are the segment_free and segment_unmap entries recorded
	// just before the current alloc or oom, which it must free before it
	// gets memory (see allocFollows and oomFollows).
	releases []snapshot.TraceEntry
	// ahead is the trace, whose entries from index from on follow the
	// current one (which they start with).
	ahead snapshot.Trace
	from  int
	// held are the ranges of expandable segments reserved (or restored),
	// their size by their address.
	held    map[uint64]int64
	next    uint64          // address of the next segment not in the trace
	dirty   int             // index of the last entry with a mismatch of the backend, or noEntry
	freed   map[uint64]bool // segments freed and pages unmapped, by address
	handles uint64          // handles created
	// The device's memory as the model holds it, as package sim measures
	// a replay: bytes of segments and mapped pages (reserved, and its
	// peak: a page counts once mapped), the device allocations (Malloc
	// and Create calls), and the sizes of the handles created, by handle.
	reserved, peak int64
	mallocs        int64
	sizes          map[uint64]int64
}

func newBackend(res *Result, dev int, top uint64, total int64, forced bool) *backend {
	return &backend{forced: forced, capacity: total, res: res, dev: dev, next: top, total: total, dirty: noEntry, freed: map[uint64]bool{}, held: map[uint64]int64{},
		sizes: map[uint64]int64{}}
}

// noEntry is no entry's index: the implied entries of State.Fresh have
// negative ones.
const noEntry = math.MinInt

// clean reports whether the backend saw no mismatch at entry i.
func (b *backend) clean(i int) bool { return b.dirty != i }

func (b *backend) mismatch(m Mismatch) {
	b.dirty = b.index
	b.res.mismatch(m)
}

func (b *backend) Malloc(size int64) (uint64, error) {
	if size <= 0 {
		return 0, gpualloc.ErrInvalidSize
	}
	if b.refuses(size) {
		return 0, gpualloc.ErrOutOfMemory
	}
	b.used += size
	b.hold(size)
	b.mallocs++
	for _, p := range b.pending {
		if p.Action != snapshot.SegmentAlloc || b.taken {
			continue
		}
		b.taken = true
		b.settle(p.Addr)
		if size == p.Size {
			b.res.SegmentMatches++
		} else {
			b.mismatch(Mismatch{b.dev, b.index - 1, "segment_alloc", p.Size, fmt.Sprintf("%d bytes", p.Size), fmt.Sprintf("%d bytes", size)})
		}
		delete(b.freed, p.Addr)
		return p.Addr, nil
	}
	b.res.ExtraMallocs++
	b.mismatch(Mismatch{b.dev, b.index, "segment_alloc", size, "none", fmt.Sprintf("%d bytes", size)})
	return b.fresh(size), nil
}

// refuses reports whether the device refuses an allocation of size bytes
// now, a segment or a page.
func (b *backend) refuses(size int64) bool {
	if !b.forced {
		return b.used+size > b.capacity
	}
	return b.full || b.releasing()
}

// settle closes the releases recorded before the current allocation,
// free-running, when the allocation takes again the memory at addr, which
// one of them gave back: the strategy has made its release then.
func (b *backend) settle(addr uint64) {
	if !b.forced && len(b.releases) > 0 && b.freed[addr] {
		b.endReleases()
	}
}

// releasing reports whether a segment or page that the current alloc must
// free first is still held.
func (b *backend) releasing() bool {
	for i := range b.releases {
		e := &b.releases[i]
		if e.Action == snapshot.SegmentFree && !b.freed[e.Addr] {
			return true
		}
		if e.Action == snapshot.SegmentUnmap {
			for _, p := range pages(e) {
				if !b.freed[p] {
					return true
				}
			}
		}
	}
	return false
}

// fresh returns an address for size bytes that no recorded segment uses.
func (b *backend) fresh(size int64) uint64 {
	a := b.next
	b.next += uint64(size+smallBuffer-1) / smallBuffer * smallBuffer
	return a
}

// hold counts size bytes more held from the device.
func (b *backend) hold(size int64) {
	b.reserved += size
	b.peak = max(b.peak, b.reserved)
}

func (b *backend) Free(addr uint64, size int64) error {
	b.used -= size
	b.reserved -= size
	b.res.DeviceFrees++
	b.freed[addr] = true
	return nil
}

func (b *backend) MemInfo() (free, total int64) {
	if !b.forced {
		return b.capacity - b.used, b.capacity
	}
	return b.total, b.total
}

// Granularity is that of CUDA's virtual memory on current GPUs, 2 MiB.
func (b *backend) Granularity() int64 { return smallBuffer }

// Reserve places a new range where the first segment_map recorded before
// the current alloc says PyTorch's was, since PyTorch maps a new range
// from its start. A range reserved with no map recorded (its first map
// refused, as in an oom) is placed where the first later segment_map of
// the entry's stream and pool that lies in no range held is: PyTorch
// keeps such a range, and its stream and pool map their next new pages
// in it, from its start.
func (b *backend) Reserve(size int64) (uint64, error) {
	base, ok := uint64(0), false
	for _, p := range b.pending {
		if p.Action == snapshot.SegmentMap {
			base, ok = p.Addr, true
			break
		}
	}
	if !ok {
		base, ok = b.nextRange()
	}
	if !ok {
		base = b.fresh(size)
	}
	b.held[base] = size
	return base, nil
}

// nextRange returns the address of the first segment_map after the
// current entry, of its stream and pool, that lies in no range held.
func (b *backend) nextRange() (uint64, bool) {
	if b.from >= b.ahead.Len() {
		return 0, false
	}
	e := b.ahead.At(b.from)
	if e.Action != snapshot.Alloc && e.Action != snapshot.OutOfMemory {
		return 0, false
	}
	small := e.Size <= smallSize
	for i := b.from + 1; i < b.ahead.Len(); i++ {
		if b.ahead.Action(i) != snapshot.SegmentMap {
			continue
		}
		m := b.ahead.At(i)
		if m.Stream != e.Stream || (m.Size%largeBuffer != 0) != small {
			continue
		}
		in := false
		for base, size := range b.held {
			in = in || m.Addr >= base && m.Addr < base+uint64(size)
		}
		if !in {
			return m.Addr, true
		}
	}
	return 0, false
}

func (b *backend) Unreserve(addr uint64, size int64) error {
	delete(b.held, addr)
	return nil
}

func (b *backend) Create(size int64) (uint64, error) {
	switch {
	case b.forced && b.full:
		return 0, gpualloc.ErrOutOfMemory
	case b.forced && b.failAt > 0 && b.covered(b.pending[:b.failAt]):
		b.refuse()
		return 0, gpualloc.ErrOutOfMemory
	case !b.forced && b.refuses(size):
		if b.failAt > 0 && !b.refused {
			// Refused within an allocation whose map the record shows
			// failing: what follows is its retry.
			b.refuse()
		}
		return 0, gpualloc.ErrOutOfMemory
	}
	b.used += size
	b.handles++
	b.sizes[b.handles] = size
	b.mallocs++
	return b.handles, nil
}

func (b *backend) Release(handle uint64) error {
	size, ok := b.sizes[handle]
	if !ok {
		// A page of the start state, restored with no handle made: the
		// page just unmapped.
		size = b.unmapped
	}
	b.used -= size
	delete(b.sizes, handle)
	b.res.DeviceFrees++
	return nil
}

func (b *backend) Map(addr uint64, handle uint64) error {
	if b.refused {
		// The retry after the failed map: the releases between are
		// done, and a page they gave back may be mapped again.
		b.endReleases()
	}
	b.settle(addr)
	b.mapped = append(b.mapped, addr)
	delete(b.freed, addr)
	b.hold(b.sizes[handle])
	return nil
}

func (b *backend) Unmap(addr uint64, size int64) error {
	b.unmapped = size
	b.reserved -= size
	b.freed[addr] = true
	return nil
}

// pages returns the addresses of the pages of a segment_map or
// segment_unmap entry: the large pool's when its size is a multiple of
// them, else the small pool's.
func pages(e *snapshot.TraceEntry) []uint64 {
	page := int64(largeBuffer)
	if e.Size%page != 0 {
		page = smallBuffer
	}
	var out []uint64
	for off := int64(0); off < e.Size; off += page {
		out = append(out, e.Addr+uint64(off))
	}
	return out
}

// gaveBack reports whether the allocator gave back some of what entry e,
// a segment_free or segment_unmap, records.
func (b *backend) gaveBack(e *snapshot.TraceEntry) bool {
	if e.Action == snapshot.SegmentFree {
		return b.freed[e.Addr]
	}
	for _, p := range pages(e) {
		if b.freed[p] {
			return true
		}
	}
	return false
}

// takeBack reports whether the allocator gave back all that entry e
// records, and forgets it.
func (b *backend) takeBack(e *snapshot.TraceEntry) bool {
	if e.Action == snapshot.SegmentFree {
		ok := b.freed[e.Addr]
		delete(b.freed, e.Addr)
		return ok
	}
	ok := true
	for _, p := range pages(e) {
		ok = ok && b.freed[p]
		delete(b.freed, p)
	}
	return ok
}

// covered reports whether every page of the segment_map entries of es is
// mapped for the current alloc.
func (b *backend) covered(es []snapshot.TraceEntry) bool {
	var mapped map[uint64]bool // nil, and no map made, for the allocs that map no pages
	if len(b.mapped) > 0 {
		mapped = make(map[uint64]bool, len(b.mapped))
		for _, a := range b.mapped {
			mapped[a] = true
		}
	}
	for _, e := range es {
		if e.Action != snapshot.SegmentMap {
			continue
		}
		for _, p := range pages(&e) {
			if !mapped[p] {
				return false
			}
		}
	}
	return true
}

// refuse closes the entries of pending recorded before the current
// alloc's failed map, as endAlloc does, and leaves those after it to its
// retry; a recorded oom refuses the retry too.
func (b *backend) refuse() {
	after := append([]snapshot.TraceEntry(nil), b.pending[b.failAt:]...)
	b.pending = b.pending[:b.failAt]
	b.endAlloc()
	b.pending = append(b.pending, after...)
	b.refused = true
	b.full = b.oom && b.forced
}

// endAlloc closes the recorded segment_alloc and segment_map entries of the
// alloc just replayed: a segment that the allocator did not ask for, a
// recorded range it did not map and a page it mapped that no entry
// records are mismatches.
func (b *backend) endAlloc() {
	var mapped map[uint64]bool // nil, and no map made, for the allocs that map no pages
	if len(b.mapped) > 0 {
		mapped = make(map[uint64]bool, len(b.mapped))
		for _, a := range b.mapped {
			mapped[a] = true
		}
	}
	for _, p := range b.pending {
		switch {
		case p.Action == snapshot.SegmentAlloc && !b.taken:
			b.mismatch(Mismatch{b.dev, b.index, "segment_alloc", p.Size, fmt.Sprintf("%d bytes", p.Size), "none (served from the cache)"})
		case p.Action == snapshot.SegmentMap:
			all := true
			for _, a := range pages(&p) {
				all = all && mapped[a]
				delete(mapped, a)
			}
			if all {
				b.res.SegmentMatches++
			} else {
				b.mismatch(Mismatch{b.dev, b.index, "segment_map", p.Size, hex(p.Addr), "not mapped"})
			}
		}
	}
	if len(mapped) > 0 {
		var extra []uint64
		for a := range mapped {
			extra = append(extra, a)
		}
		sort.Slice(extra, func(i, j int) bool { return extra[i] < extra[j] })
		b.res.ExtraMallocs += int64(len(extra))
		b.mismatch(Mismatch{b.dev, b.index, "segment_map", 0, "none", fmt.Sprintf("%d pages from %s", len(extra), hex(extra[0]))})
	}
	b.pending, b.taken, b.mapped = b.pending[:0], false, b.mapped[:0]
	b.failAt, b.refused = 0, false
}

// endReleases closes the segment_free and segment_unmap entries recorded
// before the alloc or oom just replayed: a segment or page that the
// allocator kept is a mismatch.
func (b *backend) endReleases() {
	for i := range b.releases {
		e := &b.releases[i]
		if b.takeBack(e) {
			b.res.SegmentFreeMatches++
		} else {
			b.mismatch(Mismatch{b.dev, b.index, string(e.Action), e.Size, hex(e.Addr), "kept"})
		}
	}
	b.releases = b.releases[:0]
}

// PyTorch's segment and page sizes: addresses made up for unrecorded
// segments are aligned to the first.
const (
	smallBuffer = torchsize.SmallBuffer // kSmallBuffer: segment of the small pool
	largeBuffer = torchsize.LargeBuffer // kLargeBuffer: page of a large pool's expandable segment
	smallSize   = torchsize.SmallSize   // kSmallSize: the largest request of the small pool
)
