package segment

import "fmt"

// A Sorted is an index of free blocks ordered by (size, address), for best
// fit. Blocks are grouped into the size classes of [Class] (32 per power of
// two); the blocks of a class form a treap (Seidel and Aragon, 1996), a
// binary search tree on (size, address) that is also a heap on random
// priorities and so stays balanced with high probability whatever the order
// of the keys; bitmaps of the non-empty classes, as in TLSF, find the next
// non-empty class in two bit scans.
//
// Best fit is then a search of the request's own class for the smallest
// block that fits, and, failing that, the smallest block of the next
// non-empty class: every block of a later class is larger than every block
// of an earlier one. With n free blocks, of which k share a class, Insert,
// Remove and TakeBest take O(log k) expected time: O(log n) at worst, and
// close to O(1) when sizes spread over many classes, which keeps the trees
// small, shallow and in cache. Max takes O(log k). None allocates.
//
// The tree links are the nodes' Left and Right fields, the priority their
// Key. The priorities come from a fixed sequence, so an index behaves the
// same on every run. The zero Sorted is empty and ready to use.
type Sorted struct {
	classes // first: the root of each class's treap
	n       int
	rnd     uint64 // state of the priority sequence, never 0
}

// less orders blocks by size, then address.
func less(nodes []Node, a, b int32) bool {
	x, y := &nodes[a], &nodes[b]
	return x.Size < y.Size || x.Size == y.Size && x.Addr < y.Addr
}

// priority returns the next priority, from a xorshift sequence.
func (t *Sorted) priority() uint32 {
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

// Len returns the number of blocks in t.
func (t *Sorted) Len() int { return t.n }

// Insert adds the free block x.
func (t *Sorted) Insert(nodes []Node, x int32) {
	fl, sl := Class(nodes[x].Size)
	pri := t.priority()
	nodes[x].Key = pri
	t.n++
	t.mark(fl, sl)
	// Go down while the nodes on the way keep their place above x.
	link := &t.first[fl][sl]
	for c := *link; c != 0 && nodes[c].Key <= pri; c = *link {
		if less(nodes, x, c) {
			link = &nodes[c].Left
		} else {
			link = &nodes[c].Right
		}
	}
	// x takes the place of the subtree there, split around x's key into
	// x's left and right subtrees.
	c := *link
	*link = x
	l, r := &nodes[x].Left, &nodes[x].Right
	for c != 0 {
		if less(nodes, c, x) {
			*l = c
			l = &nodes[c].Right
			c = *l
		} else {
			*r = c
			r = &nodes[c].Left
			c = *r
		}
	}
	*l, *r = 0, 0
}

// Remove takes out the block x, which Insert added and whose key has not
// changed since.
func (t *Sorted) Remove(nodes []Node, x int32) {
	fl, sl := Class(nodes[x].Size)
	link := &t.first[fl][sl]
	for c := *link; c != x; c = *link {
		if c == 0 {
			panic(fmt.Sprintf("segment: Sorted.Remove of block %d (%d bytes at %#x), which is not in the index", x, nodes[x].Size, nodes[x].Addr))
		}
		if less(nodes, x, c) {
			link = &nodes[c].Left
		} else {
			link = &nodes[c].Right
		}
	}
	t.unlink(nodes, link, x)
	t.emptied(fl, sl)
}

// TakeBest removes and returns the smallest block of at least size bytes,
// the one at the lowest address among those of its size; or 0 if no block
// is that large.
func (t *Sorted) TakeBest(nodes []Node, size int64) int32 {
	fl, sl := Class(size)
	if t.slMap[fl]&(1<<sl) != 0 {
		// The smallest block of at least size bytes in the request's class.
		var best *int32
		for link := &t.first[fl][sl]; *link != 0; {
			c := *link
			if nodes[c].Size >= size {
				best = link
				link = &nodes[c].Left
			} else {
				link = &nodes[c].Right
			}
		}
		if best != nil {
			x := *best
			t.unlink(nodes, best, x)
			t.emptied(fl, sl)
			return x
		}
	}
	// Else the smallest block of the next non-empty class.
	fl, sl, ok := t.from(fl, sl+1)
	if !ok {
		return 0
	}
	link := &t.first[fl][sl]
	for nodes[*link].Left != 0 {
		link = &nodes[*link].Left
	}
	x := *link
	t.unlink(nodes, link, x)
	t.emptied(fl, sl)
	return x
}

// unlink replaces x, which *link points to, by the merge of its subtrees.
func (t *Sorted) unlink(nodes []Node, link *int32, x int32) {
	t.n--
	a, b := nodes[x].Left, nodes[x].Right
	for a != 0 && b != 0 {
		if nodes[a].Key <= nodes[b].Key {
			*link = a
			link = &nodes[a].Right
			a = *link
		} else {
			*link = b
			link = &nodes[b].Left
			b = *link
		}
	}
	if a != 0 {
		*link = a
	} else {
		*link = b
	}
	nodes[x].Left, nodes[x].Right = 0, 0
}

// Max returns the largest block, or 0 if t is empty: the rightmost block
// of the highest non-empty class.
func (t *Sorted) Max(nodes []Node) int32 {
	fl, sl, ok := t.highest()
	if !ok {
		return 0
	}
	x := t.first[fl][sl]
	for nodes[x].Right != 0 {
		x = nodes[x].Right
	}
	return x
}

// Check verifies that t is a valid index of free blocks: the bitmaps agree
// with the classes; each class is a treap, with keys in order, priorities
// in heap order, and only blocks of its size class; Len blocks in all. It
// returns the blocks in (size, address) order. It takes O(n) time, for
// tests.
func (t *Sorted) Check(nodes []Node) ([]int32, error) {
	var out []int32
	var walk func(x int32, fl, sl, depth int) error
	walk = func(x int32, fl, sl, depth int) error {
		if x == 0 {
			return nil
		}
		if depth > len(nodes) {
			return fmt.Errorf("class (%d, %d) has a cycle through block %d", fl, sl, x)
		}
		nd := &nodes[x]
		if !nd.Free {
			return fmt.Errorf("class (%d, %d) holds live block %d (%d bytes at %#x)", fl, sl, x, nd.Size, nd.Addr)
		}
		if f, s := Class(nd.Size); f != fl || s != sl {
			return fmt.Errorf("class (%d, %d) holds a block of %d bytes, whose class is (%d, %d)", fl, sl, nd.Size, f, s)
		}
		for _, c := range []int32{nd.Left, nd.Right} {
			if c != 0 && nodes[c].Key < nd.Key {
				return fmt.Errorf("block %d has priority %d above its child %d's %d", x, nd.Key, c, nodes[c].Key)
			}
		}
		if err := walk(nd.Left, fl, sl, depth+1); err != nil {
			return err
		}
		if k := len(out); k > 0 && !less(nodes, out[k-1], x) {
			p := &nodes[out[k-1]]
			return fmt.Errorf("index out of order: (%d, %#x) before (%d, %#x)", p.Size, p.Addr, nd.Size, nd.Addr)
		}
		out = append(out, x)
		return walk(nd.Right, fl, sl, depth+1)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	for fl := range FLCount {
		for sl := range SLCount {
			if err := walk(t.first[fl][sl], fl, sl, 0); err != nil {
				return nil, err
			}
		}
	}
	if len(out) != t.n {
		return nil, fmt.Errorf("index holds %d blocks, Len says %d", len(out), t.n)
	}
	return out, nil
}
