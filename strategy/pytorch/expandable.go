package pytorch

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// Expandable segments (expandable_segments:True), as PyTorch's
// ExpandableSegment (c10/cuda/CUDACachingAllocator.cpp). Each (stream, pool)
// grows one range of virtual addresses in pages of 2 MiB (small pool,
// kSmallBuffer) or 20 MiB (large pool, kLargeBuffer). The range is reserved
// once, 1 1/8 times the device's total memory rounded up to whole pages
// (segment_size * max_handles), and given up when its last page is unmapped.
//
// On a backend that is a [gpualloc.VirtualMemory] whose granularity divides
// 2 MiB, this is what PyTorch does with CUDA's virtual memory management:
// the range is one Reserve (cuMemAddressReserve); mapping pages is one
// Create of the page size per page (cuMemCreate), then, once every Create
// succeeded, one Map per page (cuMemMap and cuMemSetAccess); unmapping a
// page is its Unmap followed by its Release (unmapHandles); the range's
// Unreserve is cuMemAddressFree. Block addresses are then addresses of the
// device. A Create refused for want of memory gives back the pages created
// before it, unmapped, and the request goes on as PyTorch's does after a
// failed map.
//
// On any other backend the pages come from Malloc: the range lies at
// addresses of the allocator's own (from 2^62, far above those of any
// backend), block addresses are virtual addresses in it, NOT backend
// addresses, and mapping a page is one Malloc of the page size, unmapping it
// the Free of that allocation. Reserved memory, device calls and
// out-of-memory come from the backend either way; a page table keeps the
// page's handle or allocation.
//
// A range is a list of blocks covering it: live blocks, free (mapped)
// blocks, which are in the pool's free set, and unmapped blocks, which are
// in the pool's unmapped list, ordered by address.

// xBase is the first virtual address of expandable ranges on a backend
// without virtual memory; xAlign aligns the start of each.
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

// An xpage is a page table entry: the device memory that backs the page,
// a Create handle or a Malloc address.
type xpage struct {
	id     uint64
	held   bool // id is live device memory
	mapped bool // with virtual memory: id is mapped at the page
}

// virtualMemory returns b's virtual memory if expandable segments can use
// it: a granularity that divides both page sizes.
func virtualMemory(b gpualloc.Backend) gpualloc.VirtualMemory {
	if vm, ok := b.(gpualloc.VirtualMemory); ok {
		if g := vm.Granularity(); g > 0 && smallBuffer%g == 0 && largeBuffer%g == 0 {
			return vm
		}
	}
	return nil
}

// expandableSize is a block's size for best fit with expandable segments:
// its own size plus that of the unmapped block after it.
func (a *Allocator) expandableSize(n int32) int64 {
	s := a.cache.Nodes[n].Size
	if nx := a.cache.Nodes[n].Next; nx != 0 && a.cache.Meta[nx].X.unmapped {
		s += a.cache.Nodes[nx].Size
	}
	return s
}

// allocatable reports whether block n may take part in a request: free or
// unmapped.
func (a *Allocator) allocatable(n int32) bool {
	return n != 0 && (a.cache.Nodes[n].Free || a.cache.Meta[n].X.unmapped)
}

// unmappedList returns the unmapped blocks of a stream's pool.
func (a *Allocator) unmappedList(pi int32, small bool) *[]int32 {
	return &a.cache.Streams[pi].X.unmapped[kind(small)]
}

func (a *Allocator) insertUnmapped(n int32) {
	mt := a.cache.Meta[n]
	l := a.unmappedList(mt.Pool, mt.Small)
	addr := a.cache.Nodes[n].Addr
	i := sort.Search(len(*l), func(i int) bool { return a.cache.Nodes[(*l)[i]].Addr >= addr })
	*l = append(*l, 0)
	copy((*l)[i+1:], (*l)[i:])
	(*l)[i] = n
}

func (a *Allocator) removeUnmapped(n int32) {
	mt := a.cache.Meta[n]
	l := a.unmappedList(mt.Pool, mt.Small)
	addr := a.cache.Nodes[n].Addr
	i := sort.Search(len(*l), func(i int) bool { return a.cache.Nodes[(*l)[i]].Addr >= addr })
	if i == len(*l) || (*l)[i] != n {
		panic("pytorch: unmapped block not in its list")
	}
	*l = append((*l)[:i], (*l)[i+1:]...)
}

