package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/internal/tabular"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

const explainUsage = `usage: simulate explain [flags] TRACE...

Explains, for each device of each trace, why the run needed the memory it
did and what would have fit, at the moment that matters: the first
out-of-memory error the trace records (a PyTorch snapshot's, without
--capacity), else the first one a replay of the trace as it ran meets on
the device, else the peak of reserved memory, unless --at names another.
For each device:

  - the moment; for an OOM, the failing request beside the device's
    capacity (recorded, --capacity or the default), the live, reserved and
    free bytes, and the free memory in pieces: how many, and the largest
    (each free block of the allocator, and the device's unreserved memory
    as one);
  - where the memory went: live, rounding, fragmented (free bytes in
    segments that hold a live block) and cached bytes (segments that hold
    none), which add up to the reserved bytes;
  - who holds the live bytes: by default the call site, the first frame
    of a PyTorch snapshot's stacks outside PyTorch's own code and Python's
    interpreter and library, as file:line function; --by picks another
    grouping: frame (the innermost Python frame), stream, size, or
    annotation (the entry's user_metadata, else the innermost of the
    snapshot's external annotations, the record_function ranges, in force
    when the block was allocated). The largest groups, then "other":
    together, the live bytes. A trace without stacks is grouped by size;
  - the verdict, from replays: live-bound (the live bytes alone exceed the
    device: no allocator fits), cache-bound (cached segments and the
    device's unreserved memory held the request) or fragmentation-bound
    (the free memory was in pieces), with the line to paste of the
    setting or strategy that fits with the lowest peak and the headroom
    it leaves; or fits (the headroom, and the smallest device it runs on);
  - what would have fit, each replayed on the same device: as recorded
    (or as run, with -s), PyTorch's defaults, expandable_segments:True,
    every other built-in strategy with its defaults but planned, the best
    of PyTorch's settings that simulate tune finds in a third of the time
    left (for a PyTorch run of one device), and the offline plan (simulate plan's heuristics), which
    knows every lifetime ahead: peak reserved, whether it fits, and the
    smallest device it needs (a multiple of 1 MiB, with an OOM 1 MiB
    below).

A PyTorch snapshot is replayed from the allocator's state when its trace
began, with the allocator settings it records, as simulate replays it; on
a device too small for that state, from its live blocks, the cached
segments released as PyTorch releases them when short of memory. The
environment
(GPUALLOC_POOL_TYPE, PYTORCH_ALLOC_CONF) is not read: the rows say what
each setting would do. Devices are never summed: each is replayed on a
device of its own. A row's spec (as -f json gives it) replayed by
simulate -s SPEC --capacity C TRACE gives the same peak on the device;
its line to paste is for the run itself (an empty PYTORCH_ALLOC_CONF is
PyTorch's defaults, where simulate would keep the recorded settings).
--time-limit bounds the replays of what would have fit and the plans; the
moments and their figures come first, and the rows left no time say so.

The events of a trace are read once, into pages (--by annotation reads a
snapshot a second time, for its annotations): past the first 8 MiB of
them (about 160,000 events), they go to a temporary file in --temp-dir,
48 bytes an event, read back by each replay. The moment and who holds
its bytes then take memory for what is live, whatever the length of the
trace.

-o DIR writes, besides the output, index.html with each device's report
and three figures (PNG, 3.3 in wide): the device's memory over the trace,
its live bytes stacked by holder with the reserved bytes, the capacity and
the moment as lines; where the memory went at the moment; the holders as
bars. A directory that holds a report is replaced only with --force.

TRACE is a file in any format simulate reads (simulate -h), - for standard
input, or the name of a bundled trace.

Flags:
`

