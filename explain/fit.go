package explain

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/mincap"
	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/tune"
)

// mib is the step of the smallest device, which package mincap searches.
const mib = 1 << 20

// rows returns the allocators that Explain replays besides the one the
// trace ran with: PyTorch's defaults and expandable segments (unless that
// is how it ran), then every registered strategy but pytorch and planned
// (an allocator told the trace's lifetimes in advance, as the offline
// plan is), each with its defaults.
func (x *explainer) rows() ([]Alternative, error) {
	asRan := sim.StrategyOf(x.o.Strategy)
	out := []Alternative{{Label: "as run", params: x.o.Strategy}}
	conf, isPytorch := pytorchConf(asRan)
	if x.t.Format == snapshotFormat && x.o.Strategy == x.recorded {
		out[0].Label = "as recorded"
	}
	add := func(label, conf string) error {
		p, err := pytorchParams(conf)
		if err != nil {
			return err
		}
		out = append(out, Alternative{Label: label, params: p, written: gpualloc.Spec{Name: "pytorch", Params: []gpualloc.KeyValue{{Key: "conf", Value: conf}}}})
		return nil
	}
	if !isPytorch || conf != "" {
		if err := add("PyTorch defaults", ""); err != nil {
			return nil, err
		}
	}
	if !isPytorch || !strings.Contains(conf, "expandable_segments:True") {
		if err := add("expandable segments", "expandable_segments:True"); err != nil {
			return nil, err
		}
	}
	for _, name := range gpualloc.Names() {
		if name == "pytorch" || name == "planned" || (!isPytorch && name == asRan.Name && len(x.o.Strategy.Spec().Params) == 0) {
			continue
		}
		sp := gpualloc.Spec{Name: name}
		p, err := gpualloc.Resolve(sp, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, Alternative{Label: name, params: p, written: sp})
	}
	for i := range out {
		st := sim.StrategyOf(out[i].params)
		out[i].Spec = st.Spec
		if out[i].written.Name == "" {
			out[i].written = out[i].params.Spec()
		}
		out[i].Suggestion = suggestion(out[i].written, st, snapshot.NPUConf(conf))
	}
	return out, nil
}

// pytorchConf returns the conf of a pytorch strategy ("" for PyTorch's
// defaults), and false for another strategy.
func pytorchConf(st sim.Strategy) (string, bool) {
	if st.Name != "pytorch" {
		return "", false
	}
	for _, p := range st.Params {
		if p.Key == "conf" && p.Value != "none" {
			return p.Value, true
		}
	}
	return "", true
}

// suggestion returns the line that selects the strategy written sp, whose
// full spec is st: for the pytorch strategy (torch_npu's when npu: the
// settings the trace ran with are torch_npu's, and so the allocator the
// rows of PyTorch's settings replay on, see sim.Config's Params), the
// variable the allocator modelled reads, with the settings PyTorch parses (pytorch.Paste),
// else the simulator's, with the spec as written (the defaults left out).
func suggestion(sp gpualloc.Spec, st sim.Strategy, npu bool) string {
	if conf, ok := pytorchConf(st); ok {
		if npu && !snapshot.NPUConf(conf) {
			conf = strings.TrimPrefix(conf+",device:npu", ",")
		}
		only := true
		for _, kv := range sp.Params {
			if kv.Key != "conf" {
				only = false
			}
		}
		if only {
			return pytorch.Paste(conf)
		}
	}
	return gpualloc.EnvPoolType + "=" + sp.String()
}

