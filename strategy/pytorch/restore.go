package pytorch

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// Restore makes the allocator hold segment s of a PyTorch snapshot (such as
// one of [snapshot.Snapshot.InitialState]) as if it had allocated it from
// its backend (the backend is NOT called; Free of the segment later calls
// backend.Free(addr, size) as usual). It returns the live blocks, in
// address order, for the caller to free later.
//
// The blocks of s must be in address order, each starting where the one
// before ends, and cover it; a block is live when [snapshot.Block.Live].
// The segment belongs to the small pool of stream s.Stream if it is 2 MiB
// or smaller, else to the large pool, as PyTorch's segment sizes imply
// (s.SegmentType and s.Device are not read); its free blocks enter the pool
// as if just freed. In [gpualloc.Stats] the segment counts as a
// device allocation and each live block as an allocation served from the
// cache, so that the counters add up; in [MemoryStats] it adds to the byte
// counts but not to NumDeviceAlloc. A live block with RequestedSize below
// 1 is taken to have asked for its whole Size.
//
// An expandable segment (s.IsExpandable, as PyTorch's snapshots list one
// mapped range of an expandable segment) needs an allocator with
// expandable_segments; it is mapped memory of the range of its stream and
// pool (s.SegmentType, "small" or "large"), which starts at the address of
// the first such segment restored: restore them in address order. Its
// pages count as mapped (and, with virtual memory, as created handles
// whose ids are their addresses), without a backend call.
//
// It costs O(blocks of s) and, unless s lies above every segment held (as
// when a state's segments are restored in address order), O(segments held)
// for the check that s overlaps none.
func (a *Allocator) Restore(s snapshot.Segment) ([]gpualloc.Block, error) {
	fail := func(format string, args ...any) ([]gpualloc.Block, error) {
		return nil, fmt.Errorf("%s: restore of segment %#x (%d bytes): %s", name, s.Address, s.TotalSize, fmt.Sprintf(format, args...))
	}
	if s.IsExpandable && !a.c.ExpandableSegments {
		return fail("an expandable segment, and expandable_segments is off")
	}
	if s.TotalSize < 1 || len(s.Blocks) == 0 {
		return fail("empty segment")
	}
	var sum int64
	for i, b := range s.Blocks {
		if b.Size < 1 || b.Size%minBlockSize != 0 {
			return fail("block %d has size %d, not a positive multiple of %d", i, b.Size, minBlockSize)
		}
		if b.Address != s.Address+uint64(sum) {
			return fail("block %d is at %#x, not at %#x", i, b.Address, s.Address+uint64(sum))
		}
		if b.Live() && b.RequestedSize > b.Size {
			return fail("block %d requested %d bytes, more than its %d", i, b.RequestedSize, b.Size)
		}
		sum += b.Size
	}
	if sum != s.TotalSize {
		return fail("blocks cover %d bytes", sum)
	}
	if s.IsExpandable {
		return a.restoreExpandable(s)
	}
	end := s.Address + uint64(s.TotalSize)
	for i := range a.cache.Segs {
		if s.Address >= a.segEnd {
			break // above every segment held: segments restored in address order cost O(1) here
		}
		o := &a.cache.Segs[i]
		if o.Size != 0 && s.Address < o.Addr+uint64(o.Size) && o.Addr < end {
			return nil, errors.New(name + ": restore: " + fmt.Sprintf("segment %#x (%d bytes) overlaps segment %#x (%d bytes)", s.Address, s.TotalSize, o.Addr, o.Size))
		}
	}
	small := s.TotalSize <= smallBuffer
	pi := a.poolIndex(s.Stream, a.poolOf(s.Pool))
	set := a.cache.Set(pi, small)
	k := kind(small)
	a.cache.M.CountDeviceMalloc(s.TotalSize)
	first := a.addSegment(s.Address, s.TotalSize, pi, small)
	split := len(s.Blocks) > 1
	var live []gpualloc.Block
	addr, n := s.Address, first
	for i, b := range s.Blocks {
		if i > 0 {
			prev := n
			n = a.cache.NewNode()
			a.cache.Nodes[prev].Next = n
			a.cache.Nodes[n].Prev = prev
			a.cache.Meta[n] = a.cache.Meta[first]
		}
		nd := &a.cache.Nodes[n]
		nd.Addr, nd.Size, nd.Free = addr, b.Size, true
		a.cache.Meta[n].X.gcBase = a.gcCount[k]
		addr += uint64(b.Size)
	}
	// Hand out the live blocks, index the free ones.
	i := 0
	for n := first; n != 0; n = a.cache.Nodes[n].Next {
		b := s.Blocks[i]
		i++
		nd := &a.cache.Nodes[n]
		if !b.Live() {
			set.Insert(a.cache.Nodes, n)
			if split {
				a.ms.InactiveSplitBytes.add(nd.Size)
			}
			continue
		}
		live = append(live, a.restoreLive(n, b, s.Stream))
	}
	return live, nil
}