func explainCmd(ctx context.Context, e *env, args []string) error {
	var format, capacityText, atText, byText, strategy, progressMode string
	var top, jobs int
	var lenient, force bool
	var out string
	timeLimit := explain.DefaultTimeLimit
	fs := newFlagSet(e, "simulate explain", explainUsage)
	fs.StringVar(&capacityText, "capacity", "", "each device's `SIZE` (bytes, or units KiB, MiB, GiB, ... KB, MB, GB, ...; default: the size the trace records, else 80GiB)")
	fs.StringVar(&atText, "at", "", "explain the state after this event instead: an `EVENT` index from 0, or a TIME with a unit (12.5s, 300ms, 1500us)")
	fs.StringVar(&byText, "by", "site", "group the live bytes by `KEY`: site, frame (the innermost Python frame), stream, size or annotation (a snapshot's user_metadata or record_function range)")
	fs.IntVar(&top, "top", 10, "`N` groups listed before \"other\"")
	fs.StringVarP(&strategy, "strategy", "s", "", "the `SPEC` the trace ran with (default: pytorch with the settings the trace records)")
	fs.DurationVar(&timeLimit, "time-limit", explain.DefaultTimeLimit, "`DURATION` for each trace: its replays and plans together, the moments first")
	fs.StringVarP(&format, "format", "f", "table", "output format: table, csv or json")
	fs.StringVarP(&out, "out", "o", "", "also write index.html and figures of each device into `DIR`")
	fs.BoolVar(&force, "force", false, "with -o, replace the report a directory holds")
	fs.IntVarP(&jobs, "jobs", "j", 0, "replays to run at once (default: the number of cores)")
	addTempDirFor(fs, e, "; the events of each trace past the first 8 MiB of them (48 bytes an event)")
	if err := parseTraceFlags(fs, args, &lenient, &progressMode, &format); err != nil {
		return err
	}
	opts := explain.Options{TimeLimit: timeLimit, Top: top, Workers: jobs}
	var err error
	if opts.Capacity, opts.By, err = parseExplainFlags(capacityText, byText, top); err != nil {
		return err
	}
	if fs.Changed("at") {
		if opts.At, err = parseAt(atText); err != nil {
			return err
		}
	}
	if timeLimit <= 0 {
		return usagef("--time-limit %v: want a positive duration such as 30s", timeLimit)
	}
	if jobs < 0 {
		return usagef("--jobs %d: want a positive number", jobs)
	}
	if strategy != "" {
		if opts.Strategy, err = resolveFlag("--strategy", strategy); err != nil {
			return err
		}
	}
	if fs.NArg() == 0 {
		return usagef("explain: want at least one TRACE")
	}
	if out != "" {
		if err := checkOutputDir("-o", out, force, fileArgs(fs.Args())); err != nil {
			return err
		}
		opts.Timeline = true
	}
	inputs, err := stackInputs(ctx, e, fs.Args(), lenient, progressMode)
	if err != nil {
		return err
	}
	var reps []explain.Report
	for _, in := range inputs {
		t, err := explainLogged(ctx, e, in, lenient, opts.By == explain.ByAnnotation)
		if err != nil {
			return err
		}
		r, err := explain.Explain(ctx, t, opts)
		if cerr := t.Log.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if len(r) == 0 {
			fmt.Fprintf(e.stderr, "simulate: %s: no allocation to explain\n", in.name)
		}
		reps = append(reps, r...)
		noteSkipped(e, in)
	}
	if out != "" {
		if err := writeExplainPage(ctx, out, force, reps); err != nil {
			return err
		}
	}
	return writeRows(e.stdout, format, reps, writeExplain)
}

// parseTraceFlags adds to fs the flags of how explain and diff read their
// traces, --lenient and the progress of the read, last; parses args; and
// checks --format.
func parseTraceFlags(fs *pflag.FlagSet, args []string, lenient *bool, progressMode, format *string) error {
	fs.BoolVar(lenient, "lenient", false, "skip bad events of a trace, count them and go on")
	addReadProgress(fs, progressMode)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return checkFormat(*format)
}

// parseExplainFlags reads the flags that explain and diff share:
// --capacity (0 where it is not given), --by and --top.
func parseExplainFlags(capacityText, byText string, top int) (int64, explain.By, error) {
	var capacity int64
	if capacityText != "" {
		var err error
		if capacity, err = parseSizeFlag("--capacity", capacityText); err != nil {
			return 0, "", err
		}
		if capacity <= 0 {
			return 0, "", usagef("--capacity %s: want a size above 0", capacityText)
		}
	}
	by, err := explain.ParseBy(byText)
	if err != nil {
		return 0, "", usagef("--by %s", err)
	}
	if top < 1 {
		return 0, "", usagef("--top %d: want a positive number", top)
	}
	return capacity, by, nil
}

