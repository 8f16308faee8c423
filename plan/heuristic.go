package plan

import (
	"cmp"
	"context"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// An order is one way of ranking the buffers for a greedy placement, the
// first placed first. Ties go to the buffer that comes first in the problem.
type order struct {
	name string
	cmp  func(a, b *Buffer) int
}

// orders are the orders of the portfolio: those of XLA's heap simulator
// (decreasing size, decreasing area, decreasing lifetime: the
// BufferIntervalCompare variants of GlobalDecreasingSizeBestFitHeap) and of
// SOMAS (decreasing size), and the order of time, which places the buffers
// as an online allocator that knew every free in advance would.
var orders = []order{
	{"size", func(a, b *Buffer) int {
		return cmp.Or(cmp.Compare(b.Size, a.Size), cmp.Compare(b.Upper-b.Lower, a.Upper-a.Lower))
	}},
	{"area", func(a, b *Buffer) int {
		return cmp.Or(compareArea(b, a), cmp.Compare(b.Size, a.Size))
	}},
	{"lifetime", func(a, b *Buffer) int {
		return cmp.Or(cmp.Compare(b.Upper-b.Lower, a.Upper-a.Lower), cmp.Compare(b.Size, a.Size))
	}},
	{"time", func(a, b *Buffer) int {
		return cmp.Or(cmp.Compare(a.Lower, b.Lower), cmp.Compare(b.Upper, a.Upper))
	}},
}

// compareArea compares size × lifetime, in 128 bits.
func compareArea(a, b *Buffer) int {
	ah, al := bits.Mul64(uint64(a.Size), uint64(a.Upper-a.Lower))
	bh, bl := bits.Mul64(uint64(b.Size), uint64(b.Upper-b.Lower))
	return cmp.Or(cmp.Compare(ah, bh), cmp.Compare(al, bl))
}

// Fits: where a buffer goes among the gaps that the buffers placed before
// it and live at the same time leave.
const (
	firstFit = iota // the lowest gap that holds it
	bestFit         // the smallest gap that holds it (the lowest of equals); above everything if none does
)

var fitNames = [...]string{firstFit: "firstfit", bestFit: "bestfit"}

// A placer runs greedy placements of one problem. It keeps the buffers
// sorted by Lower and, in a segment tree over that order, the largest Upper
// of the placed buffers of each range: the buffers placed so far that
// overlap [l, u) are those of rank below the first Lower >= u whose Upper is
// > l, found by descending only into ranges whose largest Upper is > l.
type placer struct {
	bufs   []Buffer
	lowers []int64 // Lower of each rank
	rank   []int32 // rank of each buffer in the order of Lower
	byRank []int32 // buffer of each rank
	leaves int     // leaves of the tree: a power of two >= len(bufs)
	tree   []int64 // largest Upper of the placed buffers under each node; MinInt64 for none
	spans  []span  // scratch: the placed buffers that overlap the one being placed
	order  []int32 // scratch
	off    []int64 // the offsets of the placement under way
}

type span struct{ lo, hi int64 }

func newPlacer(bufs []Buffer) *placer {
	n := len(bufs)
	p := &placer{bufs: bufs, rank: make([]int32, n), byRank: make([]int32, n), lowers: make([]int64, n), order: make([]int32, n)}
	for i := range p.byRank {
		p.byRank[i] = int32(i)
	}
	slices.SortStableFunc(p.byRank, func(a, b int32) int { return cmp.Compare(bufs[a].Lower, bufs[b].Lower) })
	for r, b := range p.byRank {
		p.rank[b] = int32(r)
		p.lowers[r] = bufs[b].Lower
	}
	p.leaves = 1
	for p.leaves < n {
		p.leaves *= 2
	}
	p.tree = make([]int64, 2*p.leaves)
	return p
}

// run places the buffers in order o with fit f, writing offsets, and
// returns the height. It checks ctx every 4096 buffers and returns its
// error when it is done.
func (p *placer) run(ctx context.Context, o order, f int, offsets []int64) (int64, error) {
	p.off = offsets
	for i := range p.order {
		p.order[i] = int32(i)
	}
	slices.SortStableFunc(p.order, func(a, b int32) int { return o.cmp(&p.bufs[a], &p.bufs[b]) })
	for i := range p.tree {
		p.tree[i] = math.MinInt64
	}
	var height int64
	for k, b := range p.order {
		if k&4095 == 4095 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		buf := &p.bufs[b]
		p.spans = p.spans[:0]
		end := sort.Search(len(p.lowers), func(i int) bool { return p.lowers[i] >= buf.Upper })
		p.collect(1, 0, p.leaves, end, buf.Lower)
		off := p.fit(buf.Size, f)
		offsets[b] = off
		height = max(height, off+buf.Size)
		p.mark(int(p.rank[b]), buf.Upper)
	}
	return height, nil
}

// collect appends to spans the placed buffers of rank in [lo, hi) ∩ [0,
// end) whose Upper is > t, under node.
func (p *placer) collect(node, lo, hi, end int, t int64) {
	if lo >= end || p.tree[node] <= t {
		return
	}
	if node >= p.leaves {
		b := p.byRank[lo]
		p.spans = append(p.spans, span{p.off[b], p.off[b] + p.bufs[b].Size})
		return
	}
	mid := (lo + hi) / 2
	p.collect(2*node, lo, mid, end, t)
	p.collect(2*node+1, mid, hi, end, t)
}

// mark records that the buffer of rank r, with upper u, is placed.
func (p *placer) mark(r int, u int64) {
	i := p.leaves + r
	p.tree[i] = u
	for i >>= 1; i > 0 && p.tree[i] < u; i >>= 1 {
		p.tree[i] = u
	}
}

// fit returns the offset for size among the sorted spans.
func (p *placer) fit(size int64, f int) int64 {
	slices.SortFunc(p.spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var top int64 // the top of the spans seen so far
	best, bestGap := int64(-1), int64(math.MaxInt64)
	for _, s := range p.spans {
		if gap := s.lo - top; gap >= size {
			if f == firstFit {
				return top
			}
			if gap < bestGap {
				best, bestGap = top, gap
			}
		}
		top = max(top, s.hi)
	}
	if best >= 0 {
		return best
	}
	return top
}
