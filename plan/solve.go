package plan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTimeLimit is the time Solve spends when Options.TimeLimit is 0.
const DefaultTimeLimit = 10 * time.Second

// Options control [Solve]. The zero value minimizes the height, with the
// exact search, within DefaultTimeLimit.
type Options struct {
	// Capacity, if > 0, is the height the placement must stay within:
	// Solve returns an error wrapping ErrNoPlacement when it finds none.
	Capacity int64
	// TimeLimit bounds the whole of Solve; 0 means DefaultTimeLimit.
	// Every phase stops at it. The first heuristic, one pass in order of
	// time, may go on for a tenth of the limit more; when even it has not
	// ended then, Solve gives the quick placement of stackSweep (O(n log
	// n), far from optimal), so that it returns within the limit + 10% and
	// that quick pass, at any size.
	TimeLimit time.Duration
	// NoSearch keeps to the heuristics.
	NoSearch bool
	// Workers is the number of cores the heuristics and the exact search
	// use; 0 means GOMAXPROCS.
	Workers int
	// Progress, if not nil, is called (on the goroutine of Solve) when a
	// phase starts and each time the best placement or the proven lower
	// bound improves.
	Progress func(Progress)
}

// A Progress is how far Solve has come.
type Progress struct {
	// Phase is "heuristics" or "search" (all that follows them: the exact
	// search, the large-neighbourhood moves and the proofs on windows).
	Phase string
	// Height is the best placement's height so far; 0 before the first.
	Height int64
	// Proven is the highest height proven to be needed: the lower bound,
	// raised by each height the search proves infeasible (+1).
	Proven int64
	// Method found the best placement so far (see Solution.Method).
	Method string
	// Elapsed is the time since Solve started.
	Elapsed time.Duration
}

// A Solution is a placement of a problem's buffers.
type Solution struct {
	// Offsets holds the offset of each buffer, in the order of the
	// problem's buffers.
	Offsets []int64
	// Height is the largest offset + size: the memory the placement needs.
	Height int64
	// LowerBound is the peak of live bytes ([LowerBound]).
	LowerBound int64
	// ProvenBound is the highest height proven to be needed: LowerBound,
	// or above it the lowest height that the exact search did not prove
	// infeasible, on the whole problem or on a window of time (see
	// [windowProver]). No placement is lower; Height - ProvenBound is the
	// gap to the optimum, proved.
	ProvenBound int64
	// Optimal reports that no placement is lower: Height equals
	// ProvenBound.
	Optimal bool
	// Method is what found the placement: "ORDER/FIT" for a heuristic
	// ("size/bestfit", "time/firstfit", ...), "time/stack" for the quick
	// placement given when the time ran out first, "search" for the exact
	// search, "lns" for the large-neighbourhood moves (see [lns]), "none"
	// for an empty problem.
	Method string
	// Elapsed is the time Solve took.
	Elapsed time.Duration
}

// ErrNoPlacement reports that Solve found no placement within
// Options.Capacity.
var ErrNoPlacement = errors.New("no placement within the capacity")