// findExpandable returns the block at which a request of size bytes can be
// placed in the stream's pool, the lowest unmapped block (with the free
// block before it) followed by enough free or unmapped space; it reserves a
// new range when there is none (find_expandable_block).
func (a *Allocator) findExpandable(pi int32, small bool, size int64) (int32, error) {
	for _, u := range *a.unmappedList(pi, small) {
		c := u
		if p := a.cache.Nodes[u].Prev; p != 0 && a.cache.Nodes[p].Free {
			c = p
		}
		var bytes int64
		for b := c; bytes < size && a.allocatable(b); b = a.cache.Nodes[b].Next {
			bytes += a.cache.Nodes[b].Size
		}
		if bytes >= size {
			return c, nil
		}
	}
	r := a.newRange(pi, small)
	if a.vm != nil {
		base, err := a.vm.Reserve(r.size)
		if err != nil {
			// PyTorch's C10_CUDA_DRIVER_CHECK makes any failure of
			// cuMemAddressReserve an error, never an out-of-memory: the
			// cause is kept as text, so that it is not taken for one.
			return 0, fmt.Errorf("reserve of %d bytes for an expandable segment: %v", r.size, err)
		}
		r.base = base
	} else {
		r.base = a.nextBase
		a.nextBase += (uint64(r.size) + 2*xAlign - 1) &^ (xAlign - 1)
	}
	_, n := a.addRange(r)
	return n, nil
}

// newRange returns a range for the stream's pool, of 1 1/8 times the
// device's memory in whole pages, at no address yet.
func (a *Allocator) newRange(pi int32, small bool) *xrange {
	page := int64(largeBuffer)
	if small {
		page = smallBuffer
	}
	_, total := a.b.MemInfo()
	want := total + total/8
	if want <= 0 || want > 1<<56 {
		want = 1 << 56
	}
	return &xrange{size: (want + page - 1) / page * page, page: page, pool: pi, small: small}
}

// addRange adds range r, its base set, with its one block, unmapped, and
// returns its index in a.xr and the block.
func (a *Allocator) addRange(r *xrange) (int32, int32) {
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
	n := a.cache.NewNode()
	a.cache.Nodes[n] = segmentNode(r.base, r.size)
	a.cache.Meta[n] = meta{Pool: r.pool, Seg: ri, Small: r.small, X: ext{exp: true, unmapped: true}}
	a.insertUnmapped(n)
	return ri, n
}

// tryExpandable maps what a request of size bytes needs and returns its
// free block, out of the pool; 0 when the device refuses a page
// (try_allocate_expandable_block).
func (a *Allocator) tryExpandable(pi int32, small bool, size int64) (int32, error) {
	c, err := a.findExpandable(pi, small, size)
	if err != nil {
		return 0, err
	}
	if a.cache.Meta[c].X.unmapped {
		if c, err = a.mapBlock(c, min(a.cache.Nodes[c].Size, size)); c == 0 || err != nil {
			return 0, err
		}
	}
	for a.cache.Nodes[c].Size < size {
		next := a.cache.Nodes[c].Next
		if c, err = a.mapBlock(next, min(size-a.cache.Nodes[c].Size, a.cache.Nodes[next].Size)); c == 0 || err != nil {
			return 0, err
		}
	}
	a.cache.Set(pi, small).Remove(a.cache.Nodes, c)
	return c, nil
}

// mapBlock maps the pages that hold the first size bytes of the unmapped
// block n, merges them with the free blocks around and returns the free
// block, in its pool; 0 when the device refuses a page, which leaves
// nothing mapped (map_block).
func (a *Allocator) mapBlock(n int32, size int64) (int32, error) {
	mt := a.cache.Meta[n]
	r := a.xr[mt.Seg]
	addr := a.cache.Nodes[n].Addr
	begin := int64(addr-r.base) / r.page
	end := (int64(addr-r.base) + size + r.page - 1) / r.page
	if ok, err := a.mapPages(r, begin, end); !ok || err != nil {
		return 0, err
	}
	mapped := (end - begin) * r.page
	a.removeUnmapped(n)
	if mapped < a.cache.Nodes[n].Size {
		rest := a.cache.NewNode()
		a.cache.Nodes[rest] = segmentNode(addr+uint64(mapped), a.cache.Nodes[n].Size-mapped)
		a.cache.Meta[rest] = mt
		a.link(n, rest)
		a.cache.Nodes[n].Size = mapped
		a.insertUnmapped(rest)
	}
	a.cache.Meta[n].X.unmapped = false
	a.ms.NumDeviceAlloc.add(1)
	n, _ = a.cache.FreeBlock(n) // its size is what was mapped
	a.cache.Meta[n].X.gcBase = a.gcCount[kind(mt.Small)]
	return n, nil
}

