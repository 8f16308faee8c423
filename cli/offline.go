package cli

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpualloc/gpualloc/mincap"
	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

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
// each device's in Devices) and MinCapacityBytes (minCap, see
// [mincap.Search]) of the successful results of out, which are those of
// jobs, on up to workers goroutines.
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
				c, err := mincap.Search(ctx, events[cfg.Trace], cfg, &out[i].Result)
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