// restoreLive hands out block n, restored as the live block b.
func (a *Allocator) restoreLive(n int32, b snapshot.Block, stream uint64) gpualloc.Block {
	req := b.RequestedSize
	if req < 1 {
		req = b.Size
	}
	addr, size, h, _ := a.cache.Take(n, b.Size, req, false, true)
	a.countAlloc(size, req)
	return gpualloc.Block{Addr: addr, Size: size, Requested: req, Stream: stream, Handle: h}
}

// restoreExpandable restores s, a mapped range of an expandable segment,
// its blocks checked.
func (a *Allocator) restoreExpandable(s snapshot.Segment) ([]gpualloc.Block, error) {
	fail := func(format string, args ...any) ([]gpualloc.Block, error) {
		return nil, fmt.Errorf("%s: restore of expandable segment %#x (%d bytes): %s", name, s.Address, s.TotalSize, fmt.Sprintf(format, args...))
	}
	small := s.SegmentType == "small" || (s.SegmentType == "" && s.TotalSize%largeBuffer != 0)
	page := int64(largeBuffer)
	if small {
		page = smallBuffer
	}
	if s.TotalSize%page != 0 {
		return fail("not a whole number of pages of %d bytes", page)
	}
	pi := a.poolIndex(s.Stream, a.poolOf(s.Pool))
	var r *xrange
	ri := int32(-1)
	for i, x := range a.xr {
		if x != nil && x.pool == pi && x.small == small && x.base <= s.Address && s.Address-x.base < uint64(x.size) {
			if (s.Address-x.base)%uint64(page) == 0 {
				r, ri = x, int32(i)
				break
			}
			// Not on a page of x: the start of the next range, reserved
			// when x was full, where x ends.
			if err := a.capRange(x, s.Address); err != nil {
				return fail("%v", err)
			}
		}
	}
	if r == nil {
		r, ri = a.restoreRange(pi, small, s.Address)
	}
	off := int64(s.Address - r.base)
	end := s.Address + uint64(s.TotalSize)
	if off%page != 0 || off+s.TotalSize > r.size {
		return fail("not whole pages of the range at %#x", r.base)
	}
	// The unmapped block that holds the segment.
	var u int32
	for _, n := range *a.unmappedList(pi, small) {
		if nd := &a.cache.Nodes[n]; nd.Addr <= s.Address && end <= nd.Addr+uint64(nd.Size) {
			u = n
		}
	}
	if u == 0 {
		return fail("overlaps memory restored before")
	}
	a.removeUnmapped(u)
	uAddr, uEnd := a.cache.Nodes[u].Addr, a.cache.Nodes[u].Addr+uint64(a.cache.Nodes[u].Size)
	prev, next := a.cache.Nodes[u].Prev, a.cache.Nodes[u].Next
	a.cache.Recycle(u)
	mt := meta{Pool: pi, Seg: ri, Small: small, X: ext{exp: true}}
	var chain []int32
	add := func(addr uint64, size int64, unmapped bool) int32 {
		n := a.cache.NewNode()
		a.cache.Nodes[n] = segmentNode(addr, size)
		a.cache.Meta[n] = mt
		a.cache.Meta[n].X.unmapped = unmapped
		a.cache.Meta[n].X.gcBase = a.gcCount[kind(small)]
		chain = append(chain, n)
		return n
	}
	if s.Address > uAddr {
		add(uAddr, int64(s.Address-uAddr), true)
	}
	first := len(chain)
	addr := s.Address
	for _, b := range s.Blocks {
		add(addr, b.Size, false)
		addr += uint64(b.Size)
	}
	if end < uEnd {
		add(end, int64(uEnd-end), true)
	}
	for i, n := range chain {
		p := prev
		if i > 0 {
			p = chain[i-1]
		}
		a.cache.Nodes[n].Prev = p
		if p != 0 {
			a.cache.Nodes[p].Next = n
		}
	}
	last := chain[len(chain)-1]
	a.cache.Nodes[last].Next = next
	if next != 0 {
		a.cache.Nodes[next].Prev = last
	}
	// The pages, mapped.
	for p := off / page; p < (off+s.TotalSize)/page; p++ {
		for int64(len(r.pages)) <= p {
			r.pages = append(r.pages, xpage{})
		}
		r.pages[p] = xpage{id: r.base + uint64(p*page), held: true, mapped: a.vm != nil}
		a.cache.M.CountDeviceMalloc(page)
		if a.vm != nil {
			a.cache.M.CountMap()
		}
	}
	a.reserved += s.TotalSize
	a.ms.ReservedBytes.add(s.TotalSize)
	a.cache.FreeBytes += s.TotalSize
	set := a.cache.Set(pi, small)
	var live []gpualloc.Block
	for i, b := range s.Blocks {
		n := chain[first+i]
		switch {
		case b.Live():
			live = append(live, a.restoreLive(n, b, s.Stream))
		default:
			a.cache.Nodes[n].Free = true
			set.Insert(a.cache.Nodes, n)
		}
	}
	for _, n := range chain {
		if a.cache.Meta[n].X.unmapped {
			a.insertUnmapped(n)
		}
	}
	return live, nil
}

