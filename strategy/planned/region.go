package planned

import "github.com/google/btree"

// A region is the plan's device memory, in two device allocations: part 0
// holds the prefix's buffers that stay for good (weights, optimizer state)
// at [0, cut) of the plan, part 1 everything else at [cut, height), so that
// part 1 can go back to the device once its blocks are freed while the
// weights stay. Each part is taken at its first block. The live blocks are
// ordered by plan offset in a B-tree, so that a planned offset is handed
// out only when nothing live overlaps it (STAlloc checks the same before it
// trusts a plan: is_overlap in Allocator/StaticAllocator.hpp). A check, an
// insert and a removal cost O(log n) for n live blocks, with no allocation
// once the tree's free list holds its nodes.
type region struct {
	cut, height int64
	parts       [2]part
	live        *btree.BTreeG[span]
	gaps        *btree.BTreeG[gap] // once the plan is dropped: see pool
	requested   int64
	allocated   int64
}

// A part is one device allocation of a region: its address and size (0:
// not held) and its live blocks.
type part struct {
	base uint64
	size int64
	live int
}

// A span is a live block of the region: its plan offset, bytes set aside
// and asked for, and its position in the step (its Handle), or gapBlock.
type span struct {
	off, size, req int64
	k              uint64
}

func newRegion() region {
	return region{live: btree.NewWithFreeListG(16, func(a, b span) bool { return a.off < b.off }, btree.NewFreeListG[span](64))}
}

// layout sets the parts of a new plan; no part may be held.
func (r *region) layout(cut, height int64) { r.cut, r.height = cut, height }

func (r *region) partOf(off int64) int {
	if off < r.cut {
		return 0
	}
	return 1
}

// bounds returns the plan offsets part i covers.
func (r *region) bounds(i int) (lo, hi int64) {
	if i == 0 {
		return 0, r.cut
	}
	return r.cut, r.height
}

// addr returns the device address of plan offset off, whose part is held.
func (r *region) addr(off int64) uint64 {
	i := r.partOf(off)
	lo, _ := r.bounds(i)
	return r.parts[i].base + uint64(off-lo)
}

// find returns the plan offset of a device address inside a held part.
func (r *region) find(addr uint64) (int64, bool) {
	for i, p := range r.parts {
		if p.size > 0 && addr >= p.base && addr-p.base < uint64(p.size) {
			lo, _ := r.bounds(i)
			return lo + int64(addr-p.base), true
		}
	}
	return 0, false
}

// held returns the bytes the parts hold from the device.
func (r *region) held() int64 { return r.parts[0].size + r.parts[1].size }

// fits reports whether [off, off+size) overlaps no live span.
func (r *region) fits(off, size int64) bool {
	ok := true
	r.live.DescendLessOrEqual(span{off: off}, func(s span) bool {
		ok = s.off+s.size <= off
		return false
	})
	if ok {
		r.live.AscendGreaterOrEqual(span{off: off}, func(s span) bool {
			ok = s.off >= off+size
			return false
		})
	}
	return ok
}

func (r *region) insert(s span) {
	r.live.ReplaceOrInsert(s)
	r.parts[r.partOf(s.off)].live++
	r.requested += s.req
	r.allocated += s.size
}

// remove removes the live span s; it reports false, changing nothing, if
// no such span is live.
func (r *region) remove(s span) bool {
	if got, ok := r.live.Get(s); !ok || got != s {
		return false
	}
	r.live.Delete(s)
	r.parts[r.partOf(s.off)].live--
	r.requested -= s.req
	r.allocated -= s.size
	if r.gaps != nil {
		r.release(s)
	}
	return true
}

// gapBlock is the Handle of a block served from a gap of a dropped plan's
// region, which has no position.
const gapBlock = ^uint64(0)

// A gap is a free range of part 1 of a dropped plan's region, ordered by
// size then offset for best fit.
type gap struct{ size, off int64 }

func gapLess(a, b gap) bool { return a.size < b.size || a.size == b.size && a.off < b.off }

// pool makes part 1 of the region, whose plan is dropped, a best-fit pool
// over its free gaps until its last block is freed: no planned request
// will come to claim them. O(n log n) for n live blocks, once.
func (r *region) pool() {
	if r.gaps != nil || r.parts[1].size == 0 {
		return
	}
	r.gaps = btree.NewG(16, gapLess)
	end := r.cut
	r.live.AscendGreaterOrEqual(span{off: r.cut}, func(s span) bool {
		r.addGap(end, s.off)
		end = s.off + s.size
		return true
	})
	r.addGap(end, r.height)
}

func (r *region) addGap(from, to int64) {
	if to > from {
		r.gaps.ReplaceOrInsert(gap{to - from, from})
	}
}

// take serves size bytes (rounded up to align) from the smallest gap that
// holds them, at its low end: O(log n).
func (r *region) take(size int64) (span, bool) {
	rs := roundUp(size)
	var g gap
	ok := false
	r.gaps.AscendGreaterOrEqual(gap{rs, 0}, func(x gap) bool {
		g, ok = x, true
		return false
	})
	if !ok {
		return span{}, false
	}
	r.gaps.Delete(g)
	r.addGap(g.off+rs, g.off+g.size)
	s := span{off: g.off, size: rs, req: size, k: gapBlock}
	r.insert(s)
	return s, true
}

// release returns the range of a removed span of part 1 to the gaps,
// merged with the gaps on either side: O(log n).
func (r *region) release(s span) {
	if s.off < r.cut {
		return
	}
	from, to := r.cut, r.height
	r.live.DescendLessOrEqual(span{off: s.off}, func(p span) bool {
		from = max(from, p.off+p.size)
		return false
	})
	r.live.AscendGreaterOrEqual(span{off: s.off}, func(n span) bool {
		to = n.off
		return false
	})
	if from < s.off {
		r.gaps.Delete(gap{s.off - from, from})
	}
	if end := s.off + s.size; end < to {
		r.gaps.Delete(gap{to - end, end})
	}
	r.addGap(from, to)
}