// Solve places the buffers of p (see the package documentation).
//
// Policy. First the time-order first fit, then the other heuristics, each
// stopped by the time limit. Then, unless the best is at the lower bound
// or within the capacity asked for, the rest of the time limit: with a
// capacity, one exact search for a placement within it; without (or for a
// problem too large for the exact search), the turns of an [improver]
// until the best is proven optimal (or within the capacity) or the time
// is up. It returns ctx's error when ctx is done first, and an error
// wrapping ErrNoPlacement when no placement within opts.Capacity was
// found, saying whether none exists (proven) or the time ran out.
//
// Cost. The heuristics are O(n log n) each plus the intervals they gather
// (see [placer]); the search is exponential at worst and bounded by the
// time limit. Memory is linear in the buffers, and in the pairs of buffers
// that overlap in time for the search (which is skipped above
// maxSearchPairs pairs, and limited to maxProofBuffers buffers on a
// window), once per core.
func Solve(ctx context.Context, p Problem, opts Options) (Solution, error) {
	start := time.Now()
	if err := p.Validate(); err != nil {
		return Solution{}, err
	}
	limit := opts.TimeLimit
	if limit <= 0 {
		limit = DefaultTimeLimit
	}
	tctx, cancel := context.WithDeadline(ctx, start.Add(limit))
	defer cancel()

	n := len(p.Buffers)
	sol := Solution{Offsets: make([]int64, n), LowerBound: LowerBound(p.Buffers), Method: "none"}
	done := func() (Solution, error) {
		sol.ProvenBound = max(sol.ProvenBound, sol.LowerBound)
		sol.Elapsed = time.Since(start)
		return sol, nil
	}
	if n == 0 {
		sol.Optimal = true
		return done()
	}
	if opts.Capacity > 0 && sol.LowerBound > opts.Capacity {
		return Solution{}, fmt.Errorf("%w: %d bytes live at once, more than the capacity %d", ErrNoPlacement, sol.LowerBound, opts.Capacity)
	}
	// The target: the capacity, or the lower bound.
	target := sol.LowerBound
	if opts.Capacity > 0 {
		target = opts.Capacity
	}
	progress := func(phase string, proven int64) {
		if opts.Progress != nil {
			opts.Progress(Progress{Phase: phase, Height: sol.Height, Proven: proven, Method: sol.Method, Elapsed: time.Since(start)})
		}
	}
	progress("heuristics", sol.LowerBound)

	workers := opts.Workers
	if workers <= 0 {
		workers = defaultWorkers()
	}
	if err := heuristics(ctx, tctx, limit, workers, p.Buffers, target, &sol, func() { progress("heuristics", sol.LowerBound) }); err != nil {
		return Solution{}, err
	}
	sol.Optimal = sol.Height == sol.LowerBound
	if sol.Height <= target || opts.NoSearch || tctx.Err() != nil {
		if opts.Capacity > 0 && sol.Height > target {
			why := "the search is off"
			if !opts.NoSearch {
				why = fmt.Sprintf("the time limit %v ran out", limit)
			}
			return Solution{}, fmt.Errorf("%w: the heuristics need %d bytes, and %s", ErrNoPlacement, sol.Height, why)
		}
		if ctx.Err() != nil {
			return Solution{}, ctx.Err()
		}
		return done()
	}

	pl := newPool(tctx, p.Buffers, workers)
	if pl == nil && tctx.Err() != nil {
		if ctx.Err() != nil {
			return Solution{}, ctx.Err()
		}
		if opts.Capacity > 0 {
			return Solution{}, fmt.Errorf("%w: the heuristics need %d bytes, and the time limit %v ran out", ErrNoPlacement, sol.Height, limit)
		}
		return done()
	}
	progress("search", sol.LowerBound)
	if opts.Capacity > 0 && pl != nil {
		switch out, offs := pl.solve(opts.Capacity, 0); out {
		case found:
			copy(sol.Offsets, offs)
			sol.Height, sol.Method = heightOf(p.Buffers, sol.Offsets), "search"
			sol.Optimal = sol.Height == sol.LowerBound
			return done()
		case infeasible:
			return Solution{}, fmt.Errorf("%w: proven, none within %d bytes (the lower bound is %d)", ErrNoPlacement, opts.Capacity, sol.LowerBound)
		default:
			if ctx.Err() != nil {
				return Solution{}, ctx.Err()
			}
			return Solution{}, fmt.Errorf("%w: none found in %v (the heuristics need %d bytes, the lower bound is %d)", ErrNoPlacement, limit, sol.Height, sol.LowerBound)
		}
	}
	im := &improver{ctx: tctx, bufs: p.Buffers, sol: &sol, proven: sol.LowerBound, target: opts.Capacity,
		progress: func(proven int64) { progress("search", proven) }}
	im.run(pl, workers)
	if ctx.Err() != nil {
		return Solution{}, ctx.Err()
	}
	if opts.Capacity > 0 && sol.Height > opts.Capacity {
		why := fmt.Sprintf("none found in %v", limit)
		if im.proven > opts.Capacity {
			why = fmt.Sprintf("proven, none within %d bytes", opts.Capacity)
		}
		return Solution{}, fmt.Errorf("%w: %s (the best found needs %d bytes, the lower bound is %d)", ErrNoPlacement, why, sol.Height, im.proven)
	}
	sol.ProvenBound = im.proven
	sol.Optimal = sol.Height <= im.proven
	return done()
}

