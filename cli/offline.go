package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpualloc/gpualloc/mincap"
	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// refOptions say which references addReferences adds, and how.
type refOptions struct {
	offline, minCap bool
	// limit bounds, for --offline, the reading and the plans of each
	// trace; for --min-capacity, the reading of each trace's events and
	// each search.
	limit   time.Duration
	workers int
	// notes receives a line for each reference left out because its time
	// ran out; progress, if not nil, the progress of the offline plans.
	notes, progress io.Writer
}

// errOutOfTime is a reference whose time limit ran out: it is left out,
// with a note.
var errOutOfTime = errors.New("out of time")

// offlineBytes plans the allocations of a trace offline (see simulate
// plan), one problem per device, and returns the height of each device's
// plan, and the memory the trace records for it (0: none), by device
// index. The reading and the plans together take at most
// limit (the devices share what the reading leaves, as in simulate plan);
// when the reading has not ended by then it returns errOutOfTime.
func offlineBytes(ctx context.Context, in *input, limit time.Duration, progress io.Writer) (heights, memory map[int]int64, err error) {
	pr := newPlanProgress(progress, in.name)
	defer pr.stop()
	deadline := pr.start.Add(limit)
	pr.reading()
	probs, err := within(ctx, deadline, func(rctx context.Context) ([]plan.DeviceProblem, error) {
		r, c, err := in.open()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return plan.FromTraceContext(rctx, r)
	})
	if err != nil {
		return nil, nil, err
	}
	heights, memory = map[int]int64{}, map[int]int64{}
	for i, p := range probs {
		o := plan.Options{TimeLimit: max(time.Until(deadline)/time.Duration(len(probs)-i), time.Millisecond),
			Progress: pr.device(p.Device, len(probs) > 1)}
		sol, err := plan.Solve(ctx, p.Problem, o)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: offline plan: %w", in.name, err)
		}
		heights[p.Device], memory[p.Device] = sol.Height, p.Memory
	}
	return heights, memory, nil
}

// addReferences fills the OfflineBytes (o.offline: the sum over devices,
// and each device's in Devices) and MinCapacityBytes (o.minCap, see
// [mincap.Search]) of the successful results of out, which are those of
// jobs, on up to o.workers goroutines. A reference whose time limit runs
// out is left out, with a note.
func addReferences(ctx context.Context, inputs []*input, jobs []sim.Job, out []sim.JobResult, o refOptions) error {
	// The traces of the jobs (a shard runs some of them).
	var used []*input
	for _, in := range inputs {
		if slices.ContainsFunc(jobs, func(j sim.Job) bool { return j.Config.Trace == in.name }) {
			used = append(used, in)
		}
	}
	if o.offline {
		for _, in := range used {
			heights, memory, err := offlineBytes(ctx, in, o.limit, o.progress)
			if errors.Is(err, errOutOfTime) {
				fmt.Fprintf(o.notes, "simulate: %s: offline plan: the time limit %v ran out while reading the trace; offline_bytes left out (give a longer --time-limit)\n", in.name, o.limit)
				continue
			}
			if err != nil {
				return err
			}
			var sum int64
			for _, h := range heights {
				sum += h
			}
			// The devices' size, as the replays of the trace give it.
			capacity := int64(0)
			if i := slices.IndexFunc(jobs, func(j sim.Job) bool { return j.Config.Trace == in.name }); i >= 0 {
				capacity = jobs[i].Config.Capacity
			}
			for _, dev := range slices.Sorted(maps.Keys(heights)) {
				io.WriteString(o.notes, overDevice(in.name, dev, heights[dev], deviceSize(capacity, memory[dev])))
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
	if !o.minCap {
		return nil
	}
	// Each trace decoded once, within the limit, replayed from memory.
	events := map[string][]traces.Event{}
	for _, in := range used {
		evs, err := readEventsWithin(ctx, in, o.limit)
		if errors.Is(err, errOutOfTime) {
			fmt.Fprintf(o.notes, "simulate: %s: min capacity: the time limit %v ran out while reading the trace; min_capacity_bytes left out (give a longer --time-limit)\n", in.name, o.limit)
			continue
		}
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
	workers := o.workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	for range workers {
		wg.Go(func() {
			for i := range next {
				cfg := jobs[i].Config
				sctx, cancel := context.WithTimeout(ctx, o.limit)
				c, err := mincap.Search(sctx, events[cfg.Trace], cfg, &out[i].Result)
				cancel()
				mu.Lock()
				switch {
				case err != nil && ctx.Err() == nil && sctx.Err() != nil:
					fmt.Fprintf(o.notes, "simulate: %s: %s: min capacity: not found within the time limit %v; min_capacity_bytes left out (give a longer --time-limit)\n", cfg.Trace, out[i].Result.Strategy.Spec, o.limit)
				case err != nil:
					if firstEr == nil {
						firstEr = err
					}
				default:
					out[i].Result.MinCapacityBytes = &c
				}
				mu.Unlock()
			}
		})
	}
	for i := range out {
		if out[i].Err == nil && events[jobs[i].Config.Trace] != nil {
			next <- i
		}
	}
	close(next)
	wg.Wait()
	return firstEr
}

// readEventsWithin decodes the events of in, or returns errOutOfTime when
// limit passes first.
func readEventsWithin(ctx context.Context, in *input, limit time.Duration) ([]traces.Event, error) {
	return within(ctx, time.Now().Add(limit), func(context.Context) ([]traces.Event, error) {
		r, c, err := in.open()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return traces.ReadAll(r)
	})
}

// within runs read, which should stop when its context ends, and returns
// what it returns, or errOutOfTime when deadline passes first, or ctx's
// error when ctx ends first. A read that does not stop (a format read
// whole when it is opened) is left to end alone, its result dropped.
func within[T any](ctx context.Context, deadline time.Time, read func(ctx context.Context) (T, error)) (T, error) {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := read(rctx)
		done <- result{v, err}
	}()
	var zero T
	select {
	case res := <-done:
		if res.err != nil && ctx.Err() == nil && rctx.Err() != nil {
			return zero, errOutOfTime
		}
		return res.v, res.err
	case <-rctx.Done():
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		return zero, errOutOfTime
	}
}
