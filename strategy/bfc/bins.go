package bfc

import (
	"fmt"
	"math/bits"
)

// A chunk is BFCAllocator::Chunk: a piece of a region, free or in use.
// Chunks live in one slice and refer to each other by index, as
// BFCAllocator's ChunkHandles do; index 0 means none.
type chunk struct {
	addr      uint64
	size      int64
	requested int64 // bytes asked for, while in use

	// prev and next are the chunks before and after this one in its
	// region, 0 at the region's ends.
	prev, next int32

	// left, right and pri are the links and priority of the chunk in its
	// bin's tree, while it is free.
	left, right int32
	pri         uint32

	inUse bool
	bin   int8 // the bin holding the chunk, -1 if none
}

// bins are BFCAllocator's kNumBins bins of free chunks. TensorFlow keeps
// each bin's chunks in a std::set ordered by (size, address), a red-black
// tree; here each is a treap (Seidel and Aragon, 1996), a search tree on
// (size, address) that is also a heap on priorities from a fixed
// pseudo-random sequence, so that it stays balanced whatever the order of
// the keys and behaves the same on every run. A bitmap marks the non-empty
// bins. The zero bins are empty and ready to use.
type bins struct {
	roots    [NumBins]int32
	nonEmpty uint32 // bit b: roots[b] != 0
	rnd      uint64 // state of the priority sequence, never 0 once used
}

// less orders chunks as Bin::ChunkComparator does: by size, then address.
func less(ch []chunk, a, b int32) bool {
	x, y := &ch[a], &ch[b]
	return x.size < y.size || x.size == y.size && x.addr < y.addr
}

// priority returns the next priority, from a xorshift sequence.
func (t *bins) priority() uint32 {
	x := t.rnd
	if x == 0 {
		x = 0x9e3779b97f4a7c15
	}
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	t.rnd = x
	return uint32(x >> 32)
}

// insert puts the free chunk x in its bin, as
// BFCAllocator::InsertFreeChunkIntoBin does: O(log k) expected for the k
// chunks of the bin.
func (t *bins) insert(ch []chunk, x int32) {
	b := BinNumForSize(ch[x].size)
	ch[x].bin = int8(b)
	pri := t.priority()
	ch[x].pri = pri
	t.nonEmpty |= 1 << b
	// Go down while the chunks on the way keep their place above x.
	link := &t.roots[b]
	for c := *link; c != 0 && ch[c].pri <= pri; c = *link {
		if less(ch, x, c) {
			link = &ch[c].left
		} else {
			link = &ch[c].right
		}
	}
	// x takes the place of the subtree there, split around x's key into
	// x's left and right subtrees.
	c := *link
	*link = x
	l, r := &ch[x].left, &ch[x].right
	for c != 0 {
		if less(ch, c, x) {
			*l = c
			l = &ch[c].right
			c = *l
		} else {
			*r = c
			r = &ch[c].left
			c = *r
		}
	}
	*l, *r = 0, 0
}

// remove takes the free chunk x out of its bin, as
// BFCAllocator::RemoveFreeChunkFromBin does: O(log k) expected.
func (t *bins) remove(ch []chunk, x int32) {
	b := int(ch[x].bin)
	link := &t.roots[b]
	for c := *link; c != x; c = *link {
		if c == 0 {
			panic(fmt.Sprintf("bfc: chunk %d (%d bytes at %#x) is not in bin %d", x, ch[x].size, ch[x].addr, b))
		}
		if less(ch, x, c) {
			link = &ch[c].left
		} else {
			link = &ch[c].right
		}
	}
	t.unlink(ch, link, x, b)
}

