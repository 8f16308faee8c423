package plan

import (
	"cmp"
	"context"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// An lns lowers a placement by large-neighbourhood moves: it takes out the
// buffers around a point of the peak (those that live near a time where a
// buffer reaches the height, or those that live with that buffer; the
// highest of them, 4 to maxWindow), places them again in
// another order, each at the lowest (first fit) or smallest (best fit) gap
// that the buffers left in place and those already placed again leave
// above the lowest of them (the band: the buffers in place below it do not
// matter, which makes a move cheap where many live at once), and
// keeps the result when no buffer of it goes above the height and fewer
// buffers (or as many) reach the height. When none reaches it any more,
// the height has come down. A move that puts a buffer above the height is
// undone. When the moves stall, they restart from another placement (see
// [lns.restart]). This is the large-neighbourhood search of Shaw ("Using
// Constraint Programming and Local Search Methods to Solve Vehicle
// Routing Problems", CP 1998) applied to the placement of buffers; the
// neighbourhoods are ours.
//
// Cost: a move is O(k log n) to find the k buffers that live near the
// chosen time, and for each buffer it places, the buffers live with it
// and a sort of their intervals. Memory is linear in the buffers.
type lns struct {
	bufs   []Buffer
	rng    *rand.Rand
	off    []int64 // the placement, always valid; its height is height
	height int64
	hot    []int32 // the buffers whose top is height

	// The buffers in order of Lower and, over that order, a segment tree
	// of the largest Upper: those live during [l, u) are found in O(log n)
	// each.
	byLower []int32
	lowers  []int64
	tree    []int64
	leaves  int
	times   []int64 // the distinct ends of lifetimes, sorted

	out   []bool  // per buffer: taken out by the move under way
	win   []int32 // scratch: the buffers of the move
	saved []int64 // scratch: their offsets before it
	spans []span  // scratch

	order []int32 // the order of time, for the restarts, made at the first

	moves, stall, restarts int64
}

// newLNS prepares the moves from the placement offsets of bufs (copied).
func newLNS(bufs []Buffer, offsets []int64, seed uint64) *lns {
	n := len(bufs)
	x := &lns{bufs: bufs, rng: rand.New(rand.NewPCG(seed, 0x1a5)), off: slices.Clone(offsets),
		byLower: make([]int32, n), lowers: make([]int64, n), out: make([]bool, n)}
	inOrder(x.byLower, func(a, b int32) int { return cmp.Compare(bufs[a].Lower, bufs[b].Lower) })
	for r, b := range x.byLower {
		x.lowers[r] = bufs[b].Lower
	}
	x.leaves = 1
	for x.leaves < n {
		x.leaves *= 2
	}
	x.tree = make([]int64, 2*x.leaves)
	for i := range x.tree {
		x.tree[i] = math.MinInt64
	}
	for r, b := range x.byLower {
		x.tree[x.leaves+r] = bufs[b].Upper
	}
	for i := x.leaves - 1; i > 0; i-- {
		x.tree[i] = max(x.tree[2*i], x.tree[2*i+1])
	}
	x.times = make([]int64, 0, 2*n)
	for _, b := range bufs {
		x.times = append(x.times, b.Lower, b.Upper)
	}
	slices.Sort(x.times)
	x.times = slices.Compact(x.times)
	x.reset(offsets)
	return x
}

// reset makes offsets (copied) the placement the moves start from.
func (x *lns) reset(offsets []int64) {
	copy(x.off, offsets)
	x.height = heightOf(x.bufs, x.off)
	x.findHot()
}

// findHot lists the buffers whose top is the height.
func (x *lns) findHot() {
	x.hot = x.hot[:0]
	for i, b := range x.bufs {
		if x.off[i]+b.Size == x.height {
			x.hot = append(x.hot, int32(i))
		}
	}
}

// each calls f for every buffer live at some time of [l, u).
func (x *lns) each(l, u int64, f func(b int32)) {
	end, _ := slices.BinarySearch(x.lowers, u) // the buffers that start before u
	x.collect(1, 0, x.leaves, end, l, f)
}

func (x *lns) collect(node, lo, hi, end int, l int64, f func(b int32)) {
	if lo >= end || x.tree[node] <= l {
		return
	}
	if hi-lo == 1 {
		f(x.byLower[lo])
		return
	}
	mid := (lo + hi) / 2
	x.collect(2*node, lo, mid, end, l, f)
	x.collect(2*node+1, mid, hi, end, l, f)
}

// maxWindow is the most buffers a move places again.
const maxWindow = 128

// move makes one move (see lns) and reports whether the height came down.
func (x *lns) move() bool {
	x.moves++
	x.stall++
	bufs := x.bufs
	hb := bufs[x.hot[x.rng.IntN(len(x.hot))]]
	t := hb.Lower + x.rng.Int64N(hb.Upper-hb.Lower)
	want := 4 << x.rng.IntN(bits.Len(maxWindow/4)) // 4 to maxWindow
	x.win = x.win[:0]
	if x.rng.IntN(2) == 0 {
		// The buffers live with it: what must move for it to come down.
		x.each(hb.Lower, hb.Upper, func(b int32) { x.win = append(x.win, b) })
	} else {
		// The window of time: the elementary intervals around t,
		// widened until it holds want buffers or all of time.
		i, _ := slices.BinarySearch(x.times, t+1)
		i-- // times[i] <= t < times[i+1]
		for w := 0; ; w = 2*w + 1 {
			lo, hi := max(i-w, 0), min(i+w+1, len(x.times)-1)
			x.win = x.win[:0]
			x.each(x.times[lo], x.times[hi], func(b int32) { x.win = append(x.win, b) })
			if len(x.win) >= want || (lo == 0 && hi == len(x.times)-1) {
				break
			}
		}
	}
	if len(x.win) > want {
		// The highest of them: the buffers around the peak.
		slices.SortFunc(x.win, func(a, b int32) int {
			return cmp.Compare(x.off[b]+bufs[b].Size, x.off[a]+bufs[a].Size)
		})
		x.win = x.win[:want]
	}
	x.shuffleOrder()
	x.saved = x.saved[:0]
	hotBefore := 0
	// The band: the buffers of the move go back between the lowest of
	// them and the height, so that only the buffers in place that reach
	// into it matter.
	band := int64(math.MaxInt64)
	for _, b := range x.win {
		band = min(band, x.off[b])
	}
	for _, b := range x.win {
		x.saved = append(x.saved, x.off[b])
		x.out[b] = true
		if x.off[b]+bufs[b].Size == x.height {
			hotBefore++
		}
	}
	f := x.rng.IntN(2)
	hotAfter := 0
	ok := true
	for _, b := range x.win {
		x.spans = append(x.spans[:0], span{0, band})
		x.each(bufs[b].Lower, bufs[b].Upper, func(o int32) {
			if top := x.off[o] + bufs[o].Size; !x.out[o] && top > band {
				x.spans = append(x.spans, span{x.off[o], top})
			}
		})
		off := fit(x.spans, bufs[b].Size, f)
		if off+bufs[b].Size > x.height {
			ok = false
			break
		}
		x.off[b] = off
		x.out[b] = false
		if off+bufs[b].Size == x.height {
			hotAfter++
		}
	}
	if !ok || hotAfter > hotBefore {
		for k, b := range x.win {
			x.off[b] = x.saved[k]
			x.out[b] = false
		}
		return false
	}
	if hotAfter < hotBefore {
		x.stall = 0
	}
	if len(x.hot)-hotBefore+hotAfter > 0 {
		x.findHot()
		return false
	}
	x.height = heightOf(bufs, x.off)
	x.findHot()
	x.stall = 0
	return true
}

// shuffleOrder puts the buffers of the move in one of the orders at
// random: of size, of area, of lifetime (each from the largest), of time,
// of their offsets before the move, or none; ties at random.
func (x *lns) shuffleOrder() {
	bufs := x.bufs
	x.rng.Shuffle(len(x.win), func(i, j int) { x.win[i], x.win[j] = x.win[j], x.win[i] })
	var c func(a, b int32) int
	switch x.rng.IntN(6) {
	case 0:
		c = func(a, b int32) int { return cmp.Compare(bufs[b].Size, bufs[a].Size) }
	case 1:
		c = func(a, b int32) int { return compareArea(&bufs[b], &bufs[a]) }
	case 2:
		c = func(a, b int32) int { return cmp.Compare(bufs[b].Upper-bufs[b].Lower, bufs[a].Upper-bufs[a].Lower) }
	case 3:
		c = func(a, b int32) int { return byTime(&bufs[a], &bufs[b]) }
	case 4:
		c = func(a, b int32) int { return cmp.Compare(x.off[a], x.off[b]) }
	default:
		return
	}
	slices.SortStableFunc(x.win, c)
}

// restart starts the moves from another placement, when they have not
// lowered the count of buffers at the height for maxStall moves: in turn
// the time-order first fit (the sweep, O(n log n)) and best (the best
// placement known). The moves need not start from the best: from the
// sweep's placement, above the best heuristic's, they often reach lower
// than from the best heuristic's, where they are stuck. (A greedy
// placement in an order with noise was tried, and placed a large problem
// several percent higher than either.) ctx stops the sweep; it returns
// whether it restarted.
func (x *lns) restart(ctx context.Context, best []int64) bool {
	n := len(x.bufs)
	x.stall = 0
	x.restarts++
	if x.restarts%2 == 0 {
		x.reset(best)
		return true
	}
	if x.order == nil {
		x.order = make([]int32, n)
		timeOrder(x.bufs, x.order)
	}
	offs := make([]int64, n)
	if _, err := firstFitSweep(ctx, x.bufs, x.order, offs); err != nil {
		return false
	}
	x.reset(offs)
	return true
}

// maxStall is the most moves without progress before a restart.
const maxStall = 200