// resolveFlag resolves the strategy spec that flag gives.
func resolveFlag(flag, spec string) (*gpualloc.Params, error) {
	sp, err := gpualloc.ParseSpec(spec)
	if err != nil {
		return nil, usagef("%s: %s", flag, err)
	}
	p, err := gpualloc.Resolve(sp, nil)
	if err != nil {
		return nil, usagef("%s: %s", flag, err)
	}
	return p, nil
}

// stackInputs opens the traces of paths to be read whole with their
// stacks: one read of each snapshot gives the events and the entries
// their call sites come from. Each reports its reading as progressMode
// says.
func stackInputs(ctx context.Context, e *env, paths []string, lenient bool, progressMode string) ([]*input, error) {
	progress, err := readProgressTo(progressMode, e.stderr)
	if err != nil {
		return nil, err
	}
	inputs, err := traceInputs(ctx, paths, e.stdin, traces.Options{Lenient: lenient, TempDir: e.tempDir, Stacks: true})
	if err != nil {
		return nil, err
	}
	for _, in := range inputs {
		in.progress = progress
	}
	return inputs, nil
}

// noteSkipped tells how many bad events a lenient read of in skipped.
func noteSkipped(e *env, in *input) {
	if in.skipped > 0 {
		fmt.Fprintf(e.stderr, "simulate: %s: skipped %s (the first: %s)\n", in.name, plural(in.skipped, "bad event"), in.firstSkip)
	}
}

// writeRows writes rows as format says: json, csv (a column per field,
// the lists as JSON text in their cells), or each as text writes it, a
// blank line between them.
func writeRows[T any](w io.Writer, format string, rows []T, text func(io.Writer, *T) error) error {
	switch format {
	case "json":
		return tabular.WriteJSON(w, rows)
	case "csv":
		return tabular.WriteCSVLists(w, rows)
	}
	for i := range rows {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := text(w, &rows[i]); err != nil {
			return err
		}
	}
	return nil
}

// textOf returns write's text of a row, for a page. The writers given
// fail only where their writer does, and a strings.Builder does not.
func textOf[T any](write func(io.Writer, *T) error) func(*T) string {
	return func(r *T) string {
		var b strings.Builder
		_ = write(&b, r)
		return b.String()
	}
}

// writeExplainPage writes the reports as index.html and figures into the
// directory dir, whole or not at all.
func writeExplainPage(ctx context.Context, dir string, force bool, reps []explain.Report) error {
	d, err := report.NewDirWriter(dir, force)
	if err != nil {
		return err
	}
	defer d.Abort()
	d.SetContext(ctx)
	if err := explain.WritePage(d, reps, textOf(writeExplain)); err != nil {
		return err
	}
	return d.Commit()
}

// parseAt reads --at: an event index, or a time with a unit.
func parseAt(s string) (*explain.At, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return nil, usagef("--at %s: want an event index from 0, or a time such as 12.5s", s)
		}
		return &explain.At{Event: n}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return nil, usagef("--at %q: want an event index from 0, or a time such as 12.5s, 300ms or 1500us", s)
	}
	return &explain.At{TimeUS: d.Microseconds(), ByTime: true}, nil
}

// explainTrace reads in whole, with its start state and the memory it
// records, and, for a PyTorch snapshot, its stacks and its entries, in one
// read; the annotations, when asked for, take a second: a trace that can
// be read only once (standard input, a FIFO) is read into memory first.
// The events are held in memory (Trace.Events).
func explainTrace(ctx context.Context, e *env, in *input, lenient, annotations bool) (*explain.Trace, error) {
	return readExplainTrace(ctx, e, in, lenient, annotations, func(r traces.Reader, t *explain.Trace) (err error) {
		t.Events, err = readAllSized(r)
		return err
	})
}

// explainLogged reads in as explainTrace does, its events into an
// explain.EventLog whose pages past its bound go to a temporary file in
// the directory of --temp-dir (TMPDIR): the memory of a snapshot's
// events is then bounded, whatever its length. The caller closes the log.
func explainLogged(ctx context.Context, e *env, in *input, lenient, annotations bool) (*explain.Trace, error) {
	return readExplainTrace(ctx, e, in, lenient, annotations, func(r traces.Reader, t *explain.Trace) (err error) {
		t.Log, err = explain.ReadEventLog(r, e.tempDir, 0)
		return err
	})
}