// heuristics fills sol with the best placement of the portfolio: the
// time-order first fit first (or, when it has not ended a tenth of limit
// after tctx, the stack placement), then every other order x fit until one is within
// target or tctx ends, on up to workers cores. improved is called (on the
// caller's goroutine) each time sol gets better. It returns ctx's error
// (not tctx's) when ctx is done.
func heuristics(ctx, tctx context.Context, limit time.Duration, workers int, bufs []Buffer, target int64, sol *Solution, improved func()) error {
	n := len(bufs)
	idx := make([]int32, n)
	t0 := time.Now()
	timeOrder(bufs, idx)
	sortCost := time.Since(t0)
	// The first placement may use the tenth of the time limit past it:
	// only a problem with very many buffers live at once, or a limit spent
	// before Solve was called, needs the stack placement.
	sctx, cancel := tctx, context.CancelFunc(func() {})
	if dl, ok := tctx.Deadline(); ok {
		sctx, cancel = context.WithDeadline(ctx, dl.Add(limit/10))
	}
	defer cancel()
	h, err := firstFitSweep(sctx, bufs, idx, sol.Offsets)
	sol.Height, sol.Method = h, "time/firstfit"
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sol.Height, sol.Method = stackSweep(bufs, idx, sol.Offsets), "time/stack"
	}
	improved()
	if sol.Height <= target || tctx.Err() != nil {
		return nil
	}
	// The other orders, on workers cores: each worker takes an order at a
	// time (its sort serves both fits) with a placer of its own. The best
	// height wins, ties going to the first in the portfolio, so that the
	// answer does not depend on which worker ends first.
	hctx, stop := context.WithCancel(tctx)
	defer stop()
	type result struct {
		h    int64
		offs []int64
		name string
		rank int
	}
	var (
		next atomic.Int32
		wg   sync.WaitGroup
		res  = make(chan result)
	)
	for range max(1, min(workers, len(orders))) {
		wg.Go(func() {
			var pl *placer
			idx := make([]int32, n)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(orders) {
					return
				}
				// An order's sort cannot be stopped: skip it when the
				// time left is less than twice what the time order's
				// sort took.
				if dl, ok := hctx.Deadline(); ok && time.Until(dl) < 2*sortCost {
					return
				}
				if pl == nil {
					pl = newPlacer(bufs)
				}
				o := orders[i]
				c := o.compare(bufs)
				inOrder(idx, func(a, b int32) int { return c(&bufs[a], &bufs[b]) })
				for f := range fitNames {
					if o.name == "time" && f == firstFit {
						continue // the sweep's placement
					}
					offs := make([]int64, n)
					h, err := pl.runOrder(hctx, idx, f, offs)
					if err != nil {
						return
					}
					res <- result{h, offs, o.name + "/" + fitNames[f], 2*i + f}
				}
			}
		})
	}
	go func() { wg.Wait(); close(res) }()
	bestRank := -1 // the sweep's
	for r := range res {
		if r.h < sol.Height || (r.h == sol.Height && r.rank < bestRank) {
			sol.Height, sol.Method, sol.Offsets, bestRank = r.h, r.name, r.offs, r.rank
			improved()
		}
		if sol.Height <= target {
			stop()
		}
	}
	return ctx.Err()
}

// A descent lowers the best placement by the exact search on the whole
// problem, one probe a step, and raises the proven bound.
//
// Policy. First a probe at the proven bound (the lower bound at first)
// with the first budget. Then each pass probes heights by bisection
// between the lowest height not yet ruled out (above the proven bound)
// and the best found, each probe with a node budget: a probe that finds a
// placement lowers the best to that placement's height; one that proves
// none exists raises the proven bound; one that runs out of nodes moves
// the probes above it, for this pass. When the probes meet the best, the
// pass asks for a placement at the proven bound with 16 times the budget,
// about what its bisection spent, since that is the one height that ends
// the descent; then a new pass starts with twice the budget. So the easy
// heights are settled first, and the hard ones get the time that is left,
// as in MiniMalloc's capacity minimization (solver.cc,
// Solver::SolveWithStartTime, which bisects without budgets).
type descent struct {
	pl      *pool
	budget  int64
	tryLo   int64
	started bool
}

func newDescent(pl *pool, n int) *descent {
	return &descent{pl: pl, budget: int64(max(64*n, 1<<14))}
}

// step makes one probe for im and reports false when the time is up.
func (d *descent) step(im *improver) bool {
	probe := func(h, b int64) outcome {
		out, offs := d.pl.solveUntil(h, b, im.until())
		switch out {
		case found:
			im.offer(offs, "search")
		case infeasible:
			im.prove(h + 1)
		}
		return out
	}
	if !d.started {
		d.started = true
		d.tryLo = im.proven + 1
		return probe(im.proven, d.budget) != stopped
	}
	lo := max(d.tryLo, im.proven+1)
	if lo >= im.sol.Height {
		if probe(im.proven, 16*d.budget) == stopped {
			return false
		}
		d.tryLo, d.budget = im.proven+1, 2*d.budget
		return true
	}
	h := lo + (im.sol.Height-1-lo)/2
	switch probe(h, d.budget) {
	case stopped:
		return false
	case infeasible, aborted:
		d.tryLo = h + 1
	}
	return true
}

