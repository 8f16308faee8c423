package plan

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
)

// timeOrder sets idx to the buffers in order of time: by Lower, the
// longer-lived first at equal Lower, then by index. It is the order of
// the "time" heuristic.
func timeOrder(bufs []Buffer, idx []int32) {
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		return cmp.Or(cmp.Compare(bufs[a].Lower, bufs[b].Lower), cmp.Compare(bufs[b].Upper, bufs[a].Upper), cmp.Compare(a, b))
	})
}

// firstFitSweep places the buffers in order of time (idx), each at the
// lowest gap between the buffers live when it starts: the "time/firstfit"
// placement, which an online allocator that knew every free in advance
// would make. In that order the buffers placed before b that overlap it in
// time are exactly those live at b.Lower, so one sweep keeps the free gaps
// between the live buffers in a treap by offset that knows the longest gap
// of each subtree, and the live buffers in a heap by end: each buffer
// frees the ended ones, merging their memory with the gaps beside it, and
// takes the lowest gap long enough, or the top: O(log k) a buffer for k
// live at once, O(n log n) in all. It checks ctx every 1024 buffers and
// returns its error when it is done.
func firstFitSweep(ctx context.Context, bufs []Buffer, idx []int32, offsets []int64) (int64, error) {
	var (
		height int64
		g      gapTreap
		ends   = &endHeap{bufs: bufs}
		top    int64 // the top of the live buffers: free above
	)
	g.root, g.seed = -1, 0x9e3779b97f4a7c15
	for k, b := range idx {
		if k&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		buf := &bufs[b]
		for len(ends.ix) > 0 && bufs[ends.ix[0]].Upper <= buf.Lower {
			e := heap.Pop(ends).(int32)
			top = g.free(offsets[e], offsets[e]+bufs[e].Size, top)
		}
		var off int64
		if n := g.first(g.root, buf.Size); n >= 0 {
			gap := g.nodes[n]
			off = gap.lo
			g.root = g.remove(g.root, gap.lo)
			if gap.hi > gap.lo+buf.Size {
				g.root = g.insert(g.root, gap.lo+buf.Size, gap.hi)
			}
		} else {
			off = top
			top += buf.Size
		}
		offsets[b] = off
		height = max(height, off+buf.Size)
		heap.Push(ends, b)
	}
	return height, nil
}

// A gapTreap is a set of disjoint free intervals [lo, hi) of memory, a
// treap keyed by lo in which each node knows the longest interval of its
// subtree. Removed nodes are reused.
type gapTreap struct {
	nodes []gapNode
	root  int32 // -1 when empty
	spare []int32
	seed  uint64
}

type gapNode struct {
	lo, hi      int64
	longest     int64 // of the subtree
	prio        uint64
	left, right int32
}

func (t *gapTreap) longest(n int32) int64 {
	if n < 0 {
		return 0
	}
	return t.nodes[n].longest
}

func (t *gapTreap) fix(n int32) {
	x := &t.nodes[n]
	x.longest = max(x.hi-x.lo, t.longest(x.left), t.longest(x.right))
}

// split cuts the subtree n into the intervals with lo < key and the rest.
func (t *gapTreap) split(n int32, key int64) (int32, int32) {
	if n < 0 {
		return -1, -1
	}
	if t.nodes[n].lo < key {
		l, r := t.split(t.nodes[n].right, key)
		t.nodes[n].right = l
		t.fix(n)
		return n, r
	}
	l, r := t.split(t.nodes[n].left, key)
	t.nodes[n].left = r
	t.fix(n)
	return l, n
}

// merge joins a and b, every key of a below every key of b.
func (t *gapTreap) merge(a, b int32) int32 {
	if a < 0 {
		return b
	}
	if b < 0 {
		return a
	}
	if t.nodes[a].prio > t.nodes[b].prio {
		t.nodes[a].right = t.merge(t.nodes[a].right, b)
		t.fix(a)
		return a
	}
	t.nodes[b].left = t.merge(a, t.nodes[b].left)
	t.fix(b)
	return b
}

func (t *gapTreap) insert(root int32, lo, hi int64) int32 {
	t.seed ^= t.seed << 13
	t.seed ^= t.seed >> 7
	t.seed ^= t.seed << 17
	n := gapNode{lo: lo, hi: hi, longest: hi - lo, prio: t.seed, left: -1, right: -1}
	var i int32
	if k := len(t.spare); k > 0 {
		i = t.spare[k-1]
		t.spare = t.spare[:k-1]
		t.nodes[i] = n
	} else {
		i = int32(len(t.nodes))
		t.nodes = append(t.nodes, n)
	}
	l, r := t.split(root, lo)
	return t.merge(t.merge(l, i), r)
}