// readExplainTrace reads in as explainTrace says, its events by keep.
func readExplainTrace(ctx context.Context, e *env, in *input, lenient, annotations bool, keep func(traces.Reader, *explain.Trace) error) (_ *explain.Trace, err error) {
	open := in.open
	var data []byte
	if in.once {
		src, name := e.stdin, "stdin"
		if in.file != nil {
			src, name = in.file, in.name
		}
		if data, err = io.ReadAll(ctxReader(ctx, src)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if in.file != nil {
			in.file.Close()
			in.file = nil
		}
		open = func() (traces.Reader, io.Closer, error) {
			r, err := traces.NewReader(bytes.NewReader(data), name, traces.Options{Lenient: lenient, TempDir: e.tempDir, Stacks: true})
			if err != nil {
				return nil, nil, err
			}
			return r, r, nil
		}
	}
	r, c, err := open()
	if err != nil {
		return nil, err
	}
	t := &explain.Trace{Name: in.name}
	defer func() {
		if err != nil {
			t.Log.Close()
		}
	}()
	err = keep(r, t)
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if f, ok := r.(traces.FileReader); ok {
		t.Format = f.Format()
		if n := f.Skipped(); n > 0 && in.once {
			in.skipped, in.firstSkip = n, f.FirstSkipped().Error()
		}
	}
	t.Start = traces.StartOf(r)
	if m, ok := r.(sim.CapacityReporter); ok {
		t.Memory = m
	}
	if t.Format != "PyTorch snapshot" || (data == nil && in.size < 0) { // a bundled trace is no snapshot
		return t, nil
	}
	sr, ok := r.(interface{ Snapshot() *snapshot.Snapshot })
	if !ok {
		return nil, fmt.Errorf("%s: the reader of a PyTorch snapshot hands over no snapshot", in.name)
	}
	t.Snapshot = sr.Snapshot()
	source := func() (io.Reader, func(), error) {
		if data != nil {
			return bytes.NewReader(data), func() {}, nil
		}
		f, err := os.Open(in.name)
		if err != nil {
			return nil, nil, err
		}
		return ctxReader(ctx, f), func() { f.Close() }, nil
	}
	if annotations {
		src, done, err := source()
		if err != nil {
			return nil, err
		}
		defer done()
		if t.Annotations, err = explain.ReadAnnotations(src); err != nil {
			return nil, fmt.Errorf("%s: %w", in.name, err)
		}
	}
	return t, nil
}

// readAllSized is traces.ReadAll, the events' slice made once where the
// reader is of a snapshot, whose entries and blocks live before the trace
// bound the number of events: on a snapshot of millions of entries,
// growing the slice would copy it and leave its old halves to the
// collector, a third again of the events' memory at the peak.
func readAllSized(r traces.Reader) ([]traces.Event, error) {
	var events []traces.Event
	if sr, ok := r.(interface{ Snapshot() *snapshot.Snapshot }); ok {
		n := 0
		if st := traces.StartOf(r); st != nil {
			n = st.Initial
		}
		s := sr.Snapshot()
		for d := range s.NumTraces() {
			n += s.Trace(d).Len()
		}
		events = make([]traces.Event, 0, n)
	}
	for r.Scan() {
		events = append(events, r.Event())
	}
	return events, r.Err()
}

// writeExplain writes the report of one device, for people: one screen, at
// most 100 columns.
func writeExplain(w io.Writer, r *explain.Report) error {
	size := gpualloc.FormatSize
	ew := &errWriter{w: w}
	what := map[string]string{explain.MomentOOM: "out of memory", explain.MomentPeak: "peak of reserved memory",
		explain.MomentAt: "the state"}[r.Moment]
	if r.Moment == explain.MomentOOM && r.Recorded {
		what += " (recorded)"
	} else if r.Moment == explain.MomentOOM {
		what += " (replayed)"
	}
	when := ""
	if r.TimeUS != traces.NoTime {
		when = ", " + duration(r.SinceStartUS) + " into the trace"
	}
	dev := fmt.Sprintf(", device %d", r.Device)
	ew.printf("%s%s\n", shorten(r.Trace, 100-len(dev)), dev)
	ew.printf("  moment      %s at event %s%s\n", what, tabular.Count(r.EventIndex), when)
	source := r.CapacitySource
	if source == explain.CapacityFlag {
		source = "--capacity"
	}
	ew.printf("  device      %s (%s, %s)\n", size(r.CapacityBytes), exactMiB(r.CapacityBytes), source)
	if r.Moment == explain.MomentOOM {
		ew.printf("  request     %s, with %s free in %s, the largest %s\n", size(r.RequestBytes), size(r.FreeBytes),
			plural(r.FreePieces, "piece"), size(r.LargestFreeBytes))
	} else {
		ew.printf("  free        %s in %s, the largest %s\n", size(r.FreeBytes), plural(r.FreePieces, "piece"), size(r.LargestFreeBytes))
	}
	ew.printf("  reserved    %s = live %s + rounding %s + fragmented %s + cached %s\n", size(r.ReservedBytes),
		size(r.LiveBytes-r.UnservedBytes), size(r.RoundingBytes), size(r.FragmentedBytes), size(r.CachedBytes))
	if r.UnservedBytes > 0 {
		ew.printf("              (and %s live without a block, after an earlier OOM)\n", size(r.UnservedBytes))
	}
	by := string(r.By)
	if !r.Frames && r.By == explain.BySize {
		by = "size (the trace records no stacks)"
	}
	ew.printf("  live        %s, by %s:\n", size(r.LiveBytes), by)
	head := []string{"      BYTES", "COUNT", "SHARE", "HOLDER"}
	right := []bool{true, true, true, false}
	var rows [][]string
	share := func(b int64) string {
		if r.LiveBytes == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(b)/float64(r.LiveBytes))
	}
	for _, h := range r.Holders {
		rows = append(rows, []string{size(h.Bytes), tabular.Count(h.Count), share(h.Bytes), shorten(h.Site, 60)})
	}
	if r.OtherCount > 0 {
		rows = append(rows, []string{size(r.OtherBytes), tabular.Count(r.OtherCount), share(r.OtherBytes), "other"})
	}
	ew.table(head, right, rows, "    ")
	ew.printf("  verdict     %s\n", wrap(r.Sentence, 100, "              "))
	if r.Suggestion != "" {
		ew.printf("  paste       %s\n", r.Suggestion)
	}
	ew.printf("  what would have fit on this device:\n")
	head = []string{"ALLOCATOR", "PEAK RESERVED", "FITS", "SMALLEST DEVICE"}
	right = []bool{false, true, false, true}
	rows = rows[:0]
	for _, a := range r.Alternatives {
		peak, fits, minc := "-", "-", "-"
		if a.PeakReservedBytes != nil {
			peak = size(*a.PeakReservedBytes)
		}
		if a.Fits != nil {
			fits = map[bool]string{true: "yes", false: "no"}[*a.Fits]
		}
		if a.MinCapacityBytes != nil {
			minc = exactMiB(*a.MinCapacityBytes)
		}
		if a.TimedOut {
			minc += " (out of time)"
		}
		rows = append(rows, []string{a.Label, peak, fits, minc})
	}
	ew.table(head, right, rows, "    ")
	return ew.err
}

