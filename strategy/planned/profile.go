package planned

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpualloc/gpualloc/plan"
)

// A request is one allocation of a recording: its size, and the events
// (allocations and frees, counted from the start of the recording) that
// made and freed it.
type request struct {
	size  int64
	alloc int64
	free  int64 // -1 while live
}

// A recorder keeps the requests of a run, or of a profile file, in order,
// with their lifetimes: about 24 bytes a request and a map entry per live
// one.
type recorder struct {
	reqs   []request
	events int64
	live   map[uint64]int32 // key (address or trace id) -> index in reqs
	rev    []int64          // scratch of period: the sizes, last first
	z      []int32          // scratch of period
}

func newRecorder() *recorder { return &recorder{live: map[uint64]int32{}} }

// reset forgets every request, keeping the memory.
func (r *recorder) reset() {
	r.reqs = r.reqs[:0]
	r.events = 0
	clear(r.live)
}

func (r *recorder) alloc(key uint64, size int64) {
	r.live[key] = int32(len(r.reqs))
	r.reqs = append(r.reqs, request{size: size, alloc: r.events, free: -1})
	r.events++
}

// free records the free of the request made under key; a key the
// recording does not know (made before a reset) is only counted.
func (r *recorder) free(key uint64) {
	if i, ok := r.live[key]; ok {
		r.reqs[i].free = r.events
		delete(r.live, key)
	}
	r.events++
}

// period finds the longest suffix of the request sizes that repeats with a
// period of at least minStep requests, at least twice: the steps of a
// training loop, which ask for the same sizes in the same order every
// iteration. It returns the suffix's first request and the period; the
// shortest period among those that cover the longest suffix (a multiple of
// the step covers as much as the step).
//
// The Z-function of the reversed sizes gives, for each shift p, how many
// sizes before the end agree with those p requests earlier: the suffix of
// length z[p]+p is p-periodic. It costs O(n) time and 12 bytes a request.
//
// Limits: only exact repetition counts, so a step whose sizes change (a
// sequence length drawn anew every step) has no period; a step that holds
// one request more or fewer than the next breaks the suffix there; and
// periodic stretches with no frees (the same layers' weights allocated at
// start-up) are periods too, which the caller rejects by their lifetimes.
func (r *recorder) period(minStep int) (start, p int, ok bool) {
	n := len(r.reqs)
	if n < 2*minStep {
		return 0, 0, false
	}
	r.rev = r.rev[:0]
	for i := n - 1; i >= 0; i-- {
		r.rev = append(r.rev, r.reqs[i].size)
	}
	r.z = zfunc(r.rev, r.z[:0])
	z := r.z
	best := 0
	for q := minStep; 2*q <= n; q++ {
		if int(z[q]) >= q && int(z[q])+q > best {
			best, p = int(z[q])+q, q
		}
	}
	if best == 0 {
		return 0, 0, false
	}
	return n - best, p, true
}

// zfunc appends to z the Z-function of s: z[i] is the length of the longest
// common prefix of s and s[i:], z[0] = len(s). O(len(s)).
func zfunc(s []int64, z []int32) []int32 {
	n := len(s)
	z = slices.Grow(z, n)[:n]
	if n == 0 {
		return z
	}
	z[0] = int32(n)
	l, r := 0, 0
	for i := 1; i < n; i++ {
		k := 0
		if i < r {
			k = min(r-i, int(z[i-l]))
		}
		for i+k < n && s[k] == s[i+k] {
			k++
		}
		z[i] = int32(k)
		if i+k > r {
			l, r = i, i+k
		}
	}
	return z
}

// periodic reports whether 7/8 of the bytes of the requests [s, s+p) are
// freed before the same request of the next step is made: a step, rather
// than a run of allocations that stay (weights, optimizer state). Requests
// [s, s+2p) must be recorded.
func (r *recorder) periodic(s, p int) bool {
	var all, freed int64
	for i := s; i < s+p; i++ {
		q := r.reqs[i]
		all += q.size
		if q.free >= 0 && q.free < r.reqs[i+p].alloc {
			freed += q.size
		}
	}
	return 8*freed >= 7*all
}

