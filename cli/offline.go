package cli

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// mib is the step of --min-capacity.
const mib = 1 << 20

// offlineBytes plans the allocations of a trace offline (see simulate
// plan), one problem per device, and returns the height of each device's
// plan, by device index.
func offlineBytes(ctx context.Context, in *input, limit time.Duration) (map[int]int64, error) {
	r, c, err := in.open()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	probs, err := plan.FromTrace(r)
	if err != nil {
		return nil, err
	}
	heights := map[int]int64{}
	for _, p := range probs {
		sol, err := plan.Solve(ctx, p.Problem, plan.Options{TimeLimit: limit})
		if err != nil {
			return nil, fmt.Errorf("%s: offline plan: %w", in.name, err)
		}
		heights[p.Device] = sol.Height
	}
	return heights, nil
}

// addReferences fills the OfflineBytes (offline: the sum over devices, and
// each device's in Devices) and MinCapacityBytes (minCap) of the successful
// results of out, which are those of jobs, on up to workers goroutines.
func addReferences(ctx context.Context, inputs []*input, jobs []sim.Job, out []sim.JobResult, offline, minCap bool, limit time.Duration, workers int) error {
	// The traces of the jobs (a shard runs some of them).
	var used []*input
	for _, in := range inputs {
		if slices.ContainsFunc(jobs, func(j sim.Job) bool { return j.Config.Trace == in.name }) {
			used = append(used, in)
		}
	}
	if offline {
		for _, in := range used {
			heights, err := offlineBytes(ctx, in, limit)
			if err != nil {
				return err
			}
			var sum int64
			for _, h := range heights {
				sum += h
			}
			for i := range out {
				if out[i].Err != nil || jobs[i].Config.Trace != in.name {
					continue
				}
				out[i].Result.OfflineBytes = &sum
				for j := range out[i].Result.Devices {
					d := &out[i].Result.Devices[j]
					if h, ok := heights[d.Device]; ok {
						d.OfflineBytes = &h
					}
				}
			}
		}
	}
	if !minCap {
		return nil
	}
	// Each trace decoded once, replayed from memory.
	events := map[string][]traces.Event{}
	for _, in := range used {
		r, c, err := in.open()
		if err != nil {
			return err
		}
		evs, err := traces.ReadAll(r)
		c.Close()
		if err != nil {
			return err
		}
		events[in.name] = evs
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		firstEr error
		next    = make(chan int)
	)
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	for range workers {
		wg.Go(func() {
			for i := range next {
				cfg := jobs[i].Config
				c, err := minCapacity(ctx, events[cfg.Trace], cfg, out[i].Result)
				mu.Lock()
				if err != nil && firstEr == nil {
					firstEr = err
				}
				if err == nil {
					out[i].Result.MinCapacityBytes = &c
				}
				mu.Unlock()
			}
		})
	}
	for i := range out {
		if out[i].Err == nil {
			next <- i
		}
	}
	close(next)
	wg.Wait()
	return firstEr
}

// minCapacity returns the smallest capacity of each device, a multiple of 1
// MiB, on which a replay of events as cfg says (its Capacity aside) has no
// OOM, with an OOM 1 MiB below; res is the replay at cfg.Capacity.
//
// Below a device's peak of live requested bytes every strategy fails, so the
// search starts there: it doubles from the peak reserved at cfg.Capacity
// (rounded up to 1 MiB) until a replay has no OOM, bisects between the
// highest capacity known to fail and that one, and then tries eight
// capacities spread evenly below the answer: a strategy whose OOMs do not
// follow the capacity (one that sizes its pool or releases its cache from
// the device's size, as MXNet's reserve does) may fit on one of them, and
// then the bisection goes on below it. The answer is always checked on
// both sides, by replay: no OOM at it, and an OOM 1 MiB below or a
// capacity below the lower bound. A smaller capacity without OOM may still
// exist for such a strategy, between the points tried.
func minCapacity(ctx context.Context, events []traces.Event, cfg sim.Config, res sim.Result) (int64, error) {
	cfg.SeriesBuckets = -1
	cfg.Progress = nil
	fits := func(c int64) (bool, error) {
		cfg.Capacity = c
		r, err := sim.ReplayContext(ctx, traces.NewSliceReader(cfg.Trace, events), cfg)
		if err != nil {
			return false, err
		}
		return r.OOMs == 0, nil
	}
	// Each device has the capacity: the lower bound is the largest of the
	// devices' peaks of live requested bytes.
	var need int64
	for _, d := range res.Devices {
		need = max(need, d.PeakRequestedBytes)
	}
	// fail is a capacity known to fail: below the lower bound, or tried.
	fail := (need+mib-1)/mib*mib - mib
	if fail < 0 {
		fail = 0
	}
	ok := max((res.PeakReservedBytes+mib-1)/mib*mib, fail+mib)
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
			return 0, fmt.Errorf("%s: %s: OOM even on a device of %d bytes", cfg.Trace, cfg.Params.Strategy(), ok)
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
		return 0, fmt.Errorf("%s: %s: min capacity %d does not hold on a second replay (err %v)", cfg.Trace, cfg.Params.Strategy(), ok, err)
	}
	if ok-mib >= need {
		if f, err := fits(ok - mib); err != nil || f {
			return 0, fmt.Errorf("%s: %s: min capacity %d: no OOM 1 MiB below (err %v)", cfg.Trace, cfg.Params.Strategy(), ok, err)
		}
	}
	return ok, nil
}
