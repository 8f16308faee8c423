package planned

import "github.com/google/btree"

// A region is the plan's device memory: one device allocation of the
// plan's height, with the planned blocks live in it, ordered by offset in a
// B-tree, so that a planned offset is handed out only when nothing live
// overlaps it (STAlloc checks the same before it trusts a plan: is_overlap
// in Allocator/StaticAllocator.hpp). A check, an insert and a removal cost
// O(log n) for n live planned blocks, with no allocation once the tree's
// free list holds its nodes.
type region struct {
	base      uint64
	size      int64 // 0: not held
	live      *btree.BTreeG[span]
	requested int64
	allocated int64
}

// A span is a live planned block: its offset, bytes set aside and asked
// for, and its position in the step (its Handle).
type span struct {
	off, size, req int64
	k              uint64
}

func newRegion() region {
	return region{live: btree.NewWithFreeListG(16, func(a, b span) bool { return a.off < b.off }, btree.NewFreeListG[span](64))}
}

func (r *region) contains(addr uint64) bool {
	return r.size > 0 && addr >= r.base && addr-r.base < uint64(r.size)
}

// fits reports whether [off, off+size) lies in the region and overlaps no
// live span.
func (r *region) fits(off, size int64) bool {
	if off+size > r.size {
		return false
	}
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
	r.requested -= s.req
	r.allocated -= s.size
	return true
}