// mapPages backs pages [begin, end) of r with device memory, as
// ExpandableSegment::map does: with virtual memory one Create per page and,
// once all succeeded, one Map per page; else one Malloc per page. It
// reports false when the device refuses a page for want of memory, after
// giving back the pages it made. The pages count as reserved memory once
// all are mapped, as PyTorch's reserved_bytes do. The meter counts a page
// made with Create as a device allocation, and as reserved memory once it
// is mapped, as the engine of package sim measures it: a page given back
// unmapped is counted after its free, so that the meter's reserved bytes
// never hold it.
func (a *Allocator) mapPages(r *xrange, begin, end int64) (bool, error) {
	for int64(len(r.pages)) < end {
		r.pages = append(r.pages, xpage{})
	}
	// undo gives back pages [begin, i) and returns err joined with what
	// that fails with, or nil for an out-of-memory err.
	undo := func(i int64, err error) (bool, error) {
		var errs []error
		if !errors.Is(err, gpualloc.ErrOutOfMemory) {
			errs = append(errs, err)
		}
		for j := begin; j < i; j++ {
			unmapped := a.vm != nil && !r.pages[j].mapped
			if ferr := a.freePage(r, j); ferr != nil {
				errs = append(errs, ferr)
			} else if unmapped {
				a.cache.M.CountDeviceMalloc(r.page)
			}
		}
		a.trimPages(r)
		return false, errors.Join(errs...)
	}
	for i := begin; i < end; i++ {
		var id uint64
		var err error
		if a.vm != nil {
			id, err = a.vm.Create(r.page)
		} else {
			id, err = a.b.Malloc(r.page)
		}
		if err != nil {
			return undo(i, err)
		}
		r.pages[i] = xpage{id: id, held: true}
		if a.vm == nil {
			a.cache.M.CountDeviceMalloc(r.page)
		}
	}
	if a.vm != nil {
		for i := begin; i < end; i++ {
			if err := a.vm.Map(r.base+uint64(i*r.page), r.pages[i].id); err != nil {
				return undo(end, err)
			}
			r.pages[i].mapped = true
			a.cache.M.CountMap()
			a.cache.M.CountDeviceMalloc(r.page)
		}
	}
	a.pageMaps += end - begin
	bytes := (end - begin) * r.page
	a.reserved += bytes
	a.ms.ReservedBytes.add(bytes)
	return true, nil
}

// freePage gives page i of r back to the device: with virtual memory its
// Unmap, if mapped, then its Release (unmapHandles), else the Free of its
// allocation. A page whose Release fails is mapped again, so that it stays
// as it was. The caller counts reserved memory.
func (a *Allocator) freePage(r *xrange, i int64) error {
	p := &r.pages[i]
	addr := r.base + uint64(i*r.page)
	if a.vm == nil {
		if err := a.b.Free(p.id, r.page); err != nil {
			return err
		}
	} else {
		if p.mapped {
			if err := a.vm.Unmap(addr, r.page); err != nil {
				return err
			}
			a.cache.M.CountUnmap()
		}
		if err := a.vm.Release(p.id); err != nil {
			if p.mapped {
				if merr := a.vm.Map(addr, p.id); merr != nil {
					p.mapped = false
					return errors.Join(err, merr)
				}
				a.cache.M.CountMap()
			}
			return err
		}
	}
	*p = xpage{}
	a.cache.M.CountDeviceFree(r.page)
	return nil
}

// trimPages drops the entries of unheld pages at the end of r's page table.
func (a *Allocator) trimPages(r *xrange) {
	for len(r.pages) > 0 && !r.pages[len(r.pages)-1].held {
		r.pages = r.pages[:len(r.pages)-1]
	}
}

