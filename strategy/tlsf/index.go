package tlsf

import (
	"math/bits"

	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// An index is TLSF's index of free blocks: a doubly linked list per size
// class (fl, sl) of [segment.Class], through the nodes' Left (previous) and
// Right (next) fields, and bitmaps of the non-empty lists, so that finding a
// list with a block that fits is two bit scans. A listed node's Key holds
// its list, fl<<5 | sl. The zero index is empty.
type index struct {
	flMap uint64                                  // bit fl: some slMap[fl] bit is set
	slMap [segment.FLCount]uint32                 // bit sl of slMap[fl]: list (fl, sl) is not empty
	heads [segment.FLCount][segment.SLCount]int32 // first block of each list, 0 if empty
}

// Insert adds the free block n at the head of its list.
func (ix *index) Insert(nodes []segment.Node, n int32) {
	fl, sl := segment.Class(nodes[n].Size)
	head := ix.heads[fl][sl]
	nodes[n].Left, nodes[n].Right = 0, head
	nodes[n].Key = uint32(fl<<segment.SLBits | sl)
	if head != 0 {
		nodes[head].Left = n
	}
	ix.heads[fl][sl] = n
	ix.flMap |= 1 << fl
	ix.slMap[fl] |= 1 << sl
}

// Remove takes the free block n out of its list; its size must not have
// changed since Insert.
func (ix *index) Remove(nodes []segment.Node, n int32) {
	prev, next := nodes[n].Left, nodes[n].Right
	if next != 0 {
		nodes[next].Left = prev
	}
	if prev != 0 {
		nodes[prev].Right = next
	} else {
		fl, sl := int(nodes[n].Key>>segment.SLBits), int(nodes[n].Key&(segment.SLCount-1))
		ix.heads[fl][sl] = next
		if next == 0 {
			ix.slMap[fl] &^= 1 << sl
			if ix.slMap[fl] == 0 {
				ix.flMap &^= 1 << fl
			}
		}
	}
	nodes[n].Left, nodes[n].Right = 0, 0
}

// take removes and returns the first block of the first non-empty list at
// or after segment.SearchClass(size), which is at least size bytes; or 0
// if there is none. It takes O(1) time: two bit scans at most.
func (ix *index) take(nodes []segment.Node, size int64) int32 {
	fl, sl := segment.SearchClass(size)
	m := ix.slMap[fl] & (^uint32(0) << sl)
	if m == 0 {
		fm := ix.flMap & (^uint64(0) << (fl + 1)) // a shift by 64 gives 0
		if fm == 0 {
			return 0
		}
		fl = bits.TrailingZeros64(fm)
		m = ix.slMap[fl]
	}
	sl = bits.TrailingZeros32(m)
	n := ix.heads[fl][sl]
	next := nodes[n].Right
	ix.heads[fl][sl] = next
	if next != 0 {
		nodes[next].Left = 0
	} else {
		ix.slMap[fl] &^= 1 << sl
		if ix.slMap[fl] == 0 {
			ix.flMap &^= 1 << fl
		}
	}
	nodes[n].Right = 0
	return n
}

// largest returns the size of the largest free block, or 0 if there is
// none: it finds the highest non-empty list with two bit scans, then scans
// that list, whose blocks are within 1/32 of each other in size.
func (ix *index) largest(nodes []segment.Node) int64 {
	if ix.flMap == 0 {
		return 0
	}
	fl := segment.FLCount - 1 - bits.LeadingZeros64(ix.flMap)
	sl := segment.SLCount - 1 - bits.LeadingZeros32(ix.slMap[fl])
	var size int64
	for n := ix.heads[fl][sl]; n != 0; n = nodes[n].Right {
		size = max(size, nodes[n].Size)
	}
	return size
}
