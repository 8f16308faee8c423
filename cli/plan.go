package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/internal/tabular"
	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/traces"
)

const planUsage = `usage: simulate plan [flags] TRACE...

Places every allocation of each trace at an offset in one address space,
knowing when each is freed (the offline plan that XLA and MindSpore's SOMAS
make for a whole graph), and reports the memory the placement needs
(offline_bytes) against a lower bound that it proves (lower_bound_bytes:
no placement is lower), with the peak of live requested bytes beside it
(peak_requested_bytes, which the bound is never below). gap is
offline_bytes over lower_bound_bytes, less 1: the plan is within that of
the optimum, proved. A multi-device trace is one problem per device, one
row each.

It runs a portfolio of greedy heuristics (the time-order first fit, then
orders size, area, lifetime, time and peak (the buffers live at the peak of
live bytes first) x first fit and best fit) and then uses the rest of the
time limit while the best is above the proven bound (or --capacity): with
--capacity an exact search in the manner of MiniMalloc for a placement
within it, on every core; without, turns of that search descending from
the best toward the bound, of large-neighbourhood moves (the buffers
around a point of the peak placed again in another order) and of proofs
on windows of time around the peaks (a height the search proves
infeasible for the buffers of a window is infeasible for all; this is how
lower_bound_bytes rises above the peak). It stops early only when the
best meets the bound. optimal is true exactly when offline_bytes equals
lower_bound_bytes; method names what found the placement: a heuristic
(ORDER/FIT), "search", "lns" (the moves), or "time/stack" (a quick
placement given when the time ran out before any heuristic ended).

--time-limit bounds each trace whole: reading it and planning all its
devices (the time left after reading is shared out among the devices). A
trace still being read when the limit passes is an error, since a plan
needs every allocation. With --progress (on a terminal by default) a run
longer than a second shows on standard error what it is doing: reading,
the heuristics or the search, the best height so far and the proven
bound, as they move, and the gap between them.

capacity_bytes is the size of the device, as simulate and tune give it:
--capacity, else the memory the trace records for the device (a PyTorch
snapshot with an out-of-memory error, a device_memory comment), else 80
GiB. A plan that needs more than the device holds gets one line on
standard error.

A TRACE is a file in any format simulate reads, or a bundled trace by
name. A MiniMalloc CSV (id,lower,upper,size) keeps its ids and times. Any other
trace's buffers are its allocations: the id of the trace (".k" added on the
k-th reuse of an id), and the event indexes of the alloc and the free
(lower, upper: half-open; never freed: the number of events).

-o FILE is written under a temporary name beside it and renamed once whole;
a FILE that is a symbolic link replaces the file the link leads to, and the
link stays; a character device or a FIFO is written through.

Flags:
`

// planRow is one problem's result, for simulate plan.
type planRow struct {
	Trace              string `json:"trace"`
	Device             int    `json:"device"`
	Buffers            int    `json:"buffers"`
	PeakRequestedBytes int64  `json:"peak_requested_bytes"`
	// LowerBoundBytes is the proven lower bound (plan.Solution's
	// ProvenBound), at least PeakRequestedBytes.
	LowerBoundBytes int64 `json:"lower_bound_bytes"`
	OfflineBytes    int64 `json:"offline_bytes"`
	// Gap is OfflineBytes / LowerBoundBytes - 1 (0 for an empty problem).
	Gap       float64 `json:"gap"`
	Optimal   bool    `json:"optimal"`
	ElapsedNS int64   `json:"elapsed_ns"`
	Method    string  `json:"method"`
	// CapacityBytes is the size of the device, as a replay of the trace
	// gives it (see deviceSize).
	CapacityBytes int64 `json:"capacity_bytes"`
}

// deviceSize returns the size of a device whose memory the trace records
// as recorded (0: it records none), as simulate, tune and the offline
// reference give it: capacity (--capacity) when it is > 0, else the
// recorded memory, else the virtual device's default.
func deviceSize(capacity, recorded int64) int64 {
	switch {
	case capacity > 0:
		return capacity
	case recorded > 0:
		return recorded
	}
	return virtual.DefaultCapacity
}

// overDevice is the note for an offline plan of height bytes on a device
// of size bytes that does not hold it, "" when it does.
func overDevice(trace string, dev int, height, size int64) string {
	if height <= size {
		return ""
	}
	return fmt.Sprintf("simulate: %s: device %d: the offline plan needs %s, more than the device's %s\n",
		trace, dev, gpualloc.FormatSize(height), gpualloc.FormatSize(size))
}

