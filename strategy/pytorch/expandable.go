package pytorch

import (
	"errors"
	"sort"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// Expandable segments (expandable_segments:True). Each (stream, pool) grows
// one virtual address range (ExpandableSegment) in pages of 2 MiB (small
// pool) or 20 MiB (large pool). The range is reserved once, 1 1/8 times the
// device's total memory, at addresses of the allocator's own (far above
// those of the backend): block addresses are then virtual addresses in a
// range, NOT backend addresses. Mapping a page is one backend Malloc of the
// page size and unmapping it the backend Free of that allocation, so that
// reserved memory, device calls and out-of-memory come from the backend; a
// page table maps the range's pages to their backend allocations.
//
// A range is a list of blocks covering it: live blocks, free (mapped)
// blocks, which are in the pool's free set, and unmapped blocks, which are
// in the pool's unmapped list, ordered by address.

// xBase is the first virtual address of expandable ranges; xAlign aligns
// the start of each.
const (
	xBase  = 1 << 62
	xAlign = 1 << 32
)

// An xrange is one expandable segment.
type xrange struct {
	base  uint64
	size  int64 // bytes of virtual address space
	page  int64 // bytes of a page
	pages []xpage
	pool  int32
	small bool
}

// An xpage is a page table entry: the backend allocation mapped there.
type xpage struct {
	addr   uint64
	mapped bool
}

// expandableSize is a block's size for best fit with expandable segments:
// its own size plus that of the unmapped block after it.
func (a *Allocator) expandableSize(n int32) int64 {
	s := a.nodes[n].Size
	if nx := a.nodes[n].Next; nx != 0 && a.meta[nx].unmapped {
		s += a.nodes[nx].Size
	}
	return s
}

// allocatable reports whether block n may take part in a request: free or
// unmapped.
func (a *Allocator) allocatable(n int32) bool {
	return n != 0 && (a.nodes[n].Free || a.meta[n].unmapped)
}

// unmappedList returns the unmapped blocks of a stream's pool.
func (a *Allocator) unmappedList(pi int32, small bool) *[]int32 {
	return &a.pools[pi].unmapped[kind(small)]
}

func (a *Allocator) insertUnmapped(n int32) {
	mt := a.meta[n]
	l := a.unmappedList(mt.pool, mt.small)
	addr := a.nodes[n].Addr
	i := sort.Search(len(*l), func(i int) bool { return a.nodes[(*l)[i]].Addr >= addr })
	*l = append(*l, 0)
	copy((*l)[i+1:], (*l)[i:])
	(*l)[i] = n
}

func (a *Allocator) removeUnmapped(n int32) {
	mt := a.meta[n]
	l := a.unmappedList(mt.pool, mt.small)
	addr := a.nodes[n].Addr
	i := sort.Search(len(*l), func(i int) bool { return a.nodes[(*l)[i]].Addr >= addr })
	if i == len(*l) || (*l)[i] != n {
		panic("pytorch: unmapped block not in its list")
	}
	*l = append((*l)[:i], (*l)[i+1:]...)
}

// findExpandable returns the block at which a request of size bytes can be
// placed in the stream's pool, the lowest unmapped block (with the free
// block before it) followed by enough free or unmapped space; it reserves a
// new range when there is none (find_expandable_block).
func (a *Allocator) findExpandable(pi int32, small bool, size int64) int32 {
	for _, u := range *a.unmappedList(pi, small) {
		c := u
		if p := a.nodes[u].Prev; p != 0 && a.nodes[p].Free {
			c = p
		}
		var bytes int64
		for b := c; bytes < size && a.allocatable(b); b = a.nodes[b].Next {
			bytes += a.nodes[b].Size
		}
		if bytes >= size {
			return c
		}
	}
	page := int64(largeBuffer)
	if small {
		page = smallBuffer
	}
	_, total := a.b.MemInfo()
	want := total + total/8
	if want <= 0 || want > 1<<56 {
		want = 1 << 56
	}
	npages := (want + page - 1) / page
	r := &xrange{base: a.nextBase, size: npages * page, page: page, pool: pi, small: small}
	a.nextBase += (uint64(r.size) + 2*xAlign - 1) &^ (xAlign - 1)
	ri := int32(len(a.xr))
	for i, x := range a.xr {
		if x == nil {
			ri = int32(i)
			break
		}
	}
	if ri == int32(len(a.xr)) {
		a.xr = append(a.xr, r)
	} else {
		a.xr[ri] = r
	}
	n := a.newNode()
	a.nodes[n] = segmentNode(r.base, r.size)
	a.meta[n] = meta{pool: pi, seg: ri, small: small, exp: true, unmapped: true}
	a.insertUnmapped(n)
	return n
}

// tryExpandable maps what a request of size bytes needs and returns its
// free block, out of the pool; 0 when the device refuses a page
// (try_allocate_expandable_block).
func (a *Allocator) tryExpandable(pi int32, small bool, size int64) (int32, error) {
	c := a.findExpandable(pi, small, size)
	if a.meta[c].unmapped {
		var err error
		if c, err = a.mapBlock(c, min(a.nodes[c].Size, size)); c == 0 || err != nil {
			return 0, err
		}
	}
	for a.nodes[c].Size < size {
		next := a.nodes[c].Next
		var err error
		if c, err = a.mapBlock(next, min(size-a.nodes[c].Size, a.nodes[next].Size)); c == 0 || err != nil {
			return 0, err
		}
	}
	a.pools[pi].set(small).Remove(a.nodes, c)
	return c, nil
}

// mapBlock maps the pages that hold the first size bytes of the unmapped
// block n, merges them with the free blocks around and returns the free
// block, in its pool; 0 when the device refuses a page, which leaves
// nothing mapped (map_block).
func (a *Allocator) mapBlock(n int32, size int64) (int32, error) {
	mt := a.meta[n]
	r := a.xr[mt.seg]
	addr := a.nodes[n].Addr
	begin := int64(addr-r.base) / r.page
	end := (int64(addr-r.base) + size + r.page - 1) / r.page
	for int64(len(r.pages)) < end {
		r.pages = append(r.pages, xpage{})
	}
	for i := begin; i < end; i++ {
		p, err := a.b.Malloc(r.page)
		if err != nil {
			if uerr := a.unmapPages(r, begin, i); uerr != nil {
				return 0, uerr
			}
			if errors.Is(err, gpualloc.ErrOutOfMemory) {
				return 0, nil
			}
			return 0, err
		}
		r.pages[i] = xpage{addr: p, mapped: true}
		a.pageMaps++
		a.m.CountDeviceMalloc(r.page)
		a.reserved += r.page
		a.ms.ReservedBytes.add(r.page)
	}
	mapped := (end - begin) * r.page
	a.removeUnmapped(n)
	if mapped < a.nodes[n].Size {
		rest := a.newNode()
		a.nodes[rest] = segmentNode(addr+uint64(mapped), a.nodes[n].Size-mapped)
		a.meta[rest] = mt
		a.link(n, rest)
		a.nodes[n].Size = mapped
		a.insertUnmapped(rest)
	}
	a.meta[n].unmapped = false
	a.nodes[n].Free = true
	a.free += mapped
	a.ms.NumDeviceAlloc.add(1)
	set := a.pools[mt.pool].set(mt.small)
	if p := a.nodes[n].Prev; p != 0 && a.nodes[p].Free {
		set.Remove(a.nodes, p)
		a.mergeNext(p)
		n = p
	}
	if nx := a.nodes[n].Next; nx != 0 && a.nodes[nx].Free {
		set.Remove(a.nodes, nx)
		a.mergeNext(n)
	}
	a.meta[n].gcBase = a.gcCount[kind(mt.small)]
	set.Insert(a.nodes, n)
	return n, nil
}

// unmapPages returns pages [begin, end) of r to the backend.
func (a *Allocator) unmapPages(r *xrange, begin, end int64) error {
	var errs []error
	for i := begin; i < end; i++ {
		if err := a.b.Free(r.pages[i].addr, r.page); err != nil {
			errs = append(errs, err)
		}
		r.pages[i] = xpage{}
		a.m.CountDeviceFree(r.page)
		a.reserved -= r.page
		a.ms.ReservedBytes.add(-r.page)
	}
	for len(r.pages) > 0 && !r.pages[len(r.pages)-1].mapped {
		r.pages = r.pages[:len(r.pages)-1]
	}
	return errors.Join(errs...)
}

// link puts block x right after block n in its segment.
func (a *Allocator) link(n, x int32) {
	nodes := a.nodes
	nodes[x].Prev = n
	nodes[x].Next = nodes[n].Next
	if nodes[x].Next != 0 {
		nodes[nodes[x].Next].Prev = x
	}
	nodes[n].Next = x
}

// unmapBlock unmaps the pages that lie wholly inside the free block n;
// what is left of the block on either side stays free (unmap_block).
func (a *Allocator) unmapBlock(n int32) error {
	mt := a.meta[n]
	r := a.xr[mt.seg]
	addr, size := a.nodes[n].Addr, a.nodes[n].Size
	off := int64(addr - r.base)
	begin := (off + r.page - 1) / r.page
	end := (off + size) / r.page
	if begin >= end {
		return nil
	}
	// Free the pages one by one: a page the backend refuses stays mapped,
	// with those after it.
	var ferr error
	for i := begin; i < end; i++ {
		if err := a.b.Free(r.pages[i].addr, r.page); err != nil {
			ferr = err
			end = i
			break
		}
		r.pages[i] = xpage{}
		a.m.CountDeviceFree(r.page)
		a.reserved -= r.page
		a.ms.ReservedBytes.add(-r.page)
	}
	for len(r.pages) > 0 && !r.pages[len(r.pages)-1].mapped {
		r.pages = r.pages[:len(r.pages)-1]
	}
	if begin >= end {
		return ferr
	}
	set := a.pools[mt.pool].set(mt.small)
	set.Remove(a.nodes, n)
	uaddr := r.base + uint64(begin*r.page)
	usize := (end - begin) * r.page
	if before := int64(uaddr - addr); before > 0 {
		b := a.newNode()
		a.nodes[b] = segmentNode(addr, before)
		a.nodes[b].Free = true
		a.meta[b] = mt
		a.meta[b].gcBase = a.gcCount[kind(mt.small)]
		if p := a.nodes[n].Prev; p != 0 {
			a.link(p, b)
		} else {
			a.nodes[b].Next = n
			a.nodes[n].Prev = b
		}
		set.Insert(a.nodes, b)
	}
	if after := size - int64(uaddr-addr) - usize; after > 0 {
		x := a.newNode()
		a.nodes[x] = segmentNode(uaddr+uint64(usize), after)
		a.nodes[x].Free = true
		a.meta[x] = mt
		a.meta[x].gcBase = a.gcCount[kind(mt.small)]
		a.link(n, x)
		set.Insert(a.nodes, x)
	}
	a.nodes[n].Addr, a.nodes[n].Size, a.nodes[n].Free = uaddr, usize, false
	a.meta[n].unmapped = true
	a.free -= usize
	a.ms.NumDeviceFree.add(1)
	if p := a.nodes[n].Prev; p != 0 && a.meta[p].unmapped {
		a.removeUnmapped(p)
		a.mergeNext(p)
		n = p
	}
	if nx := a.nodes[n].Next; nx != 0 && a.meta[nx].unmapped {
		a.removeUnmapped(nx)
		a.mergeNext(n)
	}
	if a.nodes[n].Prev == 0 && a.nodes[n].Next == 0 {
		// The whole range is unmapped: give it up (release_expandable_segment).
		a.xr[mt.seg] = nil
		a.recycle(n)
		return ferr
	}
	a.insertUnmapped(n)
	return ferr
}

// releaseExpandable unmaps the fully free pages of every free block of
// expandable segments (release_blocks).
func (a *Allocator) releaseExpandable() error {
	var todo []int32
	for n := int32(1); n < int32(len(a.nodes)); n++ {
		if a.meta[n].exp && a.nodes[n].Free {
			todo = append(todo, n)
		}
	}
	var errs []error
	for _, n := range todo {
		if err := a.unmapBlock(n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// segmentNode returns a block of size bytes at addr, alone and not free.
func segmentNode(addr uint64, size int64) segment.Node {
	return segment.Node{Addr: addr, Size: size}
}
