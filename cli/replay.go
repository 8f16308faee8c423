package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/devicecost"
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
lists them), unless a file of that name exists: the file wins. Standard
input, a FIFO or a device is read once (given twice, it is refused): what
reads it again (several strategies, --offline, --min-capacity) reads it
from memory, 48 bytes an event, whatever its length.

Strategies: every -s spec (-s all: every built-in strategy); else the one
the environment chooses (GPUALLOC_POOL_TYPE, then MXNET_GPU_MEM_POOL_TYPE);
else every built-in strategy but planned, which needs a profile to differ
from its fallback. 'simulate strategies' lists them with their parameters.

Backends (-b): sim, a virtual device of --capacity bytes (the default; a
PyTorch snapshot that records an out-of-memory error, replayed without
--capacity, gives each device the memory the error tells: its free bytes
then plus the segments PyTorch held);
host, real host memory, each device allocation an mmap and each free a
munmap, limited to --capacity when the flag is given, else to the
machine's total memory (capacity_bytes reports the limit that held); cuda,
the NVIDIA GPU of each device index of the trace, through the CUDA driver;
pinned, page-locked host memory from the CUDA driver (cuMemAllocHost, the
memory PyTorch's pinned-memory pool holds), limited as host is. On host,
cuda and pinned the replays also time the allocations and device calls
(alloc_hit_ns_mean, alloc_device_ns_mean, device_call_ns_total), and run
one at a time unless -j says otherwise. On every backend a replay also
estimates the time its device calls would take on an NVIDIA H200,
device_time_ns_est in JSON and CSV (--device-costs FILE: another GPU's; a
cost above 1e12 ns, 1000 s for one call, is refused, and an estimate past
what an int64 holds saturates at 9223372036854775807).

A peak reserved marked * in the table (device_full_allocs > 0 in JSON and
CSV) met the device's capacity: the strategy released its cache or retried
because the device was full, and its figures change with --capacity. The
table's notes, and live_at_end and live_bytes_at_end, say what a trace
left live at its end.

A trace that several strategies replay (a sweep: -s round:cutoff=20..24,
or several -s) is decoded once and held in memory, 48 bytes an event, while
its replays run from memory, in parallel; a trace of more than 16,777,216
events (768 MiB) is not held whole: the replays that run at once share one
decoding of it and hold a window of 48 MiB beyond what the slowest has read
(a replay that starts after the others have moved on decodes it again).
A sweep has at most 4096 variants, checked before any is made. A variant
of a sweep that refuses a setting it shares with the others (a release of
PyTorch that does not have a setting given to every release swept) is not
replayed: its row says refused and why (a note under the table; refused in
JSON and CSV, its figures zero), as a variant that runs out of memory has
its row of OOMs, and the exit status stays 0 unless every variant refuses.
A value of the sweep that the parameter does not take is bad usage.

With -o DIR it also writes a report into DIR: summary.csv and summary.json
(the result schema), timeseries.csv, figures for each trace and across
traces (memory over time, in one plot and in a panel per strategy,
fragmentation over time, peak reserved, the trace, and overhead), and
index.html, which shows them all. --figures, --width, --height, --title
and --log-y shape the figures. The report is written whole, and not at all
when a replay fails; a DIR that holds a report already is refused before
any replay unless --force, which replaces that report's files.
` + snapshotUsage + parquetUsage + `
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
below. The replays are those of --capacity: from the state a snapshot starts
from, with the allocator settings it records. On a trace of several devices
each device's row gives that device's own, the others at the replay's
capacity; the devices are never added up. It is found by doubling from the peak reserved and bisecting, then
trying eight capacities spread below the answer, for strategies whose OOMs do
not follow the capacity (MXNet's reserve, pools sized from the device): for
those, a smaller capacity without OOM may lie between the points tried.
--time-limit bounds each trace's offline plan, its reading included, and
each min capacity search; a figure whose time runs out is left out, with a
note on standard error.

Commands: inspect, convert, gen, fidelity, plan, strategies, tune, merge, explain, diff ('simulate COMMAND -h' or 'simulate help COMMAND').

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
	pools      bool // --private-pools
	out        string
	force      bool
	figures    figureFlags
	progress   string
	snapshot   snapshotFlags
	parquet    string // --parquet FILE
	shard      string
	costs      string            // --device-costs
	costModel  *devicecost.Model // its table, nil for the default

	offline     bool
	minCapacity bool
	timeLimit   time.Duration

	// What parseReplayFlags makes of them: --capacity in bytes, whether
	// --capacity and --jobs were given, the figures' options, and the
	// TRACE arguments.
	capacityBytes        int64
	capacitySet, jobsSet bool
	opts                 report.Options
	traces               []string
}

// replayCmd replays each trace through each strategy and reports what the
// replays measured.
func replayCmd(ctx context.Context, e *env, args []string) error {
	f, err := parseReplayFlags(e, args)
	if err != nil {
		return err
	}
	p, err := planReplay(ctx, e, f)
	if err != nil {
		return err
	}
	if p.events != nil {
		defer p.events.remove()
	}
	out := p.run(ctx, e.stderr)
	if ctx.Err() != nil {
		return context.Cause(ctx) // nothing written: the results are partial
	}
	noteRecordedSettings(e.stderr, out)
	noteRelease(e.stderr, out)
	p.noteEnvConfAuto(e.stderr, out)
	if f.offline || f.minCapacity {
		o := refOptions{offline: f.offline, minCap: f.minCapacity, limit: f.timeLimit, workers: f.jobs, notes: e.stderr}
		if showProgress(f.progress, e.stderr) {
			o.progress = e.stderr
		}
		if err := addReferences(ctx, p.inputs, p.jobs, out, o); err != nil {
			return err
		}
	}
	return p.write(ctx, e, out)
}

// parseReplayFlags parses a replay's command line and checks every flag on
// its own; a bad one is a usage error.
func parseReplayFlags(e *env, args []string) (replayFlags, error) {
	var f replayFlags
	fs := newFlagSet(e, "simulate", replayUsage)
	fs.StringArrayVarP(&f.strategies, "strategy", "s", nil, "strategy `SPEC`, as round or round:cutoff=20; a..b, a..b/STEP and x|y|z in values sweep them (repeatable; all = every registered strategy)")
	fs.StringVarP(&f.backend, "backend", "b", "sim", "backend: sim (the virtual device), host (host memory), cuda (NVIDIA GPUs) or pinned (page-locked host memory)")
	fs.StringVar(&f.capacity, "capacity", "80GiB", "virtual device `SIZE` (bytes, or units KiB, MiB, GiB, ... KB, MB, GB, ...); for -b sim; with -b host or pinned, a limit, the machine's memory when not given")
	fs.StringVarP(&f.format, "format", "f", "table", "output format: table, csv or json")
	fs.IntVarP(&f.jobs, "jobs", "j", 0, "replays to run at once (default: the number of cores; 1 with -b host or cuda)")
	fs.BoolVar(&f.lenient, "lenient", false, "skip bad events of a trace, count them and go on")
	fs.BoolVar(&f.pools, "private-pools", false, "let a strategy that has private pools (pytorch) serve a snapshot's private pools (CUDA graphs) by its own rules, instead of holding their segments as recorded")
	fs.StringVarP(&f.out, "out", "o", "", "write a report (summaries, time series, figures, index.html) into `DIR`")
	fs.BoolVar(&f.force, "force", false, "with -o, replace the report that DIR holds already")
	f.figures.add(fs)
	fs.StringVar(&f.progress, "progress", "auto", "progress bar on standard error: auto (when it is a terminal), always or never")
	f.snapshot.register(fs)
	fs.StringVar(&f.parquet, "parquet", "", "also write every replayed event, with the memory of its device after it, into `FILE` (Parquet; see above)")
	addTempDir(fs, e)
	fs.StringVar(&f.shard, "shard", "", "run only the `k/n`-th part of the replays (traces x strategies), 1 <= k <= n; with -o, write it for 'simulate merge'")
	fs.BoolVar(&f.offline, "offline", false, "add offline_bytes: the memory of the offline plan of each trace (simulate plan)")
	fs.BoolVar(&f.minCapacity, "min-capacity", false, "add min_capacity_bytes: the smallest device, in MiB, on which each strategy has no OOM (-b sim)")
	fs.StringVar(&f.costs, "device-costs", "", "estimate device_time_ns_est by the device-call costs in `FILE` (a table that go test ./backend/cuda -bench DeviceCalls writes; default: an NVIDIA H200's)")
	fs.DurationVar(&f.timeLimit, "time-limit", plan.DefaultTimeLimit, "`DURATION` of each trace's offline plan (--offline: reading it and planning its devices) and of each --min-capacity search")
	if err := parseFlags(fs, args); err != nil {
		return f, err
	}
	if f.minCapacity && f.backend != "sim" {
		return f, usagef("--min-capacity replays on the virtual device: it needs -b sim")
	}
	if f.timeLimit <= 0 {
		return f, usagef("--time-limit %v: want a positive duration such as 10s", f.timeLimit)
	}
	if err := checkFormat(f.format); err != nil {
		return f, err
	}
	var err error
	if f.opts, err = f.figures.options(); err != nil {
		return f, err
	}
	if err := checkProgress(f.progress); err != nil {
		return f, err
	}
	if f.capacityBytes, err = parseSizeFlag("--capacity", f.capacity); err != nil {
		return f, err
	}
	if f.jobs < 0 {
		return f, usagef("--jobs %d: want a positive number", f.jobs)
	}
	if err := f.snapshot.check(fs); err != nil {
		return f, err
	}
	if fs.Changed("parquet") && (f.parquet == "" || f.parquet == "-") {
		return f, usagef("--parquet %q: want a file (standard output carries the table)", f.parquet)
	}
	f.capacitySet, f.jobsSet, f.traces = fs.Changed("capacity"), fs.Changed("jobs"), fs.Args()
	if f.costs != "" {
		if f.costModel, err = readCosts(f.costs); err != nil {
			return f, err
		}
	}
	return f, nil
}

// A replayPlan is the work of a replay command: the backend, the
// strategies and the traces it names, and the jobs that replay the traces
// through the strategies (those of its shard, with --shard).
type replayPlan struct {
	f          replayFlags
	be         backendChoice
	strategies []*gpualloc.Params
	chosen     *chosenStrategies // the strategies, with those that refused their parameters: not replayed
	inputs     []*input
	shard      shard
	id         string // the run's identity (runID), which its shards share

	// The jobs are every trace through every strategy, trace by trace:
	// those from lo to hi-1 (a shard runs a contiguous part of them).
	jobs   []sim.Job
	lo, hi int
	// sizes are the request sizes of each input, which the first replay
	// of the trace counts for a report (nil without one).
	sizes []*report.SizeCounter
	// shared says that a trace is decoded once and replayed from memory.
	shared bool
	// events writes --parquet's file, nil without it.
	events *eventsOut
}

// planReplay resolves the backend, the strategies, the traces and the
// shard that f names, and plans the jobs.
func planReplay(ctx context.Context, e *env, f replayFlags) (*replayPlan, error) {
	be, err := chooseBackend(f.backend, f.capacityBytes, f.capacitySet)
	if err != nil {
		return nil, err
	}
	if be.newBackend != nil && !f.jobsSet {
		// Replays at once on real memory would share it and each other's
		// time.
		f.jobs = 1
	}
	chosen, err := chooseStrategies(f.strategies, e.getenv, f.capacityBytes, e.stderr)
	if err != nil {
		return nil, err
	}
	strategies := chosen.all
	// A snapshot of a replay carries the stacks the trace records.
	inputs, err := traceInputs(ctx, f.traces, e.stdin, traces.Options{Lenient: f.lenient, TempDir: e.tempDir, Stacks: f.snapshot.dir != "" || f.parquet != ""})
	if err != nil {
		return nil, err
	}
	if f.offline || f.minCapacity {
		for _, in := range inputs {
			in.holdOnce() // they read the traces again after the replays
		}
	}
	sh, err := parseShard(f.shard)
	if err != nil {
		return nil, err
	}
	if f.out != "" {
		if err := checkOutputDir("-o", f.out, f.force, fileArgs(f.traces)); err != nil {
			return nil, err
		}
	}
	if f.parquet != "" {
		if err := checkOutputFile("--parquet", f.parquet, fileArgs(f.traces)); err != nil {
			return nil, err
		}
	}
	p := &replayPlan{f: f, be: be, strategies: strategies, chosen: chosen, inputs: inputs, shard: sh, id: runID(f, be.capacity, inputs, strategies)}
	p.planJobs()
	if f.parquet != "" {
		p.events = &eventsOut{path: f.parquet, tempDir: e.tempDir}
		for i := range p.jobs {
			p.events.attach(&p.jobs[i])
		}
	}
	return p, nil
}

// planJobs makes the jobs of the plan's part of the run.
func (p *replayPlan) planJobs() {
	n := len(p.strategies)
	p.lo, p.hi = 0, len(p.inputs)*n
	if p.shard.n > 0 {
		p.lo, p.hi = p.shard.jobs(p.hi)
	}
	p.sizes = make([]*report.SizeCounter, len(p.inputs))
	for k, in := range p.inputs {
		first, last := max(p.lo-k*n, 0), min(p.hi-k*n, n)
		if first >= last {
			continue
		}
		part := p.strategies[first:last]
		open := p.opener(k, in, len(part)-p.countRefused(part))
		for _, s := range part {
			job := sim.Job{Open: open, Config: p.config(in.name, s)}
			if err := p.chosen.refused[s]; err != nil {
				job.Open = refusedOpen(err)
			}
			p.jobs = append(p.jobs, job)
		}
	}
}

// opener returns how the replays of input k, of which there are replays,
// open it: a trace that several replay is decoded once, and each replays it
// from memory; for a report, the trace's one replay counts its request
// sizes as it reads it.
func (p *replayPlan) opener(k int, in *input, replays int) func() (traces.Reader, io.Closer, error) {
	switch {
	case in.held:
		// Read into memory once, for every replay and reference: the
		// first replay to open it counts its sizes for a report.
		p.shared = p.shared || replays > 1
		if p.f.out == "" {
			return in.open
		}
		var once sync.Once
		return func() (traces.Reader, io.Closer, error) {
			r, c, err := in.open()
			if err != nil {
				return r, c, err
			}
			once.Do(func() {
				p.sizes[k] = report.NewSizeCounter(r)
				r = p.sizes[k]
			})
			return r, c, nil
		}
	case replays > 1:
		p.shared = true
		d := in.decodeOnce(replays, p.f.out != "")
		p.sizes[k] = d.sizes
		return d.open
	case p.f.out != "":
		return func() (traces.Reader, io.Closer, error) {
			r, c, err := in.open()
			if err != nil {
				return r, c, err
			}
			p.sizes[k] = report.NewSizeCounter(r)
			return p.sizes[k], c, nil
		}
	}
	return in.open
}

// config is the configuration of the replay of trace through strategy s.
func (p *replayPlan) config(trace string, s *gpualloc.Params) sim.Config {
	series := -1
	if p.f.out != "" {
		series = 0 // a report needs the series of each replay
	}
	return sim.Config{
		Trace:         trace,
		Params:        s,
		Backend:       p.f.backend,
		Capacity:      p.be.capacity,
		NewBackend:    p.be.newBackend,
		MeasureTime:   p.be.newBackend != nil,
		DeviceCosts:   p.f.costModel,
		SeriesBuckets: series,
		PrivatePools:  p.f.pools,

		SnapshotStream:  p.f.snapshot.writer(trace, s),
		SnapshotTemp:    p.f.snapshot.dir,
		SnapshotEntries: p.f.snapshot.entries,
	}
}

// run runs the jobs, -j at once, with a progress bar on stderr when
// --progress asks for one.
func (p *replayPlan) run(ctx context.Context, stderr io.Writer) []sim.JobResult {
	var pr *progress
	if showProgress(p.f.progress, stderr) {
		byBytes := p.inputs
		if p.shared || p.shard.n > 0 {
			// Replays from memory read no bytes, and a shard reads
			// part of them: inputs of unknown size make the bar count
			// events.
			byBytes = make([]*input, len(p.inputs))
			for i := range byBytes {
				byBytes[i] = &input{size: -1}
			}
		}
		pr = newProgress(stderr, byBytes, len(p.strategies)-p.countRefused(p.strategies)) // a refused variant never replays
		for i := range p.jobs {
			p.jobs[i].Config.Progress = pr.job()
		}
		for _, in := range p.inputs {
			in.tick = pr.poke // the bar moves while a snapshot is read whole
		}
	}
	out := sim.RunAll(ctx, p.jobs, p.f.jobs)
	if pr != nil {
		pr.finish()
		for _, in := range p.inputs {
			// --offline and --min-capacity read the traces again.
			in.tick, in.progress = nil, stderr
		}
	}
	return out
}

// write writes what the jobs measured: the results of the replays that
// succeeded on stdout, in --format; with -o, the report, or the shard's
// part of it for 'simulate merge'. It then returns the error of the first
// replay that failed, or notes on stderr the bad events that --lenient
// skipped. A run with a replay that failed writes no report, which would
// look complete: a shard writes its part, which says that it failed, and
// which merge refuses.
func (p *replayPlan) write(ctx context.Context, e *env, out []sim.JobResult) error {
	out = p.refusedRows(out)
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
		if err := writeResults(ctxWriter(ctx, e.stdout), p.f.format, results); err != nil {
			return err
		}
	}
	if p.f.out != "" && (firstErr == nil || p.shard.n > 0) {
		if err := p.writeReport(ctx, results, out); err != nil {
			return err
		}
	}
	if p.events != nil && firstErr == nil {
		if err := p.events.write(ctx, out); err != nil {
			return err
		}
	}
	if firstErr != nil {
		if p.f.out != "" && p.shard.n == 0 {
			return fmt.Errorf("%w (no report written to %s)", firstErr, p.f.out)
		}
		return firstErr
	}
	if p.f.lenient {
		for _, in := range p.inputs {
			if in.skipped > 0 {
				fmt.Fprintf(e.stderr, "simulate: %s: skipped %s (the first: %s)\n", in.name, plural(in.skipped, "bad event"), in.firstSkip)
			}
		}
	}
	return nil
}