// An improver spends the time left on a placement that is not proven
// optimal: it keeps the best placement (sol) and the proven bound, and
// runs in turn the exact search on the whole problem (see [descent]; not
// for a problem too large for it), large-neighbourhood moves around the
// peak (see [lns]) and proofs on windows of time (see [windowProver]),
// until the best meets the bound, the best is within the target, or the
// time is up.
type improver struct {
	ctx      context.Context
	bufs     []Buffer
	sol      *Solution
	proven   int64
	target   int64 // done once the best is within it
	progress func(proven int64)
	start    time.Time
}

// until is the time by which a probe of the exact search gives up: as
// long as the improver has run so far, at least probeSlice, so that the
// probes' share of the time grows as the turns go on and none takes all
// the time left.
func (im *improver) until() time.Time {
	return time.Now().Add(max(time.Since(im.start), probeSlice))
}

// probeSlice is the least time of a probe of the exact search.
const probeSlice = time.Second

// offer makes offs (height computed) the best placement when it is
// lower, found by method.
func (im *improver) offer(offs []int64, method string) bool {
	h := heightOf(im.bufs, offs)
	if h >= im.sol.Height {
		return false
	}
	copy(im.sol.Offsets, offs)
	im.sol.Height, im.sol.Method = h, method
	im.progress(im.proven)
	return true
}

// prove raises the proven bound to h.
func (im *improver) prove(h int64) {
	if h > im.proven {
		im.proven = h
		im.progress(im.proven)
	}
}

// done reports whether there is nothing left to do: the best meets the
// bound, or is within the target, or the bound is above the target (none
// is within it), or the time is up.
func (im *improver) done() bool {
	return im.sol.Height <= im.proven || im.sol.Height <= im.target || (im.target > 0 && im.proven > im.target) ||
		im.ctx.Err() != nil
}

// run improves until done; pl is the exact search of the whole problem,
// nil when it is too large. Three kinds of turn share the time: a probe
// of the descent, a slice of moves, a step of the window proofs; each turn
// goes to the kind that has had the least of its share so far. On a
// problem of up to smallProblem buffers the descent has three quarters of
// the time (it is what proves such a problem optimal, and what places the
// tight ones, as on MiniMalloc's challenging problems); on a larger one
// the moves have twice the share of each other kind (half the time, or
// two thirds without the descent), since a node of the search costs time
// linear in the buffers and a probe of the whole seldom ends.
func (im *improver) run(pl *pool, workers int) {
	im.start = time.Now()
	x := newLNS(im.bufs, im.sol.Offsets, 1)
	wp := newWindowProver(im.bufs, workers)
	type kind struct {
		share float64
		spent time.Duration
		turn  func() bool // false: the time is up
	}
	moves := &kind{share: 1, turn: func() bool {
		slice := min(max(time.Since(im.start), time.Millisecond), lnsSlice)
		for t0 := time.Now(); !im.done() && time.Since(t0) < slice; {
			if x.move() && im.offer(x.off, "lns") {
				continue
			}
			if x.stall > maxStall && x.restart(im.ctx, im.sol.Offsets) {
				im.offer(x.off, "lns")
			}
		}
		return true
	}}
	proofs := &kind{share: 1, turn: func() bool {
		im.prove(wp.step(im.ctx, im.proven, im.sol.Height, im.until()))
		return true
	}}
	kinds := []*kind{moves}
	if len(wp.centers) > 0 {
		kinds = append(kinds, proofs)
	}
	if pl != nil {
		d := newDescent(pl, len(im.bufs))
		descent := &kind{share: 1, turn: func() bool { return d.step(im) }}
		kinds = append([]*kind{descent}, kinds...) // the first turn
		if len(im.bufs) <= smallProblem {
			descent.share = 6
		}
	}
	if pl == nil || len(im.bufs) > smallProblem {
		moves.share = 2
	}
	for !im.done() {
		k := kinds[0]
		for _, c := range kinds[1:] {
			if c.spent.Seconds()/c.share < k.spent.Seconds()/k.share {
				k = c
			}
		}
		t0 := time.Now()
		if !k.turn() {
			return
		}
		// At least a millisecond a turn, so that a kind with nothing
		// left to do does not take every turn.
		k.spent += max(time.Since(t0), time.Millisecond)
	}
}

// smallProblem is the most buffers of a problem on which the descent has
// the larger share of the time.
const smallProblem = 4000

// lnsSlice is the longest turn of the large-neighbourhood moves; the
// first turns are shorter, as long as Solve has been improving.
const lnsSlice = 50 * time.Millisecond

// heightOf returns the largest offset + size.
func heightOf(bufs []Buffer, offsets []int64) int64 {
	var h int64
	for i, b := range bufs {
		h = max(h, offsets[i]+b.Size)
	}
	return h
}
