package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/dataset"
	"github.com/gpualloc/gpualloc/diff"
	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/internal/tabular"
	"github.com/gpualloc/gpualloc/sim/report"
)

const diffUsage = `usage: simulate diff [flags] A B
       simulate diff [flags] RANK0 RANK1 RANK2...

Compares two runs side by side, device by device: why does B need more
memory than A (or less)? Each trace is replayed as it ran (pytorch with
the settings it records, from its recorded start state, as simulate and
explain replay it) on a device of its own size, and each difference is
B's figure less A's, so that swapping A and B negates every one:

  - peak live, allocated and reserved bytes and device allocations, as
    simulate gives them; and the breakdown at each run's own peak of
    reserved memory (the moment explain takes when no out-of-memory error
    comes first: explain --at EVENT gives the same figures): live,
    rounding, fragmented and cached bytes, which add up to the peak;
  - the difference of the peaks split in two parts that add up to it:
    the program holds more (the live bytes at the peaks) and the
    allocator keeps more (rounding, fragmentation and cache);
  - where the live difference comes from: the live bytes at each peak by
    site (or --by as in explain), each site grown, shrunk, new or gone,
    with its bytes and allocations; the sites' differences add up to the
    live difference. Sites are matched across the runs by file and
    function, "file:function", the line left out: an edit above an
    allocation moves its line, not its site (two lines of one function
    are one site). Sizes, streams and annotations match as they are;
  - program or allocator: A's trace replayed with B's recorded settings
    and B's with A's, or, with --with SPEC, both with SPEC;
  - where both traces record steps (the ranges of an annotation, by
    default PyTorch's Optimizer.step, in external_annotations), the
    steps side by side: step k is the events after the end of the
    (k-1)th range up to the end of the kth.

Devices are matched by index; where each trace has one device, those two
are matched whatever their indexes.

Given more than two traces (or a quoted glob, "rank*.pickle"), the ranks
of one job: per device, which rank peaks and by how much over the median
of the ranks' peaks; each site's smallest, median and largest bytes over
the ranks (0 for a rank without it); and the rank that diverges, named:
the rank whose peak of reserved bytes lies farthest from the median,
when that distance exceeds both three times the median distance of the
ranks from the median and 5% of the median (one rank off the others).
The traces are read one at a time: memory holds one trace and the site
tables.

-o DIR writes, besides the output, index.html with the memory curves of
the runs on one time axis (each run's events spread over 0 to 1, or
aligned by step where every run records steps) and the site differences
as diverging bars (for ranks: each rank's peak less the median); and
the data as Parquet, for pandas, Polars or DuckDB: events.parquet, a
row for each event of each trace as it was replayed (trace, device,
strategy, index, time_us, action, size, address, site, and the
live_bytes, allocated_bytes and reserved_bytes of its device after it),
sites.parquet (each run's live bytes at its
peak by site) and site_diffs.parquet (two traces) or rank_sites.parquet
(ranks). A directory that holds a report is replaced only with --force.

-f json writes one row per device: for two traces a pair (a, b, device,
a_peak_reserved_bytes, delta_reserved_bytes, delta_live_bytes,
delta_allocator_bytes, sites, cross, steps, ...), for more the ranks
(ranks, peak_rank, divergent, sites with min_bytes, median_bytes,
max_bytes, ...); -f csv the same columns, the lists as JSON text.

TRACE is a file in any format simulate reads (simulate -h), - for standard
input, or the name of a bundled trace.

Flags:
`

