// Package mincap finds the smallest device on which a strategy replays a
// trace without an allocation failing for want of memory: the figure
// behind simulate --min-capacity (min_capacity_bytes), a strategy's true
// footprint on a trace, as the offline plan (package plan) is the footprint
// of an allocator that knows the future. It sits above sim, whose replays
// it drives, beside package tune.
package mincap

import (
	"context"
	"fmt"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// mib is the step of the search: capacities are whole MiB.
const mib = 1 << 20

// Search returns the smallest capacity, a multiple of 1 MiB, that every
// device may have for a replay of events as cfg says (its Capacity aside)
// to have no OOM, with an OOM 1 MiB below. from is a replay of events as
// cfg says, at cfg.Capacity, whose peaks start the search; nil, Search makes
// it first, with one replay more.
//
// Policy. Below a device's peak of live requested bytes every strategy
// fails, so the search starts there: it doubles from the peak reserved of
// from (rounded up to 1 MiB) until a replay has no OOM, bisects between
// the highest capacity known to fail and that one, and then tries eight
// capacities spread evenly below the answer: a strategy whose OOMs do not
// follow the capacity (one that sizes its pool or releases its cache from
// the device's size, as MXNet's reserve does) may fit on one of them, and
// then the bisection goes on below it. The answer is always checked on
// both sides, by replay: no OOM at it, and an OOM 1 MiB below or a
// capacity below the lower bound. A smaller capacity without OOM may still
// exist for such a strategy, between the points tried. Search gives up
// with an error when a replay fails, or when the strategy has an OOM even
// on a device of 2^50 bytes.
//
// Cost. Every step is a whole replay of events from memory, without a time
// series, one after the other: for a strategy whose OOMs follow the
// capacity, with R the peak reserved of from and P the peak requested, one
// replay to fit (more if R does not), about log2((R-P)/1 MiB) to bisect,
// up to eight probes and two checks; a probe that fits adds a bisection
// and eight probes more. Memory is that of one replay; events are read in
// place, not copied. ctx stops it between replays, and within one every
// sim.ProgressInterval events. The search's replays record no snapshot
// and keep no time series, whatever cfg asks.
func Search(ctx context.Context, events []traces.Event, cfg sim.Config, from *sim.Result) (int64, error) {
	cfg.SeriesBuckets = -1
	cfg.Progress = nil
	cfg.Snapshot = nil // a probe's replay is no export: the caller's stays the one it asked for
	replay := func() (sim.Result, error) {
		return sim.ReplayContext(ctx, traces.NewSliceReader(cfg.Trace, events), cfg)
	}
	if from == nil {
		r, err := replay()
		if err != nil {
			return 0, err
		}
		from = &r
	}
	name := cfg.Strategy
	if cfg.Params != nil {
		name = cfg.Params.Strategy()
	}
	fits := func(c int64) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		cfg.Capacity = c
		r, err := replay()
		if err != nil {
			return false, err
		}
		return r.OOMs == 0, nil
	}
	// Each device has the capacity: the lower bound is the largest of the
	// devices' peaks of live requested bytes.
	var need int64
	for _, d := range from.Devices {
		need = max(need, d.PeakRequestedBytes)
	}
	// fail is a capacity known to fail: below the lower bound, or tried.
	fail := (need+mib-1)/mib*mib - mib
	if fail < 0 {
		fail = 0
	}
	ok := max((from.PeakReservedBytes+mib-1)/mib*mib, fail+mib)
	for {
		f, err := fits(ok)
		if err != nil {
			return 0, err
		}
		if f {
			break
		}
		fail = ok
		if ok > 1<<50 {
			return 0, fmt.Errorf("%s: %s: OOM even on a device of %d bytes", cfg.Trace, name, ok)
		}
		ok *= 2
	}
	bisect := func() error {
		for ok-fail > mib {
			mid := fail + (ok-fail)/mib/2*mib
			f, err := fits(mid)
			if err != nil {
				return err
			}
			if f {
				ok = mid
			} else {
				fail = mid
			}
		}
		return nil
	}
	if err := bisect(); err != nil {
		return 0, err
	}
	// Probes below the answer, for strategies not monotone in capacity.
	lower := (need + mib - 1) / mib * mib
	for again := true; again; {
		again = false
		prevFail := lower - mib
		for k := int64(1); k <= 8 && ok-lower > 2*mib; k++ {
			c := lower + (ok-lower)*k/9/mib*mib
			if c <= prevFail || c >= ok-mib {
				continue
			}
			f, err := fits(c)
			if err != nil {
				return 0, err
			}
			if !f {
				prevFail = c
				continue
			}
			ok, fail, again = c, prevFail, true
			if err := bisect(); err != nil {
				return 0, err
			}
			break
		}
	}
	// Both sides.
	if f, err := fits(ok); err != nil || !f {
		return 0, fmt.Errorf("%s: %s: min capacity %d does not hold on a second replay (err %v)", cfg.Trace, name, ok, err)
	}
	if ok-mib >= need {
		if f, err := fits(ok - mib); err != nil || f {
			return 0, fmt.Errorf("%s: %s: min capacity %d: no OOM 1 MiB below (err %v)", cfg.Trace, name, ok, err)
		}
	}
	return ok, nil
}
