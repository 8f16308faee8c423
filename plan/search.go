package plan

import (
	"cmp"
	"context"
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"
)

// The outcome of a search for a placement within a height.
type outcome int

const (
	found      outcome = iota // a placement within the height
	infeasible                // proven: none exists
	aborted                   // out of nodes for this preorder
	stopped                   // out of time, or the context is done
)

// maxSearchPairs bounds the pairs of buffers that overlap in time for which
// Solve runs the exact search: its tables hold each pair twice. (A
// variable, so that tests can make a small problem too large.)
var maxSearchPairs int64 = 4 << 20

// A searcher looks for a placement of a problem within a height by
// depth-first search over canonical placements, as MiniMalloc's solver
// (github.com/google/minimalloc, src/solver.cc) does; the rules are
// MiniMalloc's, the code is ours.
//
// Time is cut into sections, the intervals between consecutive distinct
// ends of lifetimes; the buffers of a section all live at the same time.
// For each section the search keeps its floor (the top of the highest
// buffer placed in it) and the total size of its unplaced buffers; for each
// unplaced buffer its lowest offset (the top of the highest placed buffer
// that overlaps it in time); and for each boundary between two sections the
// number of unplaced buffers that cross it. Each node bounds every section
// from below by the offsets its unplaced buffers can still take (see
// [searcher.bounded]) and checks that the floors of the sections that must
// be full can be covered (see [searcher.covered]).
type searcher struct {
	bufs     []Buffer
	height   int64
	secLo    []int32   // first section of each buffer
	secHi    []int32   // one past its last
	overlaps [][]int32 // the buffers that overlap each in time
	secBufs  [][]int32 // the buffers of each section
	rank     []int32   // each buffer's place in the static preorder

	off    []int64 // offset of each placed buffer; -1 while unplaced
	minOff []int64
	floor  []int64 // per section
	total  []int64 // per section
	cuts   []int32 // per boundary: unplaced buffers in both sections s and s+1
	sol    []int64 // the offsets of the placement found

	undoOff   []change // minOff changes
	undoFloor []change // floor changes
	low       []int64  // scratch, per section: the lowest offset its unplaced buffers can take
	full      []bool   // per section: its buffers add up to the height, so every byte must be covered
	reach     []int64  // scratch, per section boundary: the level of [searcher.covered]'s pass that reached it
	req       []int64  // scratch, per section: the level of the pass that requires it
	secOrder  []int32  // scratch: the sections that must be covered
	eligible  []int32  // scratch: the buffers that can cover a section's floor
	pass      int64    // passes of covered so far, a stamp for reach and req

	po     [3]func(s *searcher, a, b int32) int // the preorder of this round
	mine   []int                                // the preorders this searcher tries, indexes in preorders
	ranks  [][]int32                            // per preorder of mine: each buffer's rank in it, made once
	ctx    context.Context
	halt   *atomic.Bool // set when another searcher has the answer
	nodes  int64        // nodes left for this preorder
	budget int64        // nodes of the last round of solve; 0: no limit

	// maxTot0 is the largest total of the sections of each buffer before
	// any is placed; totKey the same from the totals of now, the key of
	// byTotal, set before each sort that uses it.
	maxTot0 []int64
	totKey  []int64
	// work counts the steps (buffers and sections visited, sort keys)
	// since the context was last checked: the search checks it every
	// checkEvery steps, so that the time between two checks is bounded
	// whatever a node costs. maxWork is the most seen at a check.
	work, maxWork int64
	// until, when not zero, ends a solve early (outcome aborted): the
	// time one probe may take.
	until time.Time
	late  bool // the solve under way passed until

	depth   int       // buffers placed
	scratch [][]int32 // per depth: the candidates of search
}

// checkEvery is the number of steps of the search between two checks of
// its context: about a millisecond.
const checkEvery = 1 << 18

// tick adds steps to the work since the last check of the context and
// reports whether the search must stop: the context is done or another
// searcher has the answer.
func (s *searcher) tick(steps int64) bool {
	if s.work += steps; s.work < checkEvery {
		return false
	}
	s.maxWork = max(s.maxWork, s.work)
	s.work = 0
	if !s.until.IsZero() && time.Now().After(s.until) {
		s.late = true
		return true
	}
	return s.ctx.Err() != nil || s.halt.Load()
}

type change struct {
	i   int32
	old int64
}