func diffCmd(ctx context.Context, e *env, args []string) error {
	var format, capacityText, byText, with, step, progressMode, out string
	var top int
	var lenient, force bool
	fs := newFlagSet(e, "simulate diff", diffUsage)
	fs.StringVar(&capacityText, "capacity", "", "each device's `SIZE` (default: the size each trace records, else 80GiB)")
	fs.StringVar(&byText, "by", "site", "group the live bytes by `KEY`: site, frame, stream, size or annotation, as explain does")
	fs.IntVar(&top, "top", 10, "`N` sites listed before \"other\" (the JSON lists every one)")
	fs.StringVar(&with, "with", "", "replay both traces with `SPEC` (a strategy or setting) instead of each with the other's settings")
	fs.StringVar(&step, "step", diff.DefaultStep, "the annotation (a name or its start) whose ranges end the `STEP`s")
	fs.StringVarP(&format, "format", "f", "table", "output format: table, csv or json")
	fs.StringVarP(&out, "out", "o", "", "also write index.html and figures into `DIR`")
	fs.BoolVar(&force, "force", false, "with -o, replace the report a directory holds")
	if err := parseTraceFlags(fs, args, &lenient, &progressMode, &format); err != nil {
		return err
	}
	o := diff.Options{Step: step}
	var err error
	if o.Capacity, o.By, err = parseExplainFlags(capacityText, byText, top); err != nil {
		return err
	}
	if step == "" {
		return usagef("--step: want the name of an annotation, such as %s", diff.DefaultStep)
	}
	if with != "" {
		if o.With, err = resolveFlag("--with", with); err != nil {
			return err
		}
		o.WithSpec = with
	}
	paths, err := expandGlobs(fs.Args())
	if err != nil {
		return err
	}
	if len(paths) < 2 {
		return usagef("diff: want two traces, A and B, or the ranks of a job; got %d", len(paths))
	}
	if out != "" {
		if err := checkOutputDir("-o", out, force, fileArgs(paths)); err != nil {
			return err
		}
	}
	inputs, err := stackInputs(ctx, e, paths, lenient, progressMode)
	if err != nil {
		return err
	}
	read := func(i int, annotations bool) (*explain.Trace, error) {
		t, err := explainTrace(ctx, e, inputs[i], lenient, annotations)
		if err != nil {
			return nil, err
		}
		noteSkipped(e, inputs[i])
		return t, nil
	}
	if len(inputs) == 2 {
		return diffTwo(ctx, e, read, o, format, out, force, top)
	}
	return diffRanks(ctx, e, inputs, read, o, format, out, force, top)
}

// expandGlobs returns the arguments, each that names no file but is a
// pattern replaced by the files it matches, in order.
func expandGlobs(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if _, err := os.Lstat(a); err == nil || !strings.ContainsAny(a, "*?[") {
			out = append(out, a)
			continue
		}
		m, err := filepath.Glob(a)
		if err != nil {
			return nil, usagef("%s: %s", a, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s: no file matches the pattern", a)
		}
		out = append(out, m...)
	}
	return out, nil
}

// diffTwo compares two traces.
func diffTwo(ctx context.Context, e *env, read func(int, bool) (*explain.Trace, error), o diff.Options, format, out string, force bool, top int) error {
	pairText := func(w io.Writer, p *diff.Pair) error { return writeDiffPair(w, p, top) }
	// The annotations tell the steps; by annotation, the groups too.
	a, err := read(0, true)
	if err != nil {
		return err
	}
	b, err := read(1, true)
	if err != nil {
		return err
	}
	pairs, ra, rb, err := diff.Two(ctx, a, b, o)
	if err != nil {
		return fmt.Errorf("diff: %w", err)
	}
	if out != "" {
		d, err := newDiffDir(ctx, out, force)
		if err != nil {
			return err
		}
		defer d.abort()
		for _, s := range []struct {
			t *explain.Trace
			r *diff.Run
		}{{a, ra}, {b, rb}} {
			if err := diff.WriteEvents(ctx, d.events, s.t, s.r, o); err != nil {
				return err
			}
		}
		if err := diff.WritePairPage(d.DirWriter, pairs, []*diff.Run{ra, rb}, textOf(pairText)); err != nil {
			return err
		}
		if err := diff.WriteTable(d.DirWriter, "site_diffs.parquet", diff.SiteDiffRows(pairs)); err != nil {
			return err
		}
		if err := d.commit([]*diff.Run{ra, rb}); err != nil {
			return err
		}
	}
	return writeRows(e.stdout, format, pairs, pairText)
}

// diffRanks summarises the ranks of a job, reading one trace at a time.
func diffRanks(ctx context.Context, e *env, inputs []*input, read func(int, bool) (*explain.Trace, error), o diff.Options, format, out string, force bool, top int) error {
	ranksText := func(w io.Writer, s *diff.Summary) error { return writeDiffRanks(w, s, top) }
	var d *diffDir
	if out != "" {
		var err error
		if d, err = newDiffDir(ctx, out, force); err != nil {
			return err
		}
		defer d.abort()
	}
	runs := make([]*diff.Run, len(inputs))
	for i := range inputs {
		t, err := read(i, o.By == explain.ByAnnotation)
		if err != nil {
			return err
		}
		if runs[i], err = diff.Measure(ctx, t, o); err != nil {
			return fmt.Errorf("diff: %w", err)
		}
		if d != nil {
			if err := diff.WriteEvents(ctx, d.events, t, runs[i], o); err != nil {
				return err
			}
		}
	}
	sums, err := diff.Summarise(runs)
	if err != nil {
		return fmt.Errorf("diff: %w", err)
	}
	if d != nil {
		if err := diff.WriteRanksPage(d.DirWriter, sums, runs, textOf(ranksText)); err != nil {
			return err
		}
		if err := diff.WriteTable(d.DirWriter, "rank_sites.parquet", diff.RankSiteRows(sums)); err != nil {
			return err
		}
		if err := d.commit(runs); err != nil {
			return err
		}
	}
	return writeRows(e.stdout, format, sums, ranksText)
}

