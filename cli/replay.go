package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	"github.com/gpualloc/gpualloc/traces"
)

const replayUsage = `usage: simulate [flags] [TRACE...]

Replays each trace through each strategy on a backend and reports peak
live, allocated and reserved bytes, overhead (peak reserved / lower bound,
the lower bound being the peak of live requested bytes: 1.00x is ideal),
fragmentation and device calls. With no TRACE it replays the bundled sample
traces.

A TRACE is a file in one of four formats, told apart by content: native CSV
(plain or gzip), PyTorch memory snapshots (.pickle), RMM
logging_resource_adaptor logs, MiniMalloc CSV; or - for standard input; or
the name of a bundled trace (dynamic, training, ...; 'simulate inspect'
lists them), unless a file of that name exists: the file wins.

Strategies: every -s spec; else the one the environment chooses
(GPUALLOC_POOL_TYPE, then MXNET_GPU_MEM_POOL_TYPE); else every built-in
strategy. 'simulate strategies' lists them with their parameters.

Backends (-b): sim, a virtual device of --capacity bytes (the default; a
PyTorch snapshot that records an out-of-memory error, replayed without
--capacity, gives each device the memory the error tells: its free bytes
then plus the segments PyTorch held);
host, real host memory, each device allocation an mmap and each free a
munmap, limited to --capacity when the flag is given, else to the
machine's total memory (capacity_bytes reports the limit that held); cuda,
the NVIDIA GPU of each device index of the trace, through the CUDA driver.
On host and cuda the replays also time the allocations and device calls
(alloc_hit_ns_mean, alloc_device_ns_mean, device_call_ns_total), and run
one at a time unless -j says otherwise.

A peak reserved marked * in the table (device_full_allocs > 0 in JSON and
CSV) met the device's capacity: the strategy released its cache or retried
because the device was full, and its figures change with --capacity. The
table's notes, and live_at_end and live_bytes_at_end, say what a trace
left live at its end.

A trace that several strategies replay (a sweep: -s round:cutoff=20..24,
or several -s) is decoded once and held in memory, 48 bytes an event, while
its replays run from memory, in parallel; a trace of more than 16,777,216
events (768 MiB) is not held: each of its replays reads the file.

With -o DIR it also writes a report into DIR: summary.csv and summary.json
(the result schema), timeseries.csv, figures for each trace and across
traces (memory over time, in one plot and in a panel per strategy,
fragmentation over time, peak reserved, the trace, and overhead), and
index.html, which shows them all. --figures, --width, --height, --title
and --log-y shape the figures.
` + snapshotUsage + `
With --shard k/n it runs the k-th of n parts of the replays, the traces
through the strategies taken trace by trace in a fixed order, so that the n
shards of the same command line share the work out exactly; with -o DIR a
shard writes its summaries and what 'simulate merge -o OUT DIR...' needs
to make the report of the whole run.

With --offline each result also gives offline_bytes, the memory of the
offline plan of its trace ('simulate plan': each allocation placed knowing
when it is freed; one plan per device, summed), the same for every strategy
on a trace; the table adds it and VS OFFLINE (peak reserved over it), and the
report's peak and overhead figures draw it beside the lower bound. With
--min-capacity each result gives min_capacity_bytes, the smallest capacity of
each device, a multiple of 1 MiB, on which the strategy replays the trace
without an OOM, checked on both sides by replay: no OOM at it, an OOM 1 MiB
below. It is found by doubling from the peak reserved and bisecting, then
trying eight capacities spread below the answer, for strategies whose OOMs do
not follow the capacity (MXNet's reserve, pools sized from the device): for
those, a smaller capacity without OOM may lie between the points tried.

Commands: inspect, convert, gen, fidelity, plan, strategies, tune, merge ('simulate COMMAND -h').

Flags:
`

// replayFlags are the flags of a replay.
type replayFlags struct {
	strategies []string
	backend    string
	capacity   string
	format     string
	jobs       int
	lenient    bool
	out        string
	figures    figureFlags
	progress   string
	snapshot   snapshotFlags
	shard      string

	offline     bool
	minCapacity bool
	timeLimit   time.Duration
}