// link puts block x right after block n in its segment.
func (a *Allocator) link(n, x int32) {
	nodes := a.cache.Nodes
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
	mt := a.cache.Meta[n]
	r := a.xr[mt.Seg]
	addr, size := a.cache.Nodes[n].Addr, a.cache.Nodes[n].Size
	off := int64(addr - r.base)
	begin := (off + r.page - 1) / r.page
	end := (off + size) / r.page
	if begin >= end {
		return nil
	}
	// Give the pages back one by one: a page the backend refuses stays
	// mapped, with those after it.
	var ferr error
	for i := begin; i < end; i++ {
		if err := a.freePage(r, i); err != nil {
			ferr = err
			end = i
			break
		}
	}
	a.trimPages(r)
	a.reserved -= (end - begin) * r.page
	a.ms.ReservedBytes.add(-(end - begin) * r.page)
	if begin >= end {
		return ferr
	}
	set := a.cache.Set(mt.Pool, mt.Small)
	set.Remove(a.cache.Nodes, n)
	uaddr := r.base + uint64(begin*r.page)
	usize := (end - begin) * r.page
	if before := int64(uaddr - addr); before > 0 {
		b := a.cache.NewNode()
		a.cache.Nodes[b] = segmentNode(addr, before)
		a.cache.Nodes[b].Free = true
		a.cache.Meta[b] = mt
		a.cache.Meta[b].X.gcBase = a.gcCount[kind(mt.Small)]
		if p := a.cache.Nodes[n].Prev; p != 0 {
			a.link(p, b)
		} else {
			a.cache.Nodes[b].Next = n
			a.cache.Nodes[n].Prev = b
		}
		set.Insert(a.cache.Nodes, b)
	}
	if after := size - int64(uaddr-addr) - usize; after > 0 {
		x := a.cache.NewNode()
		a.cache.Nodes[x] = segmentNode(uaddr+uint64(usize), after)
		a.cache.Nodes[x].Free = true
		a.cache.Meta[x] = mt
		a.cache.Meta[x].X.gcBase = a.gcCount[kind(mt.Small)]
		a.link(n, x)
		set.Insert(a.cache.Nodes, x)
	}
	a.cache.Nodes[n].Addr, a.cache.Nodes[n].Size, a.cache.Nodes[n].Free = uaddr, usize, false
	a.cache.Meta[n].X.unmapped = true
	a.cache.FreeBytes -= usize
	a.ms.NumDeviceFree.add(1)
	if p := a.cache.Nodes[n].Prev; p != 0 && a.cache.Meta[p].X.unmapped {
		a.removeUnmapped(p)
		a.cache.MergeNext(p)
		n = p
	}
	if nx := a.cache.Nodes[n].Next; nx != 0 && a.cache.Meta[nx].X.unmapped {
		a.removeUnmapped(nx)
		a.cache.MergeNext(n)
	}
	if a.cache.Nodes[n].Prev == 0 && a.cache.Nodes[n].Next == 0 {
		// The whole range is unmapped: give it up (release_expandable_segment).
		return errors.Join(ferr, a.dropRange(n))
	}
	a.insertUnmapped(n)
	return ferr
}

// dropRange gives up the range whose one block, unmapped and out of the
// unmapped list, is n: its Unreserve with virtual memory.
func (a *Allocator) dropRange(n int32) error {
	seg := a.cache.Meta[n].Seg
	r := a.xr[seg]
	a.xr[seg] = nil
	a.cache.Recycle(n)
	if a.vm != nil {
		return a.vm.Unreserve(r.base, r.size)
	}
	return nil
}

// releaseExpandableOf unmaps the fully free pages of every free block of
// expandable segments (release_blocks) of the pools at the indexes pi of
// a.cache.Streams for which of(pi) holds (all of them for a nil of),
// giving up the ranges left with nothing mapped.
func (a *Allocator) releaseExpandableOf(of func(pi int32) bool) error {
	var todo []int32
	for n := int32(1); n < int32(len(a.cache.Nodes)); n++ {
		if a.cache.Meta[n].X.exp && a.cache.Nodes[n].Free && (of == nil || of(a.cache.Meta[n].Pool)) {
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

// dropEmptyRanges gives up the ranges none of whose pages is mapped: those
// whose first map the device refused. PyTorch keeps such a range for the
// next request of its stream and pool, and so does the allocator, but for
// ReleaseAll, after which no range is left without a live block: the range
// holds no memory, and the next request of its stream and pool reserves
// one anew.
func (a *Allocator) dropEmptyRanges() error {
	var errs []error
	for pi, p := range a.cache.Streams {
		if !a.releasable(int32(pi)) {
			continue
		}
		for k := range p.X.unmapped {
			l := p.X.unmapped[k][:0]
			for _, n := range p.X.unmapped[k] {
				if a.cache.Nodes[n].Prev == 0 && a.cache.Nodes[n].Next == 0 {
					if err := a.dropRange(n); err != nil {
						errs = append(errs, err)
					}
					continue
				}
				l = append(l, n)
			}
			p.X.unmapped[k] = l
		}
	}
	return errors.Join(errs...)
}

// segmentNode returns a block of size bytes at addr, alone and not free.
func segmentNode(addr uint64, size int64) segment.Node {
	return segment.Node{Addr: addr, Size: size}
}