// A diffDir is the report of -o DIR being written: its figures, page and
// tables, and events.parquet, written as the traces are read.
type diffDir struct {
	*report.DirWriter
	file   *os.File
	events *dataset.EventWriter
}

// newDiffDir starts the report of -o DIR, whole or not at all.
func newDiffDir(ctx context.Context, dir string, force bool) (*diffDir, error) {
	d, err := report.NewDirWriter(dir, force)
	if err != nil {
		return nil, err
	}
	d.SetContext(ctx)
	f, err := d.Create("events.parquet")
	if err != nil {
		d.Abort()
		return nil, err
	}
	return &diffDir{DirWriter: d, file: f, events: dataset.NewEventWriter(f)}, nil
}

// commit finishes events.parquet, writes sites.parquet of runs and moves
// the report into place.
func (d *diffDir) commit(runs []*diff.Run) error {
	if err := d.events.Close(); err != nil {
		return err
	}
	if err := d.file.Close(); err != nil {
		return err
	}
	if err := diff.WriteTable(d.DirWriter, "sites.parquet", diff.SiteRows(runs)); err != nil {
		return err
	}
	return d.Commit()
}

// abort leaves the directory as it was, unless the report was committed.
func (d *diffDir) abort() {
	d.file.Close()
	d.Abort()
}

// writeDiffPair writes the comparison of one device, for people: at most
// 100 columns.
func writeDiffPair(w io.Writer, p *diff.Pair, top int) error {
	size, signed := gpualloc.FormatSize, diff.Signed
	ew := &errWriter{w: w}
	devA, devB := fmt.Sprintf(", device %d", p.Device), fmt.Sprintf(", device %d", p.BDevice)
	ew.printf("A  %s%s\n", shorten(p.A, 97-len(devA)), devA)
	ew.printf("B  %s%s\n", shorten(p.B, 97-len(devB)), devB)
	head := []string{"", "A", "B", "B - A"}
	right := []bool{false, true, true, true}
	row := func(name string, a, b int64) []string {
		return []string{name, size(a), size(b), signed(b - a)}
	}
	count := func(name string, a, b int64) []string {
		d := tabular.Count(b - a)
		if b > a {
			d = "+" + d
		}
		return []string{name, tabular.Count(a), tabular.Count(b), d}
	}
	rows := [][]string{
		row("peak reserved", p.APeakReservedBytes, p.BPeakReservedBytes),
		row("peak allocated", p.APeakAllocatedBytes, p.BPeakAllocatedBytes),
		row("peak live", p.APeakLiveBytes, p.BPeakLiveBytes),
		count("device allocations", p.ADeviceAllocs, p.BDeviceAllocs),
		{"at each peak of reserved:", "", "", ""},
		row("  live", p.ALiveBytes, p.BLiveBytes),
		row("  rounding", p.ARoundingBytes, p.BRoundingBytes),
		row("  fragmented", p.AFragmentedBytes, p.BFragmentedBytes),
		row("  cached", p.ACachedBytes, p.BCachedBytes),
	}
	ew.table(head, right, rows, "  ")
	ew.printf("  %s\n", wrapSizes(fmt.Sprintf("reserved %s = the program holds %s (live) + the allocator keeps %s (rounding, fragmentation, cache)",
		signed(p.DeltaReservedBytes), signed(p.DeltaLiveBytes), signed(p.DeltaAllocatorBytes)), "    "))
	by := string(p.By)
	if p.By == explain.BySite || p.By == explain.ByFrame {
		by += " (file:function, the line left out)"
	}
	ew.printf("  live at each peak, by %s:\n", by)
	head = []string{"A", "B", "B - A", "CHANGE", "SITE"}
	right = []bool{true, true, true, false, false}
	rows = rows[:0]
	var other diff.SiteDiff
	changed := 0
	for _, s := range p.Sites {
		if s.Change == diff.Same {
			continue
		}
		changed++
		if changed > top {
			other.ABytes += s.ABytes
			other.BBytes += s.BBytes
			other.DeltaBytes += s.DeltaBytes
			continue
		}
		rows = append(rows, []string{siteCell(s.ABytes, s.ACount), siteCell(s.BBytes, s.BCount), signed(s.DeltaBytes), s.Change, shorten(diff.ShortSite(s.Site), 50)})
	}
	if changed > top {
		rows = append(rows, []string{size(other.ABytes), size(other.BBytes), signed(other.DeltaBytes), "", fmt.Sprintf("%d other sites", changed-top)})
	}
	if len(rows) == 0 {
		ew.printf("    no site changed\n")
	} else {
		ew.table(head, right, rows, "    ")
	}
	if same := len(p.Sites) - changed; same > 0 {
		ew.printf("    (%s unchanged)\n", plural(int64(same), "site"))
	}
	for _, s := range diff.Sentences(p) {
		ew.printf("  %s\n", wrapSizes(s, "  "))
	}
	if len(p.Steps) > 0 {
		ew.printf("  steps:\n")
		head = []string{"STEP", "A PEAK RESERVED", "B PEAK RESERVED", "B - A", "A PEAK LIVE", "B PEAK LIVE", "B - A"}
		right = []bool{true, true, true, true, true, true, true}
		rows = rows[:0]
		opt := func(n *int64, f func(int64) string) string {
			if n == nil {
				return "-"
			}
			return f(*n)
		}
		for _, s := range p.Steps {
			rows = append(rows, []string{fmt.Sprint(s.Step), opt(s.APeakReservedBytes, size), opt(s.BPeakReservedBytes, size),
				opt(s.DeltaReservedBytes, signed), size(s.APeakLiveBytes), size(s.BPeakLiveBytes), signed(s.DeltaLiveBytes)})
		}
		ew.table(head, right, rows, "    ")
	}
	return ew.err
}

