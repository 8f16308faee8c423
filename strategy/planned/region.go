package planned

import "slices"

// A region is the plan's device memory: one device allocation of the
// plan's height, with the planned blocks live in it, sorted by offset, so
// that a planned offset is handed out only when nothing live overlaps it
// (STAlloc checks the same before it trusts a plan: is_overlap in
// Allocator/StaticAllocator.hpp). Insert and remove cost a binary search
// and a move of the blocks above: O(log n + n) for n live planned blocks,
// with no allocation once the slice has grown.
type region struct {
	base      uint64
	size      int64 // 0: not held
	live      []span
	requested int64
	allocated int64
}

// A span is a live planned block: its offset, bytes set aside and asked
// for, and its position in the step (its Handle).
type span struct {
	off, size, req int64
	k              uint64
}

func (r *region) contains(addr uint64) bool {
	return r.size > 0 && addr >= r.base && addr-r.base < uint64(r.size)
}

// search returns the index of the first live span at or above off.
func (r *region) search(off int64) int {
	i, _ := slices.BinarySearchFunc(r.live, off, func(s span, off int64) int {
		switch {
		case s.off < off:
			return -1
		case s.off > off:
			return 1
		}
		return 0
	})
	return i
}

// fits reports whether [off, off+size) overlaps no live span.
func (r *region) fits(off, size int64) bool {
	if off+size > r.size {
		return false
	}
	i := r.search(off)
	if i > 0 && r.live[i-1].off+r.live[i-1].size > off {
		return false
	}
	return i == len(r.live) || r.live[i].off >= off+size
}

func (r *region) insert(s span) {
	i := r.search(s.off)
	r.live = slices.Insert(r.live, i, s)
	r.requested += s.req
	r.allocated += s.size
}

// remove removes the live span s; it reports false, changing nothing, if
// no such span is live.
func (r *region) remove(s span) bool {
	i := r.search(s.off)
	if i == len(r.live) || r.live[i] != s {
		return false
	}
	r.live = slices.Delete(r.live, i, i+1)
	r.requested -= s.req
	r.allocated -= s.size
	return true
}
