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
// An order compares two buffers by themselves (cmp) or, as peak does, by
// what it first finds out about the whole problem (of).
type order struct {
	name string
	cmp  func(a, b *Buffer) int
	of   func(bufs []Buffer) func(a, b *Buffer) int
}

// compare returns the order's comparison of the buffers of bufs.
func (o order) compare(bufs []Buffer) func(a, b *Buffer) int {
	if o.of != nil {
		return o.of(bufs)
	}
	return o.cmp
}

// byTime is the order of time: by start, the longest first at a tie.
func byTime(a, b *Buffer) int {
	return cmp.Or(cmp.Compare(a.Lower, b.Lower), cmp.Compare(b.Upper, a.Upper))
}

// orders are the orders of the portfolio: those of XLA's heap simulator
// (decreasing size, decreasing area, decreasing lifetime: the
// BufferIntervalCompare variants of GlobalDecreasingSizeBestFitHeap) and of
// SOMAS (decreasing size); the order of time, which places the buffers
// as an online allocator that knew every free in advance would; and the
// order of the peak: the buffers live when the live bytes first reach
// their peak first, in the order of time, then the others in the order of
// time. A placement at the lower bound puts the buffers live at the peak
// side by side, filling it; placed first, each fit stacks them so, from
// 0, and the others go into the gaps around them (the growth and release
// of a training step's or a forward pass's activations, whose peak the
// other orders break up with the short-lived buffers they place first).
// It comes last, so that it wins only where it is lower.
var orders = []order{
	{name: "size", cmp: func(a, b *Buffer) int {
		return cmp.Or(cmp.Compare(b.Size, a.Size), cmp.Compare(b.Upper-b.Lower, a.Upper-a.Lower))
	}},
	{name: "area", cmp: func(a, b *Buffer) int {
		return cmp.Or(compareArea(b, a), cmp.Compare(b.Size, a.Size))
	}},
	{name: "lifetime", cmp: func(a, b *Buffer) int {
		return cmp.Or(cmp.Compare(b.Upper-b.Lower, a.Upper-a.Lower), cmp.Compare(b.Size, a.Size))
	}},
	{name: "time", cmp: byTime},
	{name: "peak", of: func(bufs []Buffer) func(a, b *Buffer) int {
		t := peakTime(bufs)
		return func(a, b *Buffer) int {
			atPeak := func(b *Buffer) int {
				if b.Lower <= t && t < b.Upper {
					return 0
				}
				return 1
			}
			return cmp.Or(cmp.Compare(atPeak(a), atPeak(b)), byTime(a, b))
		}
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

// inOrder sets idx to the indexes 0, 1, ... sorted by cmp, equal ones in
// the order of their indexes.
func inOrder(idx []int32, cmp func(a, b int32) int) {
	for i := range idx {
		idx[i] = int32(i)
	}
	// Ties by index: the order of a stable sort, from the faster one.
	slices.SortFunc(idx, func(a, b int32) int {
		if c := cmp(a, b); c != 0 {
			return c
		}
		return int(a - b)
	})
}

// A placer runs greedy placements of one problem. The question it answers
// for each buffer is which memory the buffers placed before it and live at
// some time of its lifetime occupy; the answer is a union of intervals of
// offsets, which it keeps merged, so that a buffer costs about the number of
// separate intervals around it rather than the number of buffers.
//
// Time is cut into elementary intervals (between consecutive distinct ends
// of lifetimes), grouped into blocks of blockLen, the leaves of a segment
// tree. Each node keeps two sets of offset intervals: full, the buffers that
// cover the node's blocks and were stored at the node (their canonical
// nodes), and all, every buffer stored at the node or below it, including
// those that overlap a leaf's block only in part, which the leaf also lists
// one by one (part) to be filtered exactly. For a buffer, the occupied
// memory is the all set of the canonical nodes of the blocks it covers, the
// full sets of the nodes on the paths from its two end blocks to the root,
// and, in an end block it covers in part, the listed buffers that overlap it.
// Placing it adds its interval to the same sets. A buffer costs O(log n)
// set operations plus the listed buffers of its end blocks (about blockLen
// each) and a sort of the intervals gathered; memory is linear in the
// buffers and the intervals the sets keep.
type placer struct {
	bufs   []Buffer
	lo, hi []int32 // each buffer's elementary intervals: [lo, hi)
	nelem  int32   // elementary intervals
	leaves int     // leaf blocks of the tree: a power of two
	full   []ivset // per node
	all    []ivset // per node
	part   [][]int32
	spans  []span  // scratch: the occupied intervals gathered
	order  []int32 // scratch
	off    []int64 // the offsets of the placement under way
}

// blockLen is the number of elementary intervals of a leaf block.
const blockLen = 16

type span struct{ lo, hi int64 }

func newPlacer(bufs []Buffer) *placer {
	n := len(bufs)
	p := &placer{bufs: bufs, lo: make([]int32, n), hi: make([]int32, n), order: make([]int32, n)}
	times := make([]int64, 0, 2*n)
	for _, b := range bufs {
		times = append(times, b.Lower, b.Upper)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	p.nelem = int32(max(len(times)-1, 1))
	for i, b := range bufs {
		lo, _ := slices.BinarySearch(times, b.Lower)
		hi, _ := slices.BinarySearch(times, b.Upper)
		p.lo[i], p.hi[i] = int32(lo), int32(hi)
	}
	nblocks := (int(p.nelem) + blockLen - 1) / blockLen
	p.leaves = 1
	for p.leaves < nblocks {
		p.leaves *= 2
	}
	p.full = make([]ivset, 2*p.leaves)
	p.all = make([]ivset, 2*p.leaves)
	p.part = make([][]int32, p.leaves)
	return p
}

// run places the buffers in order o with fit f, writing offsets, and
// returns the height (see runOrder).
func (p *placer) run(ctx context.Context, o order, f int, offsets []int64) (int64, error) {
	c := o.compare(p.bufs)
	inOrder(p.order, func(a, b int32) int { return c(&p.bufs[a], &p.bufs[b]) })
	return p.runOrder(ctx, p.order, f, offsets)
}

// runOrder places the buffers in the order idx with fit f, writing
// offsets, and returns the height. It checks ctx every 1024 buffers, or
// sooner once the intervals it has gathered since the last check reach
// checkEvery (a buffer among many placed ones gathers many), and returns
// its error when it is done.
func (p *placer) runOrder(ctx context.Context, idx []int32, f int, offsets []int64) (int64, error) {
	p.off = offsets
	for i := range p.full {
		p.full[i] = p.full[i][:0]
		p.all[i] = p.all[i][:0]
	}
	for i := range p.part {
		p.part[i] = p.part[i][:0]
	}
	var height, work int64
	for k, b := range idx {
		if k&1023 == 1023 || work >= checkEvery {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			work = 0
		}
		size := p.bufs[b].Size
		p.spans = p.spans[:0]
		p.visit(b, false)
		work += int64(len(p.spans)) + 1
		off := fit(p.spans, size, f)
		offsets[b] = off
		height = max(height, off+size)
		p.visit(b, true)
	}
	return height, nil
}

// visit gathers into spans the memory that placed buffers occupy during
// buffer b's lifetime or, with add, records b as placed at p.off[b].
func (p *placer) visit(b int32, add bool) {
	lo, hi := int(p.lo[b]), int(p.hi[b])
	bl, bh := lo/blockLen, (hi-1)/blockLen
	covers := func(blk int) bool {
		return lo <= blk*blockLen && hi >= min((blk+1)*blockLen, int(p.nelem))
	}
	iv := span{p.off[b], p.off[b] + p.bufs[b].Size}
	// End blocks covered in part.
	fl, fh := bl, bh
	for _, blk := range [2]int{bl, bh} {
		if covers(blk) || (blk == bh && bh == bl && fl > fh) {
			continue
		}
		if blk == bl {
			fl = bl + 1
		} else {
			fh = bh - 1
		}
		leaf := p.leaves + blk
		if add {
			p.part[blk] = append(p.part[blk], b)
			for n := leaf; n > 0; n >>= 1 {
				p.all[n].add(iv)
			}
			continue
		}
		for n := leaf; n > 0; n >>= 1 {
			p.spans = append(p.spans, p.full[n]...)
		}
		for _, o := range p.part[blk] {
			if p.lo[o] < p.hi[b] && p.lo[b] < p.hi[o] {
				p.spans = append(p.spans, span{p.off[o], p.off[o] + p.bufs[o].Size})
			}
		}
	}
	if fl > fh {
		return
	}
	// Blocks [fl, fh] covered whole: their canonical nodes, and the nodes
	// on the paths from the end blocks to the root.
	for l, r := fl+p.leaves, fh+1+p.leaves; l < r; l, r = l>>1, r>>1 {
		if l&1 == 1 {
			p.canonical(l, iv, add)
			l++
		}
		if r&1 == 1 {
			r--
			p.canonical(r, iv, add)
		}
	}
	for _, leaf := range [2]int{fl + p.leaves, fh + p.leaves} {
		for n := leaf >> 1; n > 0; n >>= 1 {
			if add {
				p.all[n].add(iv)
			} else {
				p.spans = append(p.spans, p.full[n]...)
			}
		}
	}
	if !add {
		// The end blocks' own full sets, when they are not canonical.
		p.spans = append(p.spans, p.full[fl+p.leaves]...)
		p.spans = append(p.spans, p.full[fh+p.leaves]...)
	}
}

// canonical gathers or adds to a canonical node of a buffer's blocks.
func (p *placer) canonical(n int, iv span, add bool) {
	if add {
		p.full[n].add(iv)
		p.all[n].add(iv)
		return
	}
	p.spans = append(p.spans, p.all[n]...)
}

// An ivset is a set of offsets as sorted, disjoint intervals, merged where
// they touch.
type ivset []span

// add adds the interval iv to s.
func (s *ivset) add(iv span) {
	v := *s
	// The first interval that ends at or after iv's start, and the first
	// that starts after its end: those between merge with iv.
	i := sort.Search(len(v), func(k int) bool { return v[k].hi >= iv.lo })
	j := i
	for j < len(v) && v[j].lo <= iv.hi {
		iv.lo, iv.hi = min(iv.lo, v[j].lo), max(iv.hi, v[j].hi)
		j++
	}
	if i == j {
		*s = slices.Insert(v, i, iv)
		return
	}
	v[i] = iv
	*s = slices.Delete(v, i+1, j)
}

// fit returns the offset for size with fit f among the occupied intervals
// spans, which it sorts.
func fit(spans []span, size int64, f int) int64 {
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var top int64 // the top of the spans seen so far
	best, bestGap := int64(-1), int64(math.MaxInt64)
	for _, s := range spans {
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