// writeReport writes the report of results into -o's directory, or with
// --shard the shard's summaries and what merge needs, whole (see
// report.DirWriter); an interrupt leaves the directory as it was.
func (p *replayPlan) writeReport(ctx context.Context, results []sim.Result, out []sim.JobResult) error {
	hist := map[string]*report.SizeHistogram{}
	for k, sc := range p.sizes {
		if sc != nil {
			hist[p.inputs[k].name] = &sc.Sizes
		}
	}
	if p.shard.n == 0 && len(results) == 0 {
		return nil
	}
	d, err := report.NewDirWriter(p.f.out, p.f.force)
	if err != nil {
		return err
	}
	defer d.Abort()
	d.SetContext(ctx)
	if p.shard.n > 0 {
		err = writeShard(d, p.shard, p.id, p.lo, len(p.inputs)*len(p.strategies), out, hist)
	} else {
		_, err = report.WriteFiles(d, results, withSizes(p.f.opts, hist))
	}
	if err != nil {
		return err
	}
	return d.Commit()
}

// chooseStrategies resolves the -s specs, or the environment's choice, or
// every registered strategy, and checks that each opens. A strategy that
// refuses its parameters is bad usage, unless it is a variant of a sweep
// whose swept values are valid on their own: it is then kept, with why it
// refused, for a row that says so (see chosenStrategies.open and
// refusedRows), and only a run whose every variant refuses is bad usage.
// When the environment chose the
// strategy or set parameters, it says so in one line on stderr, since a
// variable exported long ago changes what is compared; a variable that
// the release of PyTorch a variant follows does not read is said to be
// ignored by it (see envConfNote).
func chooseStrategies(specs []string, getenv func(string) (string, bool), capacity int64, stderr io.Writer) (*chosenStrategies, error) {
	ch := &chosenStrategies{}
	seen := map[string]bool{}
	var names []string
	for _, s := range specs {
		if strings.EqualFold(strings.TrimSpace(s), "all") {
			names = append(names, gpualloc.Names()...)
			continue
		}
		names = append(names, s)
	}
	if len(specs) == 0 {
		names = defaultNames()
		if envSet(getenv, gpualloc.EnvPoolType) || envSet(getenv, gpualloc.EnvMXNetPoolType) {
			names = []string{""} // Select("") takes the environment's strategy
		}
	}
	type selection struct {
		sel      *gpualloc.Params
		variants []*gpualloc.Params
	}
	var sels []selection
	for _, s := range names {
		sel, err := gpualloc.Select(s, getenv)
		if err != nil {
			return nil, usagef("%v", err)
		}
		variants, err := sel.Expand()
		if err != nil {
			return nil, usagef("%v", err)
		}
		for _, p := range variants {
			if !seen[p.String()] {
				seen[p.String()] = true
				ch.all = append(ch.all, p)
			}
		}
		sels = append(sels, selection{sel, variants})
	}
	if err := ch.open(capacity); err != nil {
		return nil, err
	}
	var notes []string
	addNote := func(note string) {
		if !slices.Contains(notes, note) {
			notes = append(notes, note)
		}
	}
	for _, s := range sels {
		sel := s.sel
		if v, ok := getenv(sel.Source()); ok && sel.Source() != "spec" && sel.Source() != "default" {
			notes = append(notes, fmt.Sprintf("%s=%s chose %s (-s all compares every strategy)", sel.Source(), strings.TrimSpace(v), sel.Strategy()))
		}
		for _, kv := range sel.FromEnv() {
			addNote(envConfNote(kv, sel.Strategy(), ch.releasesOf(s.variants)))
		}
		for _, note := range sel.IgnoredEnv() {
			addNote(note)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(stderr, "simulate: environment: %s\n", strings.Join(notes, "; "))
	}
	return ch, nil
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

// readCosts reads the table of device-call costs of --device-costs.
func readCosts(path string) (*devicecost.Model, error) {
	f, err := openInput(path)
	if err != nil {
		return nil, fmt.Errorf("--device-costs %w", err)
	}
	defer f.Close()
	m, err := devicecost.Parse(f)
	var pe *devicecost.ParseError
	switch {
	case errors.As(err, &pe) && pe.Line > 0:
		return nil, fmt.Errorf("--device-costs %s:%d: %s", path, pe.Line, pe.Msg)
	case err != nil:
		return nil, fmt.Errorf("--device-costs %s: %w", path, unwrapPathErr(err))
	}
	return m, nil
}

// defaultNames returns the registered strategies that are not Optional,
// sorted: those a replay without -s runs.
func defaultNames() []string {
	var names []string
	for _, n := range gpualloc.Names() {
		if s, err := gpualloc.Lookup(n); err == nil && !s.Optional {
			names = append(names, n)
		}
	}
	return names
}