// boundary returns the request in [lo, hi) before which the fewest bytes
// are live: where the step is cut for planning, so that few buffers cross
// from one step into the next (in training, between the optimizer's update
// and the next forward pass). It costs O(n + (hi-lo) log(hi-lo)).
func (r *recorder) boundary(lo, hi int) int {
	at := r.reqs[lo].alloc
	var live int64
	type fr struct{ ev, size int64 }
	var frees []fr
	end := r.reqs[hi-1].alloc
	for i := range hi {
		q := r.reqs[i]
		if i < lo && (q.free < 0 || q.free > at) {
			live += q.size
		}
		if q.free > at && q.free < end {
			frees = append(frees, fr{q.free, q.size})
		}
	}
	slices.SortFunc(frees, func(a, b fr) int { return int(a.ev - b.ev) })
	best, bestLive := lo, live
	f := 0
	for j := lo + 1; j < hi; j++ {
		live += r.reqs[j-1].size
		for f < len(frees) && frees[f].ev < r.reqs[j].alloc {
			live -= frees[f].size
			f++
		}
		if live < bestLive {
			best, bestLive = j, live
		}
	}
	return best
}

// A stepPlan is the plan of one step: for each request of the step, in
// order, its size and its offset in the plan's region (-1: the request is
// left to the fallback, as STAlloc marks a request it does not plan with
// offset -1: Allocator/StaticAllocator.hpp, alloc_fn_).
type stepPlan struct {
	size   []int64 // requested bytes
	rsize  []int64 // bytes set aside: size rounded up to align
	off    []int64
	height int64
	solved plan.Solution
	pre    int   // positions of the prefix
	cut    int64 // the prefix's buffers that stay lie below it
	sync   syncTable
}

// align is the granularity of planned blocks: PyTorch's (kMinBlockSize,
// c10/cuda/CUDACachingAllocator.cpp) and STAlloc's (alignment512 in
// Allocator/OnlineDynamicManager.hpp).
const align = 512

func roundUp(n int64) int64 { return (n + align - 1) &^ (align - 1) }