func replayCmd(ctx context.Context, e *env, args []string) error {
	var f replayFlags
	fs := newFlagSet(e, "simulate", replayUsage)
	fs.StringArrayVarP(&f.strategies, "strategy", "s", nil, "strategy `SPEC`, as round or round:cutoff=20; a..b, a..b/STEP and x|y|z in values sweep them (repeatable; all = every registered strategy)")
	fs.StringVarP(&f.backend, "backend", "b", "sim", "backend: sim (the virtual device), host (host memory) or cuda (NVIDIA GPUs)")
	fs.StringVar(&f.capacity, "capacity", "80GiB", "virtual device `SIZE` (bytes, or units KiB, MiB, GiB, ... KB, MB, GB, ...); for -b sim; with -b host, a limit, the machine's memory when not given")
	fs.StringVarP(&f.format, "format", "f", "table", "output format: table, csv or json")
	fs.IntVarP(&f.jobs, "jobs", "j", 0, "replays to run at once (default: the number of cores; 1 with -b host or cuda)")
	fs.BoolVar(&f.lenient, "lenient", false, "skip bad events of a trace, count them and go on")
	fs.StringVarP(&f.out, "out", "o", "", "write a report (summaries, time series, figures, index.html) into `DIR`")
	f.figures.add(fs)
	fs.StringVar(&f.progress, "progress", "auto", "progress bar on standard error: auto (when it is a terminal), always or never")
	f.snapshot.register(fs)
	fs.StringVar(&f.shard, "shard", "", "run only the `k/n`-th part of the replays (traces x strategies), 1 <= k <= n; with -o, write it for 'simulate merge'")
	fs.BoolVar(&f.offline, "offline", false, "add offline_bytes: the memory of the offline plan of each trace (simulate plan)")
	fs.BoolVar(&f.minCapacity, "min-capacity", false, "add min_capacity_bytes: the smallest device, in MiB, on which each strategy has no OOM (-b sim)")
	fs.DurationVar(&f.timeLimit, "time-limit", plan.DefaultTimeLimit, "`DURATION` of the offline plan of each trace and device, with --offline")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.minCapacity && f.backend != "sim" {
		return usagef("--min-capacity replays on the virtual device: it needs -b sim")
	}
	if f.timeLimit <= 0 {
		return usagef("--time-limit %v: want a positive duration such as 10s", f.timeLimit)
	}
	if err := checkFormat(f.format); err != nil {
		return err
	}
	opts, err := f.figures.options()
	if err != nil {
		return err
	}
	if err := checkProgress(f.progress); err != nil {
		return err
	}
	capacity, err := gpualloc.ParseSize(f.capacity)
	if err != nil || capacity <= 0 {
		return usagef("--capacity %q: want a positive size such as 80GiB", f.capacity)
	}
	if f.jobs < 0 {
		return usagef("--jobs %d: want a positive number", f.jobs)
	}
	if err := f.snapshot.check(fs); err != nil {
		return err
	}
	be, err := chooseBackend(f.backend, capacity, fs.Changed("capacity"))
	if err != nil {
		return err
	}
	if be.newBackend != nil && !fs.Changed("jobs") {
		// Replays at once on real memory would share it and each other's
		// time.
		f.jobs = 1
	}
	strategies, err := chooseStrategies(f.strategies, e.getenv, capacity, e.stderr)
	if err != nil {
		return err
	}
	inputs, err := traceInputs(fs.Args(), e.stdin, traces.Options{Lenient: f.lenient})
	if err != nil {
		return err
	}
	sh, err := parseShard(f.shard)
	if err != nil {
		return err
	}
	run := runID(f, be.capacity, inputs, strategies)

	// A report needs the series of each replay and the request sizes of
	// each trace, which the first replay of the trace counts.
	series := -1
	if f.out != "" {
		series = 0
	}
	sizes := make([]*report.SizeCounter, len(inputs))
	// The jobs are every trace through every strategy, trace by trace;
	// a shard runs a contiguous part of them.
	lo, hi := 0, len(inputs)*len(strategies)
	if sh.n > 0 {
		lo, hi = sh.jobs(hi)
	}
	shared := false
	var jobs []sim.Job
	for k, in := range inputs {
		first, last := max(lo-k*len(strategies), 0), min(hi-k*len(strategies), len(strategies))
		if first >= last {
			continue
		}
		var d *decoded
		if last-first > 1 {
			shared = true
			d = in.decodeOnce(last-first, f.out != "")
			sizes[k] = d.sizes
		}
		for i := first; i < last; i++ {
			open := in.open
			if d != nil {
				open = d.open
			} else if f.out != "" && i == first {
				open = func() (traces.Reader, io.Closer, error) {
					r, c, err := in.open()
					if err != nil {
						return r, c, err
					}
					sizes[k] = report.NewSizeCounter(r)
					return sizes[k], c, nil
				}
			}
			jobs = append(jobs, sim.Job{
				Open: open,
				Config: sim.Config{
					Trace:         in.name,
					Params:        strategies[i],
					Backend:       f.backend,
					Capacity:      be.capacity,
					NewBackend:    be.newBackend,
					MeasureTime:   be.newBackend != nil,
					SeriesBuckets: series,

					Snapshot:        f.snapshot.writer(in.name, strategies[i]),
					SnapshotEntries: f.snapshot.entries,
				},
			})
		}
	}
	var pr *progress
	if showProgress(f.progress, e.stderr) {
		byBytes := inputs
		if shared || sh.n > 0 {
			// Replays from memory read no bytes, and a shard reads
			// part of them: inputs of unknown size make the bar count
			// events.
			byBytes = make([]*input, len(inputs))
			for i := range byBytes {
				byBytes[i] = &input{size: -1}
			}
		}
		pr = newProgress(e.stderr, byBytes, len(strategies))
		for i := range jobs {
			jobs[i].Config.Progress = pr.job()
		}
	}
	out := sim.RunAll(ctx, jobs, f.jobs)
	if pr != nil {
		pr.finish()
	}
	if f.offline || f.minCapacity {
		if err := addReferences(ctx, inputs, jobs, out, f.offline, f.minCapacity, f.timeLimit, f.jobs); err != nil {
			return err
		}
	}

	var results []sim.Result
	var firstErr error
	for _, o := range out {
		if o.Err != nil {
			if firstErr == nil {
				firstErr = o.Err
			}
			continue
		}
		results = append(results, o.Result)
	}
	if len(results) > 0 {
		if err := writeResults(e.stdout, f.format, results); err != nil {
			return err
		}
	}
	hist := map[string]*report.SizeHistogram{}
	for k, sc := range sizes {
		if sc != nil {
			hist[inputs[k].name] = &sc.Sizes
		}
	}
	if f.out != "" && sh.n > 0 {
		if err := writeShard(f.out, sh, run, lo, len(inputs)*len(strategies), out, hist); err != nil {
			return err
		}
	} else if f.out != "" && len(results) > 0 {
		if _, err := report.Write(f.out, results, withSizes(opts, hist)); err != nil {
			return err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if f.lenient {
		for _, in := range inputs {
			if in.skipped > 0 {
				fmt.Fprintf(e.stderr, "simulate: %s: skipped %s (the first: %s)\n", in.name, plural(in.skipped, "bad event"), in.firstSkip)
			}
		}
	}
	return nil
}

// chooseStrategies resolves the -s specs, or the environment's choice, or
// every registered strategy, and checks that each opens. When the
// environment chose the strategy or set parameters, it says so in one line
// on stderr, since a variable exported long ago changes what is compared.
func chooseStrategies(specs []string, getenv func(string) (string, bool), capacity int64, stderr io.Writer) ([]*gpualloc.Params, error) {
	var chosen []*gpualloc.Params
	seen := map[string]bool{}
	add := func(p *gpualloc.Params) error {
		dev, err := virtual.New(virtual.Options{Capacity: capacity})
		if err != nil {
			return err
		}
		if _, err := p.Open(dev); err != nil {
			return usagef("%v", err)
		}
		if !seen[p.String()] {
			seen[p.String()] = true
			chosen = append(chosen, p)
		}
		return nil
	}
	var names []string
	for _, s := range specs {
		if strings.EqualFold(strings.TrimSpace(s), "all") {
			names = append(names, gpualloc.Names()...)
			continue
		}
		names = append(names, s)
	}
	if len(specs) == 0 {
		names = gpualloc.Names()
		if envSet(getenv, gpualloc.EnvPoolType) || envSet(getenv, gpualloc.EnvMXNetPoolType) {
			names = []string{""} // Select("") takes the environment's strategy
		}
	}
	var notes []string
	for _, s := range names {
		sel, err := gpualloc.Select(s, getenv)
		if err != nil {
			return nil, usagef("%v", err)
		}
		variants, err := sel.Params.Expand()
		if err != nil {
			return nil, usagef("%v", err)
		}
		for _, p := range variants {
			if err := add(p); err != nil {
				return nil, err
			}
		}
		if v, ok := getenv(sel.Source); ok && sel.Source != "spec" && sel.Source != "default" {
			notes = append(notes, fmt.Sprintf("%s=%s chose %s (-s all compares every strategy)", sel.Source, strings.TrimSpace(v), sel.Params.Strategy()))
		}
		for _, kv := range sel.Params.FromEnv() {
			note := kv + " set " + sel.Params.Strategy() + "'s parameters"
			if !slices.Contains(notes, note) {
				notes = append(notes, note)
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(stderr, "simulate: environment: %s\n", strings.Join(notes, "; "))
	}
	return chosen, nil
}

func withSizes(o report.Options, sizes map[string]*report.SizeHistogram) report.Options {
	o.Sizes = sizes
	return o
}

func envSet(getenv func(string) (string, bool), name string) bool {
	v, ok := getenv(name)
	return ok && strings.TrimSpace(v) != ""
}

func writeResults(w io.Writer, format string, results []sim.Result) error {
	results = sim.WithDevices(results)
	switch format {
	case "json":
		return report.WriteJSON(w, results)
	case "csv":
		return report.WriteCSV(w, results)
	}
	return report.SummaryTable(results).Write(w)
}

func checkFormat(f string) error {
	switch f {
	case "table", "csv", "json":
		return nil
	}
	return usagef("--format %q: want table, csv or json", f)
}
