package plan

import (
	"context"
	"errors"
	"fmt"
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
	// TimeLimit bounds the whole of Solve; 0 means DefaultTimeLimit. The
	// first heuristic always runs to its end, so that there is a
	// placement to give; the others and the search stop at the limit.
	TimeLimit time.Duration
	// NoSearch keeps to the heuristics.
	NoSearch bool
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
	// Optimal reports that no placement is lower: Height equals the lower
	// bound, or the search proved every lower height infeasible.
	Optimal bool
	// Method is what found the placement: "ORDER/FIT" for a heuristic
	// ("size/bestfit", "time/firstfit", ...), "search" for the exact
	// search, "none" for an empty problem.
	Method string
	// Elapsed is the time Solve took.
	Elapsed time.Duration
}

// ErrNoPlacement reports that Solve found no placement within
// Options.Capacity.
var ErrNoPlacement = errors.New("no placement within the capacity")

// Solve places the buffers of p (see the package documentation): the
// heuristics, then, unless the best of them is at the lower bound or within
// the capacity asked for, the exact search until the time limit. It
// returns ctx's error when ctx is done first, and an error wrapping
// ErrNoPlacement when no placement within opts.Capacity was found, saying
// whether none exists (proven) or the time ran out.
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

	pl := newPlacer(p.Buffers)
	cand := make([]int64, n)
	first := true
heuristics:
	for _, o := range orders {
		for f := range fitNames {
			hctx := tctx
			if first {
				hctx = ctx // the first always ends, unless ctx does
			}
			h, err := pl.run(hctx, o, f, cand)
			if err != nil {
				if ctx.Err() != nil {
					return Solution{}, ctx.Err()
				}
				break heuristics // out of time
			}
			if first || h < sol.Height {
				sol.Height, sol.Method = h, o.name+"/"+fitNames[f]
				sol.Offsets, cand = cand, sol.Offsets
			}
			first = false
			if sol.Height <= target {
				break heuristics
			}
		}
	}
	sol.Optimal = sol.Height == sol.LowerBound
	if sol.Height <= target || opts.NoSearch {
		if opts.Capacity > 0 && sol.Height > target {
			return Solution{}, fmt.Errorf("%w: the heuristics need %d bytes, and the search is off", ErrNoPlacement, sol.Height)
		}
		return done()
	}

	s := newSearcher(tctx, p.Buffers)
	if s == nil {
		if opts.Capacity > 0 {
			return Solution{}, fmt.Errorf("%w: the heuristics need %d bytes, and the problem is too large for the exact search", ErrNoPlacement, sol.Height)
		}
		return done()
	}
	// Look for a placement at the target; when minimizing and there is
	// none, bisect between the lower bound and the best height found.
	lo, hi := target, sol.Height-1 // heights in [lo, hi] are open
	for lo <= hi {
		h := lo
		if h != target {
			h = lo + (hi-lo)/2
		}
		switch s.solve(h) {
		case found:
			sol.Offsets = append(sol.Offsets[:0], s.sol...)
			sol.Height, sol.Method = heightOf(p.Buffers, sol.Offsets), "search"
			hi = sol.Height - 1
		case infeasible:
			if opts.Capacity > 0 {
				return Solution{}, fmt.Errorf("%w: proven, none within %d bytes (the lower bound is %d)", ErrNoPlacement, opts.Capacity, sol.LowerBound)
			}
			lo = h + 1
		case stopped:
			if ctx.Err() != nil {
				return Solution{}, ctx.Err()
			}
			if opts.Capacity > 0 && sol.Height > opts.Capacity {
				return Solution{}, fmt.Errorf("%w: none found in %v (the heuristics need %d bytes, the lower bound is %d)", ErrNoPlacement, limit, sol.Height, sol.LowerBound)
			}
			return done()
		}
		if opts.Capacity > 0 {
			break // within the capacity: done
		}
	}
	// Every height below the one found is proven infeasible, or the one
	// found is the lower bound.
	sol.Optimal = sol.Height == sol.LowerBound || opts.Capacity == 0
	return done()
}

// heightOf returns the largest offset + size.
func heightOf(bufs []Buffer, offsets []int64) int64 {
	var h int64
	for i, b := range bufs {
		h = max(h, offsets[i]+b.Size)
	}
	return h
}