// RestoreRange makes the allocator hold a range of an expandable segment of
// stream's small or large pool that starts at base, nothing mapped, as if
// it had reserved it from its backend, without calling the backend: for
// [Allocator.Restore] of the range's mapped parts, when the range starts
// below the first of them. Ranges restored one after the other end where
// the next begins, when that is before their size.
func (a *Allocator) RestoreRange(stream uint64, small bool, base uint64) error {
	if !a.c.ExpandableSegments {
		return fmt.Errorf("%s: restore of an expandable range at %#x: expandable_segments is off", name, base)
	}
	pi := a.poolIndex(stream, 0)
	for _, x := range a.xr {
		if x != nil && x.pool == pi && x.small == small && x.base <= base && base-x.base < uint64(x.size) {
			if err := a.capRange(x, base); err != nil {
				return fmt.Errorf("%s: restore of an expandable range at %#x: %v", name, base, err)
			}
		}
	}
	a.restoreRange(pi, small, base)
	return nil
}

// restoreRange adds a range of the pool at base, nothing mapped.
func (a *Allocator) restoreRange(pi int32, small bool, base uint64) (*xrange, int32) {
	r := a.newRange(pi, small)
	r.base = base
	ri, _ := a.addRange(r)
	return r, ri
}

// capRange makes range x end at end, a range reserved after it: its
// unmapped tail past end goes.
func (a *Allocator) capRange(x *xrange, end uint64) error {
	size := int64(end-x.base) / x.page * x.page
	for _, n := range *a.unmappedList(x.pool, x.small) {
		nd := &a.cache.Nodes[n]
		if nd.Addr+uint64(nd.Size) != x.base+uint64(x.size) {
			continue
		}
		if nd.Addr > x.base+uint64(size) {
			return fmt.Errorf("the range at %#x is mapped past %#x", x.base, end)
		}
		x.size = size
		if nd.Addr == x.base+uint64(size) {
			// Mapped up to the next range: the tail goes.
			a.removeUnmapped(n)
			if p := nd.Prev; p != 0 {
				a.cache.Nodes[p].Next = 0
			}
			a.cache.Recycle(n)
			return nil
		}
		nd.Size = int64(x.base + uint64(size) - nd.Addr)
		return nil
	}
	return fmt.Errorf("the range at %#x is mapped to its end", x.base)
}