// remove removes the interval that starts at lo, which must be there.
func (t *gapTreap) remove(root int32, lo int64) int32 {
	l, r := t.split(root, lo)
	m, r := t.split(r, lo+1)
	t.spare = append(t.spare, m)
	return t.merge(l, r)
}

// first returns the interval of lowest lo at least size long, or -1.
func (t *gapTreap) first(n int32, size int64) int32 {
	for n >= 0 && t.nodes[n].longest >= size {
		x := &t.nodes[n]
		switch {
		case t.longest(x.left) >= size:
			n = x.left
		case x.hi-x.lo >= size:
			return n
		default:
			n = x.right
		}
	}
	return -1
}

// find returns the interval that starts at lo, or -1.
func (t *gapTreap) find(lo int64) int32 {
	n := t.root
	for n >= 0 && t.nodes[n].lo != lo {
		if lo < t.nodes[n].lo {
			n = t.nodes[n].left
		} else {
			n = t.nodes[n].right
		}
	}
	return n
}

// below returns the interval of largest lo below key, or -1.
func (t *gapTreap) below(key int64) int32 {
	n, best := t.root, int32(-1)
	for n >= 0 {
		if t.nodes[n].lo < key {
			best, n = n, t.nodes[n].right
		} else {
			n = t.nodes[n].left
		}
	}
	return best
}

// free returns [lo, hi) to the free memory below top, merged with the
// gaps beside it, and returns the new top: lower when the freed memory
// reaches it.
func (t *gapTreap) free(lo, hi, top int64) int64 {
	if n := t.below(lo); n >= 0 && t.nodes[n].hi == lo {
		lo = t.nodes[n].lo
		t.root = t.remove(t.root, lo)
	}
	if n := t.find(hi); n >= 0 {
		h := t.nodes[n].hi
		t.root = t.remove(t.root, hi)
		hi = h
	}
	if hi >= top {
		return lo
	}
	t.root = t.insert(t.root, lo, hi)
	return top
}

// An endHeap holds live buffers, the first to end first.
type endHeap struct {
	ix   []int32
	bufs []Buffer
}

func (h *endHeap) Len() int           { return len(h.ix) }
func (h *endHeap) Less(i, j int) bool { return h.bufs[h.ix[i]].Upper < h.bufs[h.ix[j]].Upper }
func (h *endHeap) Swap(i, j int)      { h.ix[i], h.ix[j] = h.ix[j], h.ix[i] }
func (h *endHeap) Push(x any)         { h.ix = append(h.ix, x.(int32)) }
func (h *endHeap) Pop() any           { x := h.ix[len(h.ix)-1]; h.ix = h.ix[:len(h.ix)-1]; return x }

// stackSweep places the buffers in order of time, each on top of the
// highest buffer live when it starts: a placement that is never low but
// always quick, O(n log n) with a heap of the live tops, and made whole
// whatever the time left. Solve gives it when the time runs out before
// firstFitSweep ends.
func stackSweep(bufs []Buffer, idx []int32, offsets []int64) int64 {
	var height int64
	h := &topHeap{bufs: bufs, offsets: offsets}
	for _, b := range idx {
		buf := &bufs[b]
		// The highest live top: the tops of ended buffers are dropped
		// when they come up.
		for len(h.ix) > 0 && bufs[h.ix[0]].Upper <= buf.Lower {
			heap.Pop(h)
		}
		var off int64
		if len(h.ix) > 0 {
			off = h.top(h.ix[0])
		}
		offsets[b] = off
		height = max(height, off+buf.Size)
		heap.Push(h, b)
	}
	return height
}

// A topHeap holds placed buffers, the highest top first.
type topHeap struct {
	ix      []int32
	bufs    []Buffer
	offsets []int64
}

func (h *topHeap) top(b int32) int64  { return h.offsets[b] + h.bufs[b].Size }
func (h *topHeap) Len() int           { return len(h.ix) }
func (h *topHeap) Less(i, j int) bool { return h.top(h.ix[i]) > h.top(h.ix[j]) }
func (h *topHeap) Swap(i, j int)      { h.ix[i], h.ix[j] = h.ix[j], h.ix[i] }
func (h *topHeap) Push(x any)         { h.ix = append(h.ix, x.(int32)) }
func (h *topHeap) Pop() any           { x := h.ix[len(h.ix)-1]; h.ix = h.ix[:len(h.ix)-1]; return x }