// newSearcher prepares the search of bufs, or returns nil when more than
// maxSearchPairs pairs of buffers overlap in time or ctx is done first. It
// costs O(n log n) and the pairs, and checks ctx as it goes.
func newSearcher(ctx context.Context, bufs []Buffer) *searcher {
	n := len(bufs)
	s := &searcher{ctx: ctx, bufs: bufs, secLo: make([]int32, n), secHi: make([]int32, n), overlaps: make([][]int32, n),
		rank: make([]int32, n), off: make([]int64, n), minOff: make([]int64, n), sol: make([]int64, n),
		halt: new(atomic.Bool), mine: []int{0, 1, 2}}
	if overlapPairs(bufs) > maxSearchPairs {
		return nil
	}
	// Pairs that overlap in time: sweep in the order of Lower, keeping the
	// buffers still live.
	byLower := make([]int32, n)
	inOrder(byLower, func(a, b int32) int { return cmp.Compare(bufs[a].Lower, bufs[b].Lower) })
	var live []int32
	var steps int64
	for _, b := range byLower {
		if steps += int64(len(live)) + 1; steps >= checkEvery {
			if ctx.Err() != nil {
				return nil
			}
			steps = 0
		}
		live = slices.DeleteFunc(live, func(a int32) bool { return bufs[a].Upper <= bufs[b].Lower })
		for _, a := range live {
			s.overlaps[a] = append(s.overlaps[a], b)
			s.overlaps[b] = append(s.overlaps[b], a)
		}
		live = append(live, b)
	}
	// Sections.
	times := make([]int64, 0, 2*n)
	for _, b := range bufs {
		times = append(times, b.Lower, b.Upper)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	nsec := max(len(times)-1, 0)
	s.floor = make([]int64, nsec)
	s.total = make([]int64, nsec)
	s.cuts = make([]int32, max(nsec-1, 0))
	s.secBufs = make([][]int32, nsec)
	s.low = make([]int64, nsec)
	s.full = make([]bool, nsec)
	s.reach = make([]int64, nsec+1)
	s.req = make([]int64, nsec)
	for i, b := range bufs {
		lo, _ := slices.BinarySearch(times, b.Lower)
		hi, _ := slices.BinarySearch(times, b.Upper)
		s.secLo[i], s.secHi[i] = int32(lo), int32(hi)
		for k := lo; k < hi; k++ {
			s.total[k] += b.Size
			s.secBufs[k] = append(s.secBufs[k], int32(i))
			if k+1 < hi {
				s.cuts[k]++
			}
		}
		if steps += int64(hi-lo) + 1; steps >= checkEvery {
			if ctx.Err() != nil {
				return nil
			}
			steps = 0
		}
	}
	s.maxTot0 = make([]int64, n)
	s.totKey = make([]int64, n)
	for i := range bufs {
		s.maxTot0[i] = s.maxTotal(int32(i))
	}
	return s
}

// overlapPairs counts the pairs of buffers that overlap in time, from the
// sorted ends of the lifetimes: O(n log n), without listing them. A buffer
// b overlaps every buffer that starts before it (or with it, earlier in
// the problem) less those that ended by b.Lower.
func overlapPairs(bufs []Buffer) int64 {
	lowers := make([]int64, len(bufs))
	uppers := make([]int64, len(bufs))
	for i, b := range bufs {
		lowers[i], uppers[i] = b.Lower, b.Upper
	}
	slices.Sort(lowers)
	slices.Sort(uppers)
	var pairs int64
	for i, l := range lowers {
		ended, _ := slices.BinarySearch(uppers, l+1) // uppers <= l
		pairs += int64(i - ended)
	}
	return pairs
}

// preorders are the static orders in which the search tries buffers of
// equal lowest offset, MiniMalloc's default preordering heuristics ("WAT",
// "TAW", "TWA"), each key from the largest: W the width of the lifetime, A
// the area, T the largest total of a section the buffer lives in.
var preorders = [][3]func(s *searcher, a, b int32) int{
	{byWidth, byArea, byTotal},
	{byTotal, byArea, byWidth},
	{byTotal, byWidth, byArea},
}

func byArea(s *searcher, a, b int32) int { return compareArea(&s.bufs[b], &s.bufs[a]) }
func byWidth(s *searcher, a, b int32) int {
	return cmp.Compare(s.bufs[b].Upper-s.bufs[b].Lower, s.bufs[a].Upper-s.bufs[a].Lower)
}
func byTotal(s *searcher, a, b int32) int {
	return cmp.Compare(s.totKey[b], s.totKey[a])
}

// maxTotal is the largest total of the sections of buffer b, from the
// totals of now: O(its sections), which is why byTotal compares keys
// computed once per sort rather than calling it.
func (s *searcher) maxTotal(b int32) int64 {
	var m int64
	for k := s.secLo[b]; k < s.secHi[b]; k++ {
		m = max(m, s.total[k])
	}
	return m
}

// solve looks for a placement within height, trying the preorders in turn
// with a node limit that doubles each round (MiniMalloc's RoundRobin), until
// one finds a placement or proves there is none, or the time is up, or a
// round has used s.budget nodes (when > 0; then it returns aborted).
func (s *searcher) solve(height int64) outcome {
	s.height = height
	n := len(s.bufs)
	// No buffer is placed between searches: the totals are the sections'.
	for k, t := range s.total {
		s.full[k] = t == height
	}
	// The preorders do not depend on the height: ranked once, at the
	// first solve, checking the context between the sorts.
	if s.ranks == nil {
		copy(s.totKey, s.maxTot0)
		ranks := make([][]int32, len(preorders))
		for _, i := range s.mine {
			if s.tick(int64(n) * int64(bits.Len(uint(n))+1)) {
				return stopped
			}
			po := preorders[i]
			idx := make([]int32, n)
			inOrder(idx, func(a, b int32) int { return s.preorder(po, a, b) })
			ranks[i] = make([]int32, n)
			for r, b := range idx {
				ranks[i][b] = int32(r)
			}
		}
		s.ranks = ranks
	}
	ranks := s.ranks
	for limit := int64(max(n, 64)); ; limit *= 2 {
		last := s.budget > 0 && limit >= s.budget
		if last {
			limit = s.budget
		}
		for _, i := range s.mine {
			s.rank, s.po = ranks[i], preorders[i]
			s.nodes = limit
			switch out := s.solveAll(); out {
			case found, infeasible, stopped:
				return out
			}
		}
		if last {
			return aborted
		}
	}
}

// preorder compares buffers a and b by the keys of po.
func (s *searcher) preorder(po [3]func(s *searcher, a, b int32) int, a, b int32) int {
	return cmp.Or(po[0](s, a, b), po[1](s, a, b), po[2](s, a, b))
}

// solveAll searches the whole problem: each part of time that no buffer
// crosses is solved apart.
func (s *searcher) solveAll() outcome {
	for i := range s.off {
		s.off[i] = -1
		s.minOff[i] = 0
	}
	// The sections' floors are 0 again; totals and cuts are restored by the
	// undoing of every placement.
	clear(s.floor)
	all := make([]int32, len(s.bufs))
	for i := range all {
		all[i] = int32(i)
	}
	return s.decompose(all, 0, int32(len(s.floor)), []int32{0})
}

// decompose solves the unplaced buffers of bufs that live in sections
// [lo, hi), split at the boundaries cutAt (the first is lo): every part
// must be solved.
func (s *searcher) decompose(bufs []int32, lo, hi int32, cutAt []int32) outcome {
	if len(cutAt) == 1 {
		// Split at the boundaries no unplaced buffer crosses.
		for k := lo; k+1 < hi; k++ {
			if s.cuts[k] == 0 {
				cutAt = append(cutAt, k+1)
			}
		}
	}
	cutAt = append(cutAt, hi)
	// Each unplaced buffer lies within one part: the last cut at or
	// before its first section.
	parts := make([][]int32, len(cutAt)-1)
	for _, b := range bufs {
		if s.off[b] >= 0 {
			continue
		}
		if s.secLo[b] < lo || s.secHi[b] > hi {
			continue // not of this range
		}
		c, _ := slices.BinarySearch(cutAt, s.secLo[b]+1)
		parts[c-1] = append(parts[c-1], b)
	}
	if s.tick(int64(len(bufs)) * int64(bits.Len(uint(len(cutAt)))+1)) {
		return stopped
	}
	for c, part := range parts {
		if len(part) == 0 {
			continue
		}
		plo, phi := cutAt[c], cutAt[c+1]
		// As MiniMalloc's SubSolve does, order the part's buffers by the
		// preorder again, from the totals of now.
		old := make([]int32, len(part))
		var steps int64
		for i, b := range part {
			old[i] = s.rank[b]
			s.totKey[b] = s.maxTotal(b)
			steps += int64(s.secHi[b]-s.secLo[b]) + int64(bits.Len(uint(len(part))))
		}
		if s.tick(steps) {
			return stopped
		}
		sorted := slices.Clone(part)
		slices.SortStableFunc(sorted, func(a, b int32) int { return s.preorder(s.po, a, b) })
		for r, b := range sorted {
			s.rank[b] = int32(r)
		}
		out := s.search(part, plo, phi, -1, -1)
		for i, b := range part {
			s.rank[b] = old[i]
		}
		if out != found {
			return out
		}
	}
	return found
}

// search places the unplaced buffers of bufs, which live in sections
// [lo, hi), each at the lowest offset the placed ones allow, in
// non-decreasing order of (offset, rank) after (lastOff, lastRank).
func (s *searcher) search(bufs []int32, lo, hi int32, lastOff int64, lastRank int32) outcome {
	if s.nodes <= 0 {
		return aborted
	}
	s.nodes--
	// A node visits its buffers, their sections and, to bound them, the
	// sections [lo, hi) a few times.
	if s.tick(int64(len(bufs)) + 4*int64(hi-lo) + 1) {
		return stopped
	}
	cands, next, minHeight := s.gather(bufs, lastOff, lastRank)
	defer func() { s.scratch[s.depth] = cands[:0] }()
	if len(cands) == 0 {
		return found
	}
	// Canonical placements only: offsets never go down, and at equal
	// offsets the preorder decides. The candidates in order after
	// (lastOff, lastRank) may go next, the lowest first (next); the
	// others wait until a placement raises them.
	if next < 0 || !s.bounded(cands, s.minOff[next], lastOff, lastRank, lo, hi) ||
		!s.covered(cands, lastOff, lastRank, lo, hi) {
		return infeasible
	}
	// Dominance: b would leave below it the room of a buffer that fits
	// under b's offset, which a canonical placement puts there first.
	// Only the rest are sorted: most nodes fail the bound first.
	order := cands[:0]
	for _, b := range cands {
		if !s.before(b, lastOff, lastRank) && s.minOff[b] < minHeight {
			order = append(order, b)
		}
	}
	slices.SortFunc(order, func(a, b int32) int {
		return cmp.Or(cmp.Compare(s.minOff[a], s.minOff[b]), cmp.Compare(s.rank[a], s.rank[b]))
	})
	for _, b := range order {
		out := s.place(bufs, lo, hi, b, s.minOff[b])
		if out != infeasible {
			return out
		}
		// MiniMalloc's hatless pruning: when no unplaced buffer lives
		// with b, b bears on nothing left, and every other choice here
		// fails as this one did.
		if s.hatless(b) {
			return infeasible
		}
	}
	return infeasible
}

// consistent reports whether the unplaced buffers of bufs, which live in
// sections [lo, hi), pass the bounds of a node after (lastOff, lastRank)
// (see bounded and covered). It uses the scratch slice of the depth below
// the caller's.
func (s *searcher) consistent(bufs []int32, lo, hi int32, lastOff int64, lastRank int32) bool {
	cands, next, _ := s.gather(bufs, lastOff, lastRank)
	defer func() { s.scratch[s.depth] = cands[:0] }()
	return len(cands) == 0 || next >= 0 && s.bounded(cands, s.minOff[next], lastOff, lastRank, lo, hi) &&
		s.covered(cands, lastOff, lastRank, lo, hi)
}

// gather returns the unplaced buffers of bufs, in the scratch slice of the
// current depth (the caller gives it back), the first of them in canonical
// order after (lastOff, lastRank) (-1 if none), and the lowest top any of
// them can have: a node allocates nothing.
func (s *searcher) gather(bufs []int32, lastOff int64, lastRank int32) (cands []int32, next int32, minHeight int64) {
	for len(s.scratch) <= s.depth {
		s.scratch = append(s.scratch, nil)
	}
	cands, next, minHeight = s.scratch[s.depth][:0], -1, -1
	for _, b := range bufs {
		if s.off[b] >= 0 {
			continue
		}
		cands = append(cands, b)
		if t := s.minOff[b] + s.bufs[b].Size; minHeight < 0 || t < minHeight {
			minHeight = t
		}
		if !s.before(b, lastOff, lastRank) && (next < 0 || s.before(b, s.minOff[next], s.rank[next])) {
			next = b
		}
	}
	return cands, next, minHeight
}

// before reports whether unplaced buffer b, at its lowest offset, comes
// at or before (lastOff, lastRank) in the canonical order, so that it
// cannot be placed next.
func (s *searcher) before(b int32, lastOff int64, lastRank int32) bool {
	off := s.minOff[b]
	return off < lastOff || (off == lastOff && s.rank[b] <= lastRank)
}

// bounded is the cross-section bound of a node whose next placement is at
// offset next or higher, after (lastOff, lastRank): in every section of
// [lo, hi), the unplaced buffers all live at once and lie above the
// section's floor and above the lowest offset any of them can take, so
// they must fit between that and the height.
//
// Every placement from here on is at or above next: an unplaced buffer
// can take its lowest offset if that comes after (lastOff, lastRank) in
// canonical order, and one that does not must first be raised by a buffer
// placed at or above next, so it lies at next+1 or higher. This is
// MiniMalloc's section inference with its monotonic and unallocated
// floors, and the canonical order makes it stronger: the buffers that
// cannot go next no longer hold a section's bound down. It costs a pass
// over the sections of the unplaced buffers cands.
func (s *searcher) bounded(cands []int32, next, lastOff int64, lastRank int32, lo, hi int32) bool {
	// The sections' floors and next alone first: a pass over the
	// sections, enough to prune most nodes.
	for k := lo; k < hi; k++ {
		if s.total[k] > 0 && max(s.floor[k], next)+s.total[k] > s.height {
			return false
		}
		s.low[k] = math.MaxInt64
	}
	for _, b := range cands {
		at := s.minOff[b]
		if s.before(b, lastOff, lastRank) {
			at = next + 1
		}
		for k := max(s.secLo[b], lo); k < min(s.secHi[b], hi); k++ {
			s.low[k] = min(s.low[k], at)
		}
	}
	for k := lo; k < hi; k++ {
		if s.total[k] > 0 && max(s.floor[k], s.low[k])+s.total[k] > s.height {
			return false
		}
	}
	return true
}

// covered is the floor-cover rule for full sections, those whose buffers
// add up to the height (every section of a tight instance): in a placement
// within the height no byte of such a section is free, the byte at its
// floor F included. The buffer that covers it is unplaced (a placed one
// that covered it would lie under the floor, which is above its top) and
// lives in the section, so its offset is at least its lowest offset, which
// is at least F: it lies at exactly F, so its lowest offset is F now and no
// placement raises it before it goes. It is not one that cannot go next:
// such a buffer must be raised before it is placed (the canonical order
// after (lastOff, lastRank) only moves on). So for each level F the full
// sections of floor F that still have unplaced buffers each need one
// buffer at offset F among those eligible (lowest offset F, not before
// (lastOff, lastRank), F + size within the height), and the buffers at one
// offset are apart in time: some of the eligible buffers of level F, apart
// in time, cover all those sections. covered checks this for each level by
// a pass over the section boundaries from the first such section to the
// last, marking those reached by a set of disjoint eligible buffers that
// covers every required section before them. The per-section bound of
// [searcher.bounded] only asks for one eligible buffer per section; two
// that overlap in time cannot both be used, which this rule sees.
//
// It is our rule, not MiniMalloc's. It costs sorting the eligible buffers
// and the full sections (O(m log m)) and, per level, a pass over the
// sections between its first and last required one.
func (s *searcher) covered(cands []int32, lastOff int64, lastRank int32, lo, hi int32) bool {
	s.secOrder = s.secOrder[:0]
	for k := lo; k < hi; k++ {
		if s.full[k] && s.total[k] > 0 {
			s.secOrder = append(s.secOrder, k)
		}
	}
	if len(s.secOrder) == 0 {
		return true
	}
	s.eligible = s.eligible[:0]
	for _, b := range cands {
		if !s.before(b, lastOff, lastRank) && s.minOff[b]+s.bufs[b].Size <= s.height {
			s.eligible = append(s.eligible, b)
		}
	}
	slices.SortFunc(s.secOrder, func(a, b int32) int {
		return cmp.Or(cmp.Compare(s.floor[a], s.floor[b]), cmp.Compare(a, b))
	})
	slices.SortFunc(s.eligible, func(a, b int32) int {
		return cmp.Or(cmp.Compare(s.minOff[a], s.minOff[b]), cmp.Compare(s.secLo[a], s.secLo[b]))
	})
	e := 0
	for i := 0; i < len(s.secOrder); {
		level := s.floor[s.secOrder[i]]
		j := i
		s.pass++
		for ; j < len(s.secOrder) && s.floor[s.secOrder[j]] == level; j++ {
			s.req[s.secOrder[j]] = s.pass
		}
		first, last := s.secOrder[i], s.secOrder[j-1]
		for e < len(s.eligible) && s.minOff[s.eligible[e]] < level {
			e++
		}
		f := e
		for f < len(s.eligible) && s.minOff[s.eligible[f]] == level {
			f++
		}
		// The eligible buffers of this level, by their first section.
		c := s.eligible[e:f]
		s.reach[first] = s.pass
		for k := first; k <= last; k++ {
			ok := s.reach[k] == s.pass
			if ok && s.req[k] != s.pass {
				s.reach[k+1] = s.pass
			}
			for len(c) > 0 && max(s.secLo[c[0]], first) <= k {
				if b := c[0]; ok && s.secHi[b] > first && s.secLo[b] <= last {
					s.reach[min(s.secHi[b], last+1)] = s.pass
				}
				c = c[1:]
			}
		}
		if s.reach[last+1] != s.pass {
			return false
		}
		i, e = j, f
	}
	return true
}

// hatless reports whether every buffer that lives with b is placed.
func (s *searcher) hatless(b int32) bool {
	for _, o := range s.overlaps[b] {
		if s.off[o] < 0 {
			return false
		}
	}
	return true
}

// place puts b at off, goes on with the search and undoes the placement.
func (s *searcher) place(bufs []int32, lo, hi int32, b int32, off int64) outcome {
	buf := &s.bufs[b]
	top := off + buf.Size
	if top > s.height {
		return infeasible
	}
	s.off[b] = off
	s.sol[b] = off
	uo, uf := len(s.undoOff), len(s.undoFloor)
	for _, o := range s.overlaps[b] {
		if old := s.minOff[o]; s.off[o] < 0 && old < top {
			s.undoOff = append(s.undoOff, change{o, old})
			s.minOff[o] = top
		}
	}
	for k := s.secLo[b]; k < s.secHi[b]; k++ {
		s.undoFloor = append(s.undoFloor, change{k, s.floor[k]})
		s.floor[k] = max(s.floor[k], top)
		s.total[k] -= buf.Size
	}
	var cutAt []int32
	for k := s.secLo[b]; k+1 < s.secHi[b]; k++ {
		if s.cuts[k]--; s.cuts[k] == 0 && lo <= k && k+1 < hi {
			if cutAt == nil {
				cutAt = []int32{lo}
			}
			cutAt = append(cutAt, k+1)
		}
	}
	var out outcome
	s.depth++
	if cutAt != nil {
		// Before the parts are solved apart, each from offset 0, the
		// bounds of the whole range in the canonical order that goes on
		// from b: a placement of the range has a canonical form, so what
		// no canonical completion can fit, no placement of the parts can
		// (MiniMalloc checks its monotonic floor before it decomposes,
		// solver.cc, SearchSolutions then DynamicallyDecompose).
		if s.consistent(bufs, lo, hi, off, s.rank[b]) {
			out = s.decompose(bufs, lo, hi, cutAt)
		} else {
			out = infeasible
		}
	} else {
		out = s.search(bufs, lo, hi, off, s.rank[b])
	}
	s.depth--
	// Undo.
	for k := s.secLo[b]; k+1 < s.secHi[b]; k++ {
		s.cuts[k]++
	}
	for k := s.secLo[b]; k < s.secHi[b]; k++ {
		s.total[k] += buf.Size
	}
	for i := len(s.undoFloor) - 1; i >= uf; i-- {
		s.floor[s.undoFloor[i].i] = s.undoFloor[i].old
	}
	for i := len(s.undoOff) - 1; i >= uo; i-- {
		s.minOff[s.undoOff[i].i] = s.undoOff[i].old
	}
	s.undoOff, s.undoFloor = s.undoOff[:uo], s.undoFloor[:uf]
	s.off[b] = -1
	return out
}