// RestoreExpandable makes the allocator hold segs, mapped ranges of
// expandable segments of a recorded state (their IsExpandable set), on
// memory it takes from its backend: unlike Restore it calls the backend,
// for a replay whose device must hold the state too. The segments of one
// stream and pool (SegmentType "small" or "large") lie in one range,
// reserved from the backend (Reserve, or an address of its own without
// virtual memory), at the offsets from one another that they were
// recorded at, the lowest at the range's start; each page of them is
// created and mapped (Create and Map, or a Malloc without virtual
// memory). It returns each segment's live blocks, in the order of segs,
// and the segments moved to where they now lie; nothing, holding none,
// when expandable_segments is off. An error for want of memory (a page
// the backend refuses, or segments that lie past the range that the
// device's size gives) wraps [gpualloc.ErrOutOfMemory]. On error the
// allocator may hold part of them.
func (a *Allocator) RestoreExpandable(segs []snapshot.Segment) ([][]gpualloc.Block, []snapshot.Segment, error) {
	if !a.c.ExpandableSegments {
		return nil, nil, nil
	}
	type group struct {
		pi    int32
		small bool
	}
	bases := map[group]uint64{}   // the lowest recorded address of each group
	ranges := map[group]*xrange{} // its range, reserved
	kindOf := func(s *snapshot.Segment) group {
		small := s.SegmentType == "small" || (s.SegmentType == "" && s.TotalSize%largeBuffer != 0)
		return group{a.poolIndex(s.Stream, a.poolOf(s.Pool)), small}
	}
	for i := range segs {
		g := kindOf(&segs[i])
		if b, ok := bases[g]; !ok || segs[i].Address < b {
			bases[g] = segs[i].Address
		}
	}
	moved := make([]snapshot.Segment, len(segs))
	live := make([][]gpualloc.Block, len(segs))
	for i := range segs {
		s := segs[i]
		g := kindOf(&s)
		r := ranges[g]
		if r == nil {
			r = a.newRange(g.pi, g.small)
			if a.vm != nil {
				base, err := a.vm.Reserve(r.size)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: restore: reserve of %d bytes for an expandable segment: %w", name, r.size, err)
				}
				r.base = base
			} else {
				r.base = a.nextBase
				a.nextBase += (uint64(r.size) + 2*xAlign - 1) &^ (xAlign - 1)
			}
			a.addRange(r)
			ranges[g] = r
		}
		off := s.Address - bases[g]
		if off+uint64(s.TotalSize) > uint64(r.size) {
			// The range is sized from the device's memory, as PyTorch's:
			// a device too small for the state has a range too short.
			_, total := a.b.MemInfo()
			return nil, nil, fmt.Errorf("%s: restore of expandable segment %#x (%d bytes): %d bytes from the first of its range, past the range's %d that a device of %d bytes reserves: %w", name, s.Address, s.TotalSize, off, r.size, total, gpualloc.ErrOutOfMemory)
		}
		m := s
		m.Address = r.base + off
		m.Blocks = make([]snapshot.Block, len(s.Blocks))
		for j, b := range s.Blocks {
			b.Address = b.Address - s.Address + m.Address
			m.Blocks[j] = b
		}
		blocks, err := a.Restore(m)
		if err != nil {
			return nil, nil, err
		}
		if err := a.backPages(r, m); err != nil {
			return nil, nil, err
		}
		moved[i], live[i] = m, blocks
	}
	return live, moved, nil
}

// backPages gives the pages of s, restored in range r as held without a
// backend call, memory of the backend: a created handle mapped at each,
// or a Malloc without virtual memory.
func (a *Allocator) backPages(r *xrange, s snapshot.Segment) error {
	first := int64(s.Address-r.base) / r.page
	for p := first; p < first+s.TotalSize/r.page; p++ {
		addr := r.base + uint64(p*r.page)
		if a.vm == nil {
			id, err := a.b.Malloc(r.page)
			if err != nil {
				return fmt.Errorf("%s: restore of the page at %#x: %w", name, addr, err)
			}
			r.pages[p].id = id
			continue
		}
		id, err := a.vm.Create(r.page)
		if err != nil {
			return fmt.Errorf("%s: restore of the page at %#x: %w", name, addr, err)
		}
		if err := a.vm.Map(addr, id); err != nil {
			return fmt.Errorf("%s: restore of the page at %#x: %w", name, addr, err)
		}
		r.pages[p].id = id
	}
	return nil
}