// alternatives replays the rows on every device and fills each report's
// Alternatives and OfflineBytes; full is the replay as the trace ran.
// What rctx's end leaves undone is marked TimedOut; ctx's end is an error.
func (x *explainer) alternatives(ctx, rctx context.Context, reps []Report, full *sim.Result) error {
	rows, err := x.rows()
	if err != nil {
		return err
	}
	workers := x.o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	// The replays at each device's capacity; the first row is full.
	results := make([]*sim.Result, len(rows))
	results[0] = full
	var jobs []sim.Job
	for _, r := range rows[1:] {
		jobs = append(jobs, sim.Job{
			Open: func() (traces.Reader, io.Closer, error) {
				return x.reader(x.ev.Len(), x.capOf), nil, nil
			},
			Config: sim.Config{Trace: x.t.Name, Params: r.params, SeriesBuckets: -1},
		})
	}
	startFails := make([]bool, len(rows))
	var outs []sim.JobResult
	if rctx.Err() == nil {
		outs = sim.RunAll(rctx, jobs, workers)
	}
	for i, o := range outs {
		switch {
		case o.Err == nil:
			results[i+1] = &o.Result
		case ctx.Err() != nil:
			return ctx.Err()
		case rctx.Err() != nil:
		case isOutOfMemory(o.Err):
			startFails[i+1] = true
		default:
			return o.Err
		}
	}
	for k := range reps {
		d := reps[k].Device
		reps[k].Alternatives = make([]Alternative, len(rows), len(rows)+2)
		for i, r := range rows {
			a := r
			a.from = results[i]
			switch {
			case results[i] != nil:
				dr := deviceOf(results[i], d)
				peak, fits := dr.PeakReservedBytes, dr.OOMs == 0
				a.PeakReservedBytes, a.Fits = &peak, &fits
			case startFails[i]:
				fits := false
				a.Fits = &fits
			default:
				a.TimedOut = true
			}
			reps[k].Alternatives[i] = a
		}
	}

	// The best of PyTorch's settings that tune finds for each device of a
	// PyTorch run, ranked by that device's own figures (tune.Options.Device),
	// the devices sharing a third of the time left.
	if _, isPytorch := pytorchConf(sim.StrategyOf(x.o.Strategy)); isPytorch {
		var end time.Time
		if dl, ok := rctx.Deadline(); ok {
			end = time.Now().Add(time.Until(dl) / 3)
		}
		for k := range reps {
			budget := time.Duration(0)
			if !end.IsZero() {
				budget = time.Until(end) / time.Duration(len(reps)-k)
			}
			a, err := x.tuned(ctx, rctx, reps[k].Device, budget)
			if err != nil {
				return err
			}
			reps[k].Alternatives = append(reps[k].Alternatives, a)
		}
	}

	// The offline plan of each device, in a third of the time left.
	if err := x.offline(ctx, rctx, reps); err != nil {
		return err
	}

	// The smallest device of each row on each device.
	type task struct{ rep, row int }
	tasks := make(chan task)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for t := range tasks {
				rep := &reps[t.rep]
				a := &rep.Alternatives[t.row]
				c, err := x.minCapacity(rctx, a.params, rep.Device, a.from)
				mu.Lock()
				switch {
				case err == nil:
					a.MinCapacityBytes = &c
				case ctx.Err() != nil || rctx.Err() != nil:
					a.TimedOut = true
				case first == nil:
					first = err
				}
				mu.Unlock()
			}
		})
	}
	for k := range reps {
		for i, a := range reps[k].Alternatives {
			if a.TimedOut || a.params == nil {
				continue
			}
			tasks <- task{k, i}
		}
	}
	close(tasks)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return first
}

// tuned runs tune's search of PyTorch's settings for device d, ranked by
// d's figures alone, every device on its own capacity, within budget, and
// returns its best as a row filled from d's figures in its replay; a row
// TimedOut when the time runs out first.
func (x *explainer) tuned(ctx, rctx context.Context, d int, budget time.Duration) (Alternative, error) {
	a := Alternative{Label: "tune's best"}
	if budget <= 0 {
		a.TimedOut = true
		return a, nil
	}
	tctx, cancel := context.WithTimeout(rctx, budget)
	defer cancel()
	rep, err := tune.Run(tctx, x.t.Name, nil, tune.Options{Memory: capFunc(x.capOf), Device: &d, Workers: x.o.Workers, Start: x.t.Start, Events: x.all})
	switch {
	case err != nil && ctx.Err() != nil:
		return a, ctx.Err()
	case err != nil && tctx.Err() != nil:
		a.TimedOut = true
		return a, nil
	case err != nil:
		return a, err
	}
	sp := tune.Spec(rep.Best.Setting, 0)
	sp.Params = append(sp.Params, rep.Allocator...) // the allocator tune replayed: torch_npu's for its snapshots
	if a.params, err = gpualloc.Resolve(sp, nil); err != nil {
		return a, err
	}
	a.written = sp
	st := sim.StrategyOf(a.params)
	a.Spec, a.Suggestion = st.Spec, rep.Line(rep.Best.Setting)
	res := rep.Best.Result
	a.from = &res
	dr := deviceOf(&res, d)
	peak, fits := dr.PeakReservedBytes, dr.OOMs == 0
	a.PeakReservedBytes, a.Fits = &peak, &fits
	return a, nil
}