// build plans the step [b, b+p) of the recording, whose requests up to
// b+2p must be recorded, after the prefix [0, b0) (b0 = b - a multiple of
// p; b0 = 0: none): the profile's requests before its steps (weights,
// a first step that also allocates the optimizer's state), planned with
// their own lifetimes, those that outlive the prefix and the first step
// keeping their memory for good, at the bottom of the region, as STAlloc plans weights, gradients and
// optimizer state at fixed addresses below the activations
// (Synthesizer/plan_generator.py, make_plan_for_residents_memory). The
// step follows the prefix in time. Each request of the step freed within
// the step lives over the events from its allocation to its free; one
// freed in the next step, before the same request of that step, keeps its
// memory for the whole step (STAlloc gives such cross-iteration tensors a
// region of their own: make_plan_for_cross_iteration_tensors); one that
// lives longer is left to the fallback. Every buffer is placed by
// plan.Solve within limit, at most once. Positions are the prefix's
// requests, then the step's. A plan whose lower bound exceeds maxHeight
// is not solved: errCostly. A step whose own buffers' peak is below
// minBytes is
// not worth its region: errSmall.
func (r *recorder) build(b0, b, p, window int, limit time.Duration, minBytes, maxHeight int64) (*stepPlan, error) {
	npre := r.reqs[b0].alloc
	first := r.reqs[b0+p].alloc // end of the first step after the prefix
	if b0 == 0 {
		npre, first = 0, 0
	}
	base := r.reqs[b].alloc
	span := r.reqs[b+p].alloc - base
	m := b0 + p
	sp := &stepPlan{size: make([]int64, m), rsize: make([]int64, m), off: make([]int64, m), pre: b0}
	var prob plan.Problem
	var idx []int
	var stack int64 // the prefix's buffers that stay, one above the other
	nprefix := 0    // buffers of the prefix in prob
	add := func(k int, lower, upper int64) {
		prob.Buffers = append(prob.Buffers, plan.Buffer{Lower: lower, Upper: upper, Size: sp.rsize[k]})
		idx = append(idx, k)
	}
	for k := range m {
		i := k
		if k >= b0 {
			i = b + k - b0
		}
		q := r.reqs[i]
		sp.size[k], sp.rsize[k], sp.off[k] = q.size, roundUp(q.size), -1
		if k == b0 {
			nprefix = len(prob.Buffers)
		}
		if k < b0 {
			switch {
			case q.free >= 0 && q.free < npre:
				add(k, q.alloc, q.free)
			case q.free >= npre && q.free < first:
				add(k, q.alloc, min(q.free, npre+span))
			default:
				sp.off[k] = stack
				stack += sp.rsize[k]
			}
			continue
		}
		switch {
		case q.free < 0:
		case q.free < base+span:
			add(k, npre+q.alloc-base, npre+q.free-base)
		case q.free < r.reqs[i+p].alloc:
			add(k, npre, npre+span)
		}
	}
	if len(idx) == 0 {
		return nil, fmt.Errorf("no request of the step is freed within a step")
	}
	// The buffers that stay are live together at the end, so that they
	// need their sum in any placement; below the others, they leave the
	// rest of the region one range, which a dropped plan's pool serves
	// whole. The cost: the others cannot use that memory before the
	// buffers that stay are allocated (an optimizer's state, made at the
	// end of the first step, above that step's activations), which costs
	// nothing where the peak comes once everything that stays is live, as
	// in training.
	if plan.LowerBound(prob.Buffers[nprefix:]) < minBytes {
		return nil, errSmall
	}
	if stack+plan.LowerBound(prob.Buffers) > maxHeight {
		return nil, errCostly
	}
	sol, err := plan.Solve(context.Background(), prob, plan.Options{TimeLimit: limit})
	if err != nil {
		return nil, err
	}
	for i, k := range idx {
		sp.off[k] = stack + sol.Offsets[i]
	}
	sp.height, sp.solved, sp.cut = stack+roundUp(sol.Height), sol, stack
	sp.sync = r.syncTable(b0, b, p, window)
	return sp, nil
}

// errCostly reports a plan that would need more than maxHeight.
var errCostly = errors.New("the plan would need more memory than it may take")

// errSmall reports a step whose plan would hold too little to pay.
var errSmall = errors.New("the step's peak is too small a share of the memory held")

// syncTable returns the table that locates requests from the events the
// plan expects: those of the prefix [0, b0), then those of the step
// [b, b+p), its allocations and the frees between them.
func (r *recorder) syncTable(b0, b, p, window int) syncTable {
	base := r.reqs[b].alloc
	span := r.reqs[b+p].alloc - base
	npre := r.reqs[b0].alloc
	if b0 == 0 {
		npre = 0
	}
	tokens := make([]int64, npre+span)
	pos := make([]int32, len(tokens))
	for i := range pos {
		pos[i] = -1
	}
	for k := range p {
		q := r.reqs[b+k]
		t := npre + q.alloc - base
		tokens[t], pos[t] = q.size, int32(b0+k)
	}
	for i, q := range r.reqs[:b+p] {
		if i < b0 {
			tokens[q.alloc], pos[q.alloc] = q.size, int32(i)
		}
		switch {
		case q.free >= 0 && q.free < npre:
			tokens[q.free] = -q.size
		case q.free >= base && q.free < base+span:
			tokens[npre+q.free-base] = -q.size
		}
	}
	return newSyncTable(tokens, pos, int(npre), window)
}

// peak returns the peak of the recorded requests' live bytes: O(n).
func (r *recorder) peak() int64 {
	delta := make([]int64, r.events+1)
	for _, q := range r.reqs {
		delta[q.alloc] += q.size
		if q.free >= 0 {
			delta[q.free] -= q.size
		}
	}
	var live, peak int64
	for _, d := range delta {
		live += d
		peak = max(peak, live)
	}
	return peak
}