func planCmd(ctx context.Context, e *env, args []string) error {
	var (
		format, capacity, out, progress string
		timeLimit                       time.Duration
		lenient, noSearch               bool
	)
	fs := newFlagSet(e, "simulate plan", planUsage)
	fs.StringVar(&capacity, "capacity", "", "find a placement within `SIZE` (bytes, or units KiB, MiB, GiB, ...); exit 1 when none is found in the time limit")
	fs.DurationVar(&timeLimit, "time-limit", plan.DefaultTimeLimit, "`DURATION` for each trace: reading it, the heuristics and the search, for all its devices")
	fs.BoolVar(&noSearch, "no-search", false, "the heuristics only")
	fs.StringVarP(&format, "format", "f", "table", "output format: table, csv or json")
	fs.StringVarP(&out, "out", "o", "", "write the placement to `FILE` as CSV id,lower,upper,size,offset (MiniMalloc's solution format); one trace of one device")
	fs.BoolVar(&lenient, "lenient", false, "skip bad events of a trace, count them and go on")
	fs.StringVar(&progress, "progress", "auto", "progress of runs over a second on standard error: auto (when it is a terminal), always or never")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	if err := checkProgress(progress); err != nil {
		return err
	}
	var err error
	if e.readProgress, err = readProgressTo(progress, e.stderr); err != nil {
		return err
	}
	opts := plan.Options{NoSearch: noSearch}
	if capacity != "" {
		c, err := parseSizeFlag("--capacity", capacity)
		if err != nil {
			return err
		}
		opts.Capacity = c
	}
	if timeLimit <= 0 {
		return usagef("--time-limit %v: want a positive duration such as 10s", timeLimit)
	}
	if fs.NArg() == 0 {
		return usagef("plan: want at least one TRACE")
	}
	if err := checkReadOnce(fs.Args()); err != nil {
		return err
	}
	if out != "" && fs.NArg() > 1 {
		return usagef("plan: -o writes the placement of one trace, got %d", fs.NArg())
	}
	if out == "-" {
		return usagef("plan: -o -: the table goes to standard output; name a FILE for the placement")
	}
	if out != "" {
		if err := checkOutputFile("-o", out, fs.Args()); err != nil {
			return err
		}
	}
	var show io.Writer
	if showProgress(progress, e.stderr) {
		show = e.stderr
	}
	var rows []planRow
	for _, path := range fs.Args() {
		pr := newPlanProgress(show, path)
		probs, err := readProblemsWithin(ctx, e, path, traces.Options{Lenient: lenient}, timeLimit, pr)
		if err != nil {
			pr.stop()
			return err
		}
		if out != "" && len(probs) > 1 {
			pr.stop()
			return fmt.Errorf("%s: -o: the trace uses %d devices, and a placement file holds one", path, len(probs))
		}
		deadline := pr.start.Add(timeLimit)
		for i, p := range probs {
			// The devices share the time left; what one leaves goes to
			// the next.
			o := opts
			o.TimeLimit = max(time.Until(deadline)/time.Duration(len(probs)-i), time.Millisecond)
			o.Progress = pr.device(p.Device, len(probs) > 1)
			sol, err := plan.Solve(ctx, p.Problem, o)
			if err != nil {
				pr.stop()
				if errors.Is(err, plan.ErrNoPlacement) && len(probs) > 1 {
					return fmt.Errorf("%s: device %d: %w", path, p.Device, err)
				}
				return fmt.Errorf("%s: %w", path, err)
			}
			size := deviceSize(opts.Capacity, p.Memory)
			rows = append(rows, planRow{Trace: path, Device: p.Device, Buffers: len(p.Buffers),
				PeakRequestedBytes: sol.LowerBound, LowerBoundBytes: sol.ProvenBound, OfflineBytes: sol.Height,
				Gap: gapOf(sol.Height, sol.ProvenBound), Optimal: sol.Optimal,
				ElapsedNS: int64(sol.Elapsed), Method: sol.Method, CapacityBytes: size})
			io.WriteString(e.stderr, overDevice(path, p.Device, sol.Height, size))
			if out != "" {
				placed := sol.Placements(p.Problem)
				if err := writeFileVia(ctx, out, func(w io.Writer) error { return plan.WritePlacements(w, placed) }); err != nil {
					pr.stop()
					return err
				}
			}
		}
		pr.stop()
	}
	return writePlanRows(e, format, rows)
}