// capFunc gives each device the capacity the func returns, as a
// sim.CapacityReporter.
type capFunc func(dev int) int64

// DeviceCapacity returns f(dev).
func (f capFunc) DeviceCapacity(dev int) int64 { return f(dev) }

// offline plans each device's allocations with package plan, its
// heuristics and then its exact search, the devices sharing a third of the
// time rctx leaves, and adds the plan to each report, as OfflineBytes,
// OfflineProvenBytes and the last row. A row whose search ran out of time
// before it proved its plan the lowest is TimedOut, with the best plan
// found; one whose time ran out before any plan, or before the first of
// plan's heuristics ended (its quick stack placement is no plan to show),
// TimedOut without.
func (x *explainer) offline(ctx, rctx context.Context, reps []Report) error {
	budget := time.Second
	if dl, ok := rctx.Deadline(); ok {
		budget = time.Until(dl) / 3
	}
	end := time.Now().Add(budget)
	pctx, cancel := context.WithDeadline(rctx, end)
	defer cancel()
	probs, err := plan.FromTraceContext(pctx, x.reader(x.ev.Len(), x.capOf))
	sols := map[int]plan.Solution{}
	outOfTime := map[int]bool{}
	if err == nil {
		for i, p := range probs {
			// Solve keeps to its limit (plus a tenth for its first
			// heuristic) and returns the best plan found then; it is given
			// rctx, not pctx, so that the end of this share does not take
			// that plan away.
			left := time.Until(end) / time.Duration(len(probs)-i) * 10 / 11
			if left <= 0 {
				break
			}
			sol, err := plan.Solve(rctx, p.Problem, plan.Options{TimeLimit: left, Workers: x.o.Workers})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if rctx.Err() != nil {
					break
				}
				return fmt.Errorf("%s: offline plan: %w", x.t.Name, err)
			}
			if sol.Method == "time/stack" {
				// The quick placement Solve gives when even its first
				// heuristic ran out of time: far above any allocator's
				// peak, it is no plan to show.
				continue
			}
			sols[p.Device] = sol
			outOfTime[p.Device] = !sol.Optimal && sol.Elapsed >= left
		}
	} else if ctx.Err() != nil {
		return ctx.Err()
	} else if pctx.Err() == nil {
		return err
	}
	for k := range reps {
		d := reps[k].Device
		a := Alternative{Label: "offline plan", Spec: "offline"}
		if sol, ok := sols[d]; ok {
			h, proven := sol.Height, sol.ProvenBound
			fits := h <= reps[k].CapacityBytes
			need := (h + mib - 1) / mib * mib
			a.PeakReservedBytes, a.Fits, a.MinCapacityBytes = &h, &fits, &need
			a.TimedOut = outOfTime[d]
			reps[k].OfflineBytes, reps[k].OfflineProvenBytes = &h, &proven
		} else {
			a.TimedOut = true
		}
		reps[k].Alternatives = append(reps[k].Alternatives, a)
	}
	return nil
}

// minCapacity returns the smallest capacity of device d, a multiple of 1
// MiB, on which a replay of the trace with p has no OOM on d, with one
// 1 MiB below (or below the device's peak of live bytes, where every
// allocator fails); from is a replay at the device's capacity, nil when
// the recorded start did not fit it. The other devices keep their
// capacities. It is package mincap's search of one device, from the
// trace's recorded start state and settings, the bisection alone: a
// strategy whose failures do not follow the capacity may fit some
// smaller device between the points tried.
func (x *explainer) minCapacity(ctx context.Context, p *gpualloc.Params, d int, from *sim.Result) (int64, error) {
	cfg := sim.Config{Trace: x.t.Name, Params: p, Start: x.t.Start}
	return mincap.SearchDevice(ctx, nil, cfg, d, mincap.Options{Caps: x.capOf, From: from, BisectOnly: true, Events: x.all})
}

// all returns a reader of every event of the trace.
func (x *explainer) all() traces.BatchReader { return x.ev.Reader(x.t.Name, x.ev.Len()) }
