package segment

import (
	"fmt"
	"math/bits"
)

// A Lists is TLSF's index of free blocks (Masmano et al., 2004), the good
// fit of strategy/tlsf: a doubly linked list per size class (fl, sl) of
// [Class], through the nodes' Left (previous) and Right (next) fields, and
// bitmaps of the non-empty lists, so that finding a list with a block that
// fits is two bit scans. A listed node's Key holds its list, fl<<5 | sl.
// Insert, Remove and Take take O(1) time and allocate nothing. The zero
// Lists is empty.
type Lists struct {
	flMap uint64                  // bit fl: some slMap[fl] bit is set
	slMap [FLCount]uint32         // bit sl of slMap[fl]: list (fl, sl) is not empty
	heads [FLCount][SLCount]int32 // first block of each list, 0 if empty
}

// Insert adds the free block n at the head of its list.
func (ix *Lists) Insert(nodes []Node, n int32) {
	fl, sl := Class(nodes[n].Size)
	head := ix.heads[fl][sl]
	nodes[n].Left, nodes[n].Right = 0, head
	nodes[n].Key = uint32(fl<<SLBits | sl)
	if head != 0 {
		nodes[head].Left = n
	}
	ix.heads[fl][sl] = n
	ix.flMap |= 1 << fl
	ix.slMap[fl] |= 1 << sl
}

// Remove takes the free block n out of its list; its size must not have
// changed since Insert.
func (ix *Lists) Remove(nodes []Node, n int32) {
	prev, next := nodes[n].Left, nodes[n].Right
	if next != 0 {
		nodes[next].Left = prev
	}
	if prev != 0 {
		nodes[prev].Right = next
	} else {
		fl, sl := int(nodes[n].Key>>SLBits), int(nodes[n].Key&(SLCount-1))
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

// Take removes and returns the first block of the first non-empty list at
// or after SearchClass(size), which is at least size bytes; or 0 if there
// is none. It takes O(1) time: two bit scans at most.
func (ix *Lists) Take(nodes []Node, size int64) int32 {
	fl, sl := SearchClass(size)
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

// Largest returns the size of the largest free block, or 0 if there is
// none: it finds the highest non-empty list with two bit scans, then scans
// that list, whose blocks are within 1/32 of each other in size.
func (ix *Lists) Largest(nodes []Node) int64 {
	if ix.flMap == 0 {
		return 0
	}
	fl := FLCount - 1 - bits.LeadingZeros64(ix.flMap)
	sl := SLCount - 1 - bits.LeadingZeros32(ix.slMap[fl])
	var size int64
	for n := ix.heads[fl][sl]; n != 0; n = nodes[n].Right {
		size = max(size, nodes[n].Size)
	}
	return size
}

// Check verifies the index against the free blocks: every list and bitmap
// bit consistent, every block in the list of its size, linked both ways,
// and exactly the blocks of free. It takes O(n) time, for tests.
func (ix *Lists) Check(nodes []Node, free []int32) error {
	want := make(map[int32]bool, len(free))
	for _, n := range free {
		want[n] = true
	}
	seen := 0
	for fl := range FLCount {
		if (ix.flMap>>fl&1 != 0) != (ix.slMap[fl] != 0) {
			return fmt.Errorf("flMap bit %d is %d but slMap[%d] = %#x", fl, ix.flMap>>fl&1, fl, ix.slMap[fl])
		}
		for sl := range SLCount {
			head := ix.heads[fl][sl]
			if (ix.slMap[fl]>>sl&1 != 0) != (head != 0) {
				return fmt.Errorf("slMap[%d] bit %d is %d but the list's head is %d", fl, sl, ix.slMap[fl]>>sl&1, head)
			}
			var prev int32
			for n := head; n != 0; n = nodes[n].Right {
				if !want[n] {
					return fmt.Errorf("list (%d, %d) holds block %d (%d bytes at %#x), which is not free or listed twice", fl, sl, n, nodes[n].Size, nodes[n].Addr)
				}
				delete(want, n)
				seen++
				if f, s := Class(nodes[n].Size); f != fl || s != sl {
					return fmt.Errorf("list (%d, %d) holds a block of %d bytes, whose list is (%d, %d)", fl, sl, nodes[n].Size, f, s)
				}
				if k := nodes[n].Key; k != uint32(fl<<SLBits|sl) {
					return fmt.Errorf("list (%d, %d): block %d has Key %#x", fl, sl, n, k)
				}
				if nodes[n].Left != prev {
					return fmt.Errorf("list (%d, %d): block %d has Left %d, want %d", fl, sl, n, nodes[n].Left, prev)
				}
				prev = n
			}
		}
	}
	if len(want) > 0 {
		for n := range want {
			return fmt.Errorf("free block %d (%d bytes at %#x) is in no list (%d of %d free blocks are)", n, nodes[n].Size, nodes[n].Addr, seen, len(free))
		}
	}
	return nil
}