// readProblems reads the trace at path into one problem per device: a
// MiniMalloc CSV with its ids and times, any other trace as plan.FromTrace
// makes it. A trace without allocations is one empty problem of device 0.
// ctx stops the reading of a trace in another format.
func readProblems(ctx context.Context, e *env, path string, opts traces.Options) ([]plan.DeviceProblem, error) {
	r, c, err := openTrace(ctx, e, path, opts)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var probs []plan.DeviceProblem
	if p, ok := plan.FromMiniMalloc(r); ok {
		probs = []plan.DeviceProblem{{Problem: p}}
	} else if probs, err = plan.FromTraceContext(ctx, r); err != nil {
		return nil, err
	}
	reportSkipped(e, path, r)
	if len(probs) == 0 {
		probs = []plan.DeviceProblem{{}}
	}
	return probs, nil
}

// readProblemsWithin is readProblems within limit from pr.start: when the
// limit passes first it returns an error that says so (and leaves the
// reading, which a format read whole when opened cannot stop, to end
// alone). ctx's end is its error. pr shows the reading.
func readProblemsWithin(ctx context.Context, e *env, path string, opts traces.Options, limit time.Duration, pr *planProgress) ([]plan.DeviceProblem, error) {
	type read struct {
		probs []plan.DeviceProblem
		notes []byte
	}
	pr.reading()
	res, err := within(ctx, pr.start.Add(limit), func(rctx context.Context) (read, error) {
		// The reading's notes go to a buffer, written once it has ended.
		var notes bytes.Buffer
		ne := *e
		ne.stderr = &notes
		probs, err := readProblems(rctx, &ne, path, opts)
		return read{probs, notes.Bytes()}, err
	})
	if errors.Is(err, errOutOfTime) {
		return nil, fmt.Errorf("%s: the time limit %v ran out while reading the trace, before any plan (a plan needs every allocation): give a longer --time-limit", path, limit)
	}
	e.stderr.Write(res.notes)
	return res.probs, err
}

func writePlanRows(e *env, format string, rows []planRow) error {
	switch format {
	case "json":
		return tabular.WriteJSON(e.stdout, rows)
	case "csv":
		return tabular.WriteCSV(e.stdout, rows)
	}
	multi := false
	for _, r := range rows {
		multi = multi || r.Device != 0
	}
	head := []string{"TRACE", "BUFFERS", "PEAK LIVE", "LOWER BOUND", "OFFLINE", "GAP", "OPTIMAL", "METHOD", "TIME"}
	right := []bool{false, true, true, true, true, true, false, false, true}
	if multi {
		head = append([]string{"TRACE", "DEVICE"}, head[1:]...)
		right = append([]bool{false, true}, right[1:]...)
	}
	var cells [][]string
	elapsed := make([]time.Duration, len(rows))
	for i, r := range rows {
		elapsed[i] = time.Duration(r.ElapsedNS)
	}
	times := formatDurations(elapsed)
	for i, r := range rows {
		gap := "-"
		if r.LowerBoundBytes > 0 {
			gap = fmt.Sprintf("+%.2f%%", 100*r.Gap)
		}
		opt := "no"
		if r.Optimal {
			opt = "yes"
		}
		c := []string{r.Trace, tabular.Count(int64(r.Buffers)), gpualloc.FormatSize(r.PeakRequestedBytes),
			gpualloc.FormatSize(r.LowerBoundBytes), gpualloc.FormatSize(r.OfflineBytes), gap, opt, r.Method, times[i]}
		if multi {
			c = append([]string{r.Trace, fmt.Sprint(r.Device)}, c[1:]...)
		}
		cells = append(cells, c)
	}
	return tabular.Layout(e.stdout, head, right, cells)
}

// gapOf is height / bound - 1, 0 when bound is 0.
func gapOf(height, bound int64) float64 {
	if bound <= 0 {
		return 0
	}
	return float64(height-bound) / float64(bound)
}

