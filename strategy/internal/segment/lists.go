package segment

import (
	"fmt"
)

// A Lists is TLSF's index of free blocks (Masmano et al., 2004), the good
// fit of strategy/tlsf: a doubly linked list per size class (fl, sl) of
// [Class], through the nodes' Left (previous) and Right (next) fields, and
// bitmaps of the non-empty lists, so that finding a list with a block that
// fits is two bit scans. A listed node's Key holds its list, fl<<5 | sl.
// Insert, Remove and Take take O(1) time and allocate nothing. The zero
// Lists is empty.
type Lists struct {
	classes // first: the head of each class's list
}

// Insert adds the free block n at the head of its list.
func (ix *Lists) Insert(nodes []Node, n int32) {
	fl, sl := Class(nodes[n].Size)
	head := ix.first[fl][sl]
	nodes[n].Left, nodes[n].Right = 0, head
	nodes[n].Key = uint32(fl<<SLBits | sl)
	if head != 0 {
		nodes[head].Left = n
	}
	ix.first[fl][sl] = n
	ix.mark(fl, sl)
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
		ix.first[fl][sl] = next
		if next == 0 {
			ix.clear(fl, sl)
		}
	}
	nodes[n].Left, nodes[n].Right = 0, 0
}

// Take removes and returns the first block of the first non-empty list at
// or after SearchClass(size), which is at least size bytes; or 0 if there
// is none. It takes O(1) time: two bit scans at most.
func (ix *Lists) Take(nodes []Node, size int64) int32 {
	fl, sl, ok := ix.from(SearchClass(size))
	if !ok {
		return 0
	}
	n := ix.first[fl][sl]
	next := nodes[n].Right
	ix.first[fl][sl] = next
	if next != 0 {
		nodes[next].Left = 0
	} else {
		ix.clear(fl, sl)
	}
	nodes[n].Right = 0
	return n
}

// Largest returns the size of the largest free block, or 0 if there is
// none: it finds the highest non-empty list with two bit scans, then scans
// that list, whose blocks are within 1/32 of each other in size.
func (ix *Lists) Largest(nodes []Node) int64 {
	fl, sl, ok := ix.highest()
	if !ok {
		return 0
	}
	var size int64
	for n := ix.first[fl][sl]; n != 0; n = nodes[n].Right {
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
	if err := ix.check(); err != nil {
		return err
	}
	seen := 0
	for fl := range FLCount {
		for sl := range SLCount {
			var prev int32
			for n := ix.first[fl][sl]; n != 0; n = nodes[n].Right {
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