// siteCell writes a site's bytes and allocations in one run, "-" where
// it has none.
func siteCell(bytes, count int64) string {
	if count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s ×%s", gpualloc.FormatSize(bytes), tabular.Count(count))
}

// writeDiffRanks writes the summary of one device of the ranks, for
// people.
func writeDiffRanks(w io.Writer, s *diff.Summary, top int) error {
	size, signed := gpualloc.FormatSize, diff.Signed
	ew := &errWriter{w: w}
	ew.printf("%d ranks, device %d\n", len(s.Ranks), s.Device)
	ew.printf("  peak        %s: %s, %s over the median %s\n", s.PeakRank, size(maxPeak(s)), signed(s.PeakOverMedianBytes),
		size(s.MedianPeakReservedBytes))
	if s.Divergent != "" {
		at := ""
		if s.DivergentSite != "" {
			at = ", most at " + diff.ShortSite(s.DivergentSite)
		}
		ew.printf("  divergent   %s\n", wrapSizes(fmt.Sprintf("%s: %s from the median%s", s.Divergent, signed(s.DivergentBytes), at), "              "))
	} else {
		ew.printf("  divergent   none: no rank's peak lies more than 3 median deviations and 5%% from the median\n")
	}
	head := []string{"TRACE", "PEAK RESERVED", "- MEDIAN", "PEAK LIVE", "LIVE AT PEAK"}
	right := []bool{false, true, true, true, true}
	var rows [][]string
	for _, r := range s.Ranks {
		rows = append(rows, []string{shorten(r.Trace, 40), size(r.PeakReservedBytes), signed(r.PeakReservedBytes - s.MedianPeakReservedBytes),
			size(r.PeakLiveBytes), size(r.LiveBytes)})
	}
	ew.table(head, right, rows, "    ")
	if s.By == "" {
		ew.printf("  the ranks group their live bytes differently (some record no stacks): no sites\n")
		return ew.err
	}
	ew.printf("  live at each rank's peak, by %s, the widest spread first:\n", s.By)
	head = []string{"MIN", "MEDIAN", "MAX", "MAX - MIN", "SITE"}
	right = []bool{true, true, true, true, false}
	rows = rows[:0]
	for i, site := range s.Sites {
		if i == top {
			rows = append(rows, []string{"", "", "", "", fmt.Sprintf("%d other sites", len(s.Sites)-top)})
			break
		}
		rows = append(rows, []string{size(site.MinBytes), size(site.MedianBytes), size(site.MaxBytes), size(site.MaxBytes - site.MinBytes),
			shorten(diff.ShortSite(site.Site), 50)})
	}
	ew.table(head, right, rows, "    ")
	return ew.err
}

// maxPeak returns the largest peak of reserved bytes of the ranks.
func maxPeak(s *diff.Summary) int64 {
	var m int64
	for _, r := range s.Ranks {
		m = max(m, r.PeakReservedBytes)
	}
	return m
}

// sizeUnit is a number and the binary unit of a size, as
// gpualloc.FormatSize writes it.
var sizeUnit = regexp.MustCompile(`([0-9]) (B|KiB|MiB|GiB|TiB|PiB|EiB)\b`)

// wrapSizes wraps s within 100 columns as wrap does, but never between a
// number and its unit.
func wrapSizes(s, indent string) string {
	s = sizeUnit.ReplaceAllString(s, "${1}\x00${2}")
	return strings.ReplaceAll(wrap(s, 100, indent), "\x00", " ")
}
