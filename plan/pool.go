package plan

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A pool runs the exact search on several cores at once: one searcher a
// core, each trying its own share of the preorders, all looking for a
// placement within the same height. The first that finds one, or proves
// that none exists, stops the others. The searchers share the problem's
// tables (sections, overlaps) and keep their own state.
type pool struct {
	ss   []*searcher
	halt atomic.Bool
}

// newPool prepares the search of bufs on up to workers cores (at most one a
// preorder), or returns nil when the problem is too large for it (see
// newSearcher).
func newPool(ctx context.Context, bufs []Buffer, workers int) *pool {
	s := newSearcher(ctx, bufs)
	if s == nil {
		return nil
	}
	workers = max(1, min(workers, len(preorders)))
	p := &pool{}
	for w := range workers {
		c := s
		if w > 0 {
			c = s.clone()
		}
		c.halt = &p.halt
		c.mine = nil
		for i := w; i < len(preorders); i += workers {
			c.mine = append(c.mine, i)
		}
		p.ss = append(p.ss, c)
	}
	return p
}

// defaultWorkers is the number of searchers of a pool: the cores Go may
// use.
func defaultWorkers() int { return runtime.GOMAXPROCS(0) }

// solve looks for a placement within height with at most budget nodes a
// round (0: no limit), see searcher.solve. It returns the outcome and, when
// found, the offsets of the placement (owned by the pool until its next
// solve).
func (p *pool) solve(height, budget int64) (outcome, []int64) {
	return p.solveUntil(height, budget, time.Time{})
}

// solveUntil is solve that also gives up (aborted) at until, when it is
// not zero.
func (p *pool) solveUntil(height, budget int64, until time.Time) (outcome, []int64) {
	p.halt.Store(false)
	for _, s := range p.ss {
		s.until, s.late = until, false
	}
	out, offs := p.solveAll(height, budget)
	if out == stopped && p.ss[0].ctx.Err() == nil {
		out = aborted // only late
	}
	return out, offs
}

func (p *pool) solveAll(height, budget int64) (outcome, []int64) {
	if len(p.ss) == 1 {
		s := p.ss[0]
		s.budget = budget
		return s.solve(height), s.sol
	}
	outs := make([]outcome, len(p.ss))
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		winner = -1
	)
	for i, s := range p.ss {
		s.budget = budget
		wg.Go(func() {
			out := s.solve(height)
			outs[i] = out
			if out == found || out == infeasible {
				mu.Lock()
				if winner < 0 {
					winner = i
					p.halt.Store(true)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if winner >= 0 {
		return outs[winner], p.ss[winner].sol
	}
	for _, out := range outs {
		if out == stopped {
			return stopped, nil
		}
	}
	return aborted, nil
}

// clone returns a searcher of the same problem with its own state: the
// tables that no search changes are shared.
func (s *searcher) clone() *searcher {
	c := *s
	n, nsec := len(s.bufs), len(s.floor)
	c.rank = make([]int32, n)
	c.off = make([]int64, n)
	c.minOff = make([]int64, n)
	c.sol = make([]int64, n)
	c.floor = make([]int64, nsec)
	c.total = append([]int64(nil), s.total...)
	c.cuts = append([]int32(nil), s.cuts...)
	c.low = make([]int64, nsec)
	c.full = make([]bool, nsec)
	c.reach = make([]int64, nsec+1)
	c.req = make([]int64, nsec)
	c.totKey = make([]int64, n)
	c.ranks = nil
	c.work, c.maxWork = 0, 0
	c.undoOff, c.undoFloor, c.secOrder, c.eligible, c.scratch = nil, nil, nil, nil, nil
	c.pass = 0
	return &c
}