// exactMiB writes a size exactly: in MiB with thousands separators when it
// is a whole number of them ("18,739 MiB": the smallest devices are), else
// in bytes; beside the device's size, it tells apart what three digits
// round together.
func exactMiB(n int64) string {
	if n%(1<<20) == 0 {
		return tabular.Count(n>>20) + " MiB"
	}
	return tabular.Count(n) + " B"
}

// errWriter writes until the first error, which it keeps.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// table lays rows out under head, each line indented.
func (e *errWriter) table(head []string, right []bool, rows [][]string, indent string) {
	if e.err != nil {
		return
	}
	var b strings.Builder
	if err := tabular.Layout(&b, head, right, rows); err != nil {
		e.err = err
		return
	}
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line != "" {
			e.printf("%s%s", indent, line)
		}
	}
}

// shorten keeps the end of s within n characters: a site's line and
// function, and as much of its file's path as fits.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}

// wrap breaks s into lines of at most width columns, the first after the
// 14 columns of its label, the others after indent.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	col := len(indent)
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if col+1+len([]rune(word)) > width {
				b.WriteString("\n" + indent)
				col = len(indent)
			} else {
				b.WriteByte(' ')
				col++
			}
		}
		b.WriteString(word)
		col += len([]rune(word))
	}
	return b.String()
}