// takeBest removes and returns the chunk BFCAllocator::FindChunkPtr takes
// for a request of rounded bytes, or 0 if none is large enough. FindChunkPtr
// walks the bins from the request's own upward, and each bin's set from its
// smallest chunk, and takes the first chunk of at least rounded bytes: the
// smallest such chunk of the request's bin, the lowest address among those
// of its size, else the smallest chunk of the next non-empty bin (every
// chunk of a higher bin is larger than the request). That is the chunk this
// finds: by a search of the request's bin in O(log k) expected where
// TensorFlow steps through the bin's smaller chunks one by one, then by a
// bit scan for the next non-empty bin and a walk down its tree.
func (t *bins) takeBest(ch []chunk, rounded int64) int32 {
	b := BinNumForSize(rounded)
	if t.nonEmpty&(1<<b) != 0 {
		var best *int32
		for link := &t.roots[b]; *link != 0; {
			c := *link
			if ch[c].size >= rounded {
				best = link
				link = &ch[c].left
			} else {
				link = &ch[c].right
			}
		}
		if best != nil {
			x := *best
			t.unlink(ch, best, x, b)
			return x
		}
	}
	m := t.nonEmpty &^ (1<<(b+1) - 1)
	if m == 0 {
		return 0
	}
	b = bits.TrailingZeros32(m)
	link := &t.roots[b]
	for ch[*link].left != 0 {
		link = &ch[*link].left
	}
	x := *link
	t.unlink(ch, link, x, b)
	return x
}

// unlink replaces x, which *link points to in bin b, by the merge of its
// subtrees.
func (t *bins) unlink(ch []chunk, link *int32, x int32, b int) {
	l, r := ch[x].left, ch[x].right
	for l != 0 && r != 0 {
		if ch[l].pri <= ch[r].pri {
			*link = l
			link = &ch[l].right
			l = *link
		} else {
			*link = r
			link = &ch[r].left
			r = *link
		}
	}
	if l != 0 {
		*link = l
	} else {
		*link = r
	}
	ch[x].left, ch[x].right, ch[x].bin = 0, 0, -1
	if t.roots[b] == 0 {
		t.nonEmpty &^= 1 << b
	}
}

// largest returns the largest free chunk, or 0 if there is none: the last
// chunk of the highest non-empty bin, as BFCAllocator::LargestFreeChunk
// finds it. O(log k) expected.
func (t *bins) largest(ch []chunk) int32 {
	if t.nonEmpty == 0 {
		return 0
	}
	x := t.roots[31-bits.LeadingZeros32(t.nonEmpty)]
	for ch[x].right != 0 {
		x = ch[x].right
	}
	return x
}

// check verifies that t is a valid set of bins: each bin a treap with keys
// in order and priorities in heap order, holding only free chunks of its
// bin, and the bitmap in agreement. It returns the chunks of every bin, in
// (size, address) order. O(n), for tests.
func (t *bins) check(ch []chunk) ([]int32, error) {
	var out []int32
	var walk func(x int32, b, depth int) error
	walk = func(x int32, b, depth int) error {
		if x == 0 {
			return nil
		}
		if depth > len(ch) {
			return fmt.Errorf("bin %d has a cycle through chunk %d", b, x)
		}
		c := &ch[x]
		switch {
		case c.inUse:
			return fmt.Errorf("bin %d holds chunk %d, which is in use", b, x)
		case BinNumForSize(c.size) != b || int(c.bin) != b:
			return fmt.Errorf("bin %d holds a chunk of %d bytes marked for bin %d", b, c.size, c.bin)
		}
		for _, k := range []int32{c.left, c.right} {
			if k != 0 && ch[k].pri < c.pri {
				return fmt.Errorf("chunk %d has priority %d above its child %d's %d", x, c.pri, k, ch[k].pri)
			}
		}
		if err := walk(c.left, b, depth+1); err != nil {
			return err
		}
		if k := len(out); k > 0 && ch[out[k-1]].bin == int8(b) && !less(ch, out[k-1], x) {
			p := &ch[out[k-1]]
			return fmt.Errorf("bin %d out of order: (%d, %#x) before (%d, %#x)", b, p.size, p.addr, c.size, c.addr)
		}
		out = append(out, x)
		return walk(c.right, b, depth+1)
	}
	for b := range NumBins {
		if (t.nonEmpty>>b&1 != 0) != (t.roots[b] != 0) {
			return nil, fmt.Errorf("bitmap bit %d disagrees with bin %d's root %d", b, b, t.roots[b])
		}
		if err := walk(t.roots[b], b, 0); err != nil {
			return nil, err
		}
	}
	return out, nil
}