// formatDurations formats a column of durations in one unit, chosen by
// the longest, with little precision: whole milliseconds up to a second
// ("34 ms"), seconds with two decimals up to 10 s ("1.05 s") and one up
// to 100 s ("34.3 s"), minutes with one decimal above ("3.0 min").
func formatDurations(ds []time.Duration) []string {
	var longest time.Duration
	for _, d := range ds {
		longest = max(longest, d)
	}
	out := make([]string, len(ds))
	for i, d := range ds {
		switch {
		case longest < time.Second:
			out[i] = fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
		case longest < 10*time.Second:
			out[i] = fmt.Sprintf("%.2f s", d.Seconds())
		case longest < 100*time.Second:
			out[i] = fmt.Sprintf("%.1f s", d.Seconds())
		default:
			out[i] = fmt.Sprintf("%.1f min", d.Minutes())
		}
	}
	return out
}

// planProgressEvery is how often the progress of a plan is drawn (on a
// terminal; elsewhere a line is written when what it says changes, or
// every planProgressQuiet), and planProgressAfter how long a trace takes
// before its progress shows.
var (
	planProgressEvery = time.Second
	planProgressQuiet = 10 * time.Second
	planProgressAfter = time.Second
)

// A planProgress shows on standard error what the plan of one trace is
// doing: reading, the heuristics or the search, the best height so far.
// A goroutine draws it; the callbacks only record the state. With no
// writer it shows nothing, and only keeps the trace's start.
type planProgress struct {
	w     io.Writer
	tty   bool
	trace string
	start time.Time

	mu    sync.Mutex
	state string // what is under way, "" before anything

	quit chan struct{}
	wg   sync.WaitGroup
}

func newPlanProgress(w io.Writer, trace string) *planProgress {
	p := &planProgress{w: w, trace: trace, start: time.Now()}
	if w == nil {
		return p
	}
	if f, ok := w.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
	p.quit = make(chan struct{})
	p.wg.Go(p.draw)
	return p
}

// draw writes the state every planProgressEvery, once the trace has taken
// planProgressAfter, until stop.
func (p *planProgress) draw() {
	t := time.NewTicker(planProgressEvery)
	defer t.Stop()
	var last string
	var lastAt time.Time
	for {
		select {
		case <-p.quit:
			if p.tty && last != "" {
				fmt.Fprint(p.w, "\r\x1b[K")
			}
			return
		case now := <-t.C:
			el := now.Sub(p.start)
			p.mu.Lock()
			state := p.state
			p.mu.Unlock()
			if state == "" || el < planProgressAfter {
				continue
			}
			if p.tty {
				fmt.Fprintf(p.w, "\r\x1b[Kplan: %s: %s, %s", p.trace, state, formatDurations([]time.Duration{el})[0])
			} else if state != last || now.Sub(lastAt) >= planProgressQuiet {
				fmt.Fprintf(p.w, "plan: %s: %s, %s\n", p.trace, state, formatDurations([]time.Duration{el})[0])
				lastAt = now
			}
			last = state
		}
	}
}

func (p *planProgress) set(state string) {
	p.mu.Lock()
	p.state = state
	p.mu.Unlock()
}

// reading records that the trace is being read.
func (p *planProgress) reading() { p.set("reading") }

// device returns the plan.Options.Progress of the plan of device dev,
// named when the trace has several devices.
func (p *planProgress) device(dev int, multi bool) func(plan.Progress) {
	prefix := ""
	if multi {
		prefix = fmt.Sprintf("device %d: ", dev)
	}
	return func(g plan.Progress) {
		st := prefix + g.Phase
		if g.Height > 0 {
			st += ", best " + gpualloc.FormatSize(g.Height) + " by " + g.Method
			if g.Proven > 0 {
				st += fmt.Sprintf(", +%.2f%% over the bound %s", 100*gapOf(g.Height, g.Proven), gpualloc.FormatSize(g.Proven))
			}
		}
		p.set(st)
	}
}

// stop ends the drawing and clears the line on a terminal.
func (p *planProgress) stop() {
	if p.quit != nil {
		close(p.quit)
		p.wg.Wait()
		p.quit = nil
	}
}

// convertMiniMalloc writes the trace at in as a MiniMalloc CSV to out
// ("-": standard output).
func convertMiniMalloc(ctx context.Context, e *env, in, out string, opts traces.Options) error {
	probs, err := readProblems(ctx, e, in, opts)
	if err != nil {
		return err
	}
	if len(probs) > 1 {
		return fmt.Errorf("%s: the trace uses %d devices, and a MiniMalloc CSV holds one", in, len(probs))
	}
	if out == "-" {
		return plan.WriteProblem(e.stdout, probs[0].Problem)
	}
	return writeFileVia(ctx, out, func(w io.Writer) error { return plan.WriteProblem(w, probs[0].Problem) })
}
