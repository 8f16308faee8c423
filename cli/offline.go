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

	"github.com/gpualloc/gpualloc/backend/virtual"
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
// and each device's in Devices) and MinCapacityBytes (o.minCap: every
// device of one capacity, see [mincap.Search], and each device's own in
// Devices, see [mincap.SearchDevice]) of the successful results of out,
// which are those of jobs, on up to o.workers goroutines. A reference whose time limit runs
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
	// Each trace decoded once, within the limit, replayed from memory from
	// the state it starts from, with its recorded settings, as the replays
	// of jobs are.
	held := map[string]heldTrace{}
	for _, in := range used {
		h, err := readEventsWithin(ctx, in, o.limit)
		if errors.Is(err, errOutOfTime) {
			fmt.Fprintf(o.notes, "simulate: %s: min capacity: the time limit %v ran out while reading the trace; min_capacity_bytes left out (give a longer --time-limit)\n", in.name, o.limit)
			continue
		}
		if err != nil {
			return err
		}
		held[in.name] = h
	}
	// A search for each result, every device of one capacity, as simulate
	// --capacity gives them; and, for a trace of several devices, one for
	// each device, the others at the capacity the replay gave them: each
	// device's own minimum, never a sum.
	type task struct {
		i, dev int // dev < 0: every device
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		firstEr error
		next    = make(chan task)
	)
	workers := o.workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	for range workers {
		wg.Go(func() {
			for t := range next {
				cfg := jobs[t.i].Config
				h := held[cfg.Trace]
				if cfg.Start == nil {
					cfg.Start = h.start
				}
				from := &out[t.i].Result
				sctx, cancel := context.WithTimeout(ctx, o.limit)
				var (
					c   int64
					err error
				)
				if t.dev < 0 {
					c, err = mincap.Search(sctx, h.events, cfg, from)
				} else {
					caps := func(d int) int64 { return h.capacity(cfg, d) }
					c, err = mincap.SearchDevice(sctx, h.events, cfg, t.dev, mincap.Options{Caps: caps, From: from})
				}
				outOfTime := sctx.Err() != nil
				cancel()
				where := ""
				if t.dev >= 0 {
					where = fmt.Sprintf(" device %d:", t.dev)
				}
				mu.Lock()
				switch {
				case err != nil && ctx.Err() == nil && outOfTime:
					fmt.Fprintf(o.notes, "simulate: %s: %s:%s min capacity: not found within the time limit %v; min_capacity_bytes left out (give a longer --time-limit)\n", cfg.Trace, from.Strategy.Spec, where, o.limit)
				case err != nil:
					if firstEr == nil {
						firstEr = err
					}
				case t.dev < 0:
					from.MinCapacityBytes = &c
					if len(from.Devices) == 1 {
						// One device: its figure is the trace's.
						d := c
						from.Devices[0].MinCapacityBytes = &d
					}
				default:
					for j := range from.Devices {
						if from.Devices[j].Device == t.dev {
							from.Devices[j].MinCapacityBytes = &c
						}
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := range out {
		if out[i].Err != nil {
			continue
		}
		if h, ok := held[jobs[i].Config.Trace]; !ok || len(h.events) == 0 {
			continue // out of time, or no event: no device to size
		}
		next <- task{i, -1}
		if devs := out[i].Result.Devices; len(devs) > 1 {
			for _, d := range devs {
				next <- task{i, d.Device}
			}
		}
	}
	close(next)
	wg.Wait()
	return firstEr
}

// A heldTrace is a trace decoded into memory, with what its reader
// reports besides its events: the recorded state it starts from, with the
// recorded settings, and its devices' memory, which a replay of the
// events alone would not know.
type heldTrace struct {
	events []traces.Event
	start  *traces.Start
	memory sim.CapacityReporter // nil when the reader knows none
}

// capacity returns the capacity of device d in a replay of the trace as
// cfg says: cfg.Capacity, else the device's memory as the trace records
// it, else virtual.DefaultCapacity (see sim.Config.Capacity).
func (h heldTrace) capacity(cfg sim.Config, d int) int64 {
	if cfg.Capacity > 0 {
		return cfg.Capacity
	}
	if h.memory != nil {
		if c := h.memory.DeviceCapacity(d); c > 0 {
			return c
		}
	}
	return virtual.DefaultCapacity
}

// readEventsWithin decodes the events of in, with its start state and its
// devices' memory, or returns errOutOfTime when limit passes first.
func readEventsWithin(ctx context.Context, in *input, limit time.Duration) (heldTrace, error) {
	return within(ctx, time.Now().Add(limit), func(context.Context) (heldTrace, error) {
		r, c, err := in.open()
		if err != nil {
			return heldTrace{}, err
		}
		defer c.Close()
		evs, err := traces.ReadAll(r)
		if err != nil {
			return heldTrace{}, err
		}
		h := heldTrace{events: evs, start: traces.StartOf(r)}
		h.memory, _ = r.(sim.CapacityReporter)
		return h, nil
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
