package report

import (
	"bytes"
	"fmt"
	"image/color"
	"runtime"
	"slices"
	"strings"
	"sync"

	"gonum.org/v1/plot/vg"

	"github.com/gpualloc/gpualloc/sim"
)

// Options say how to make a report. The zero value is the default: PNG and
// SVG figures a column wide.
type Options struct {
	// Formats are the file formats of the figures; empty means
	// DefaultFormats (PNG and SVG).
	Formats []Format
	// DPI is the resolution of PNG figures; 0 means DefaultDPI (300).
	DPI int
	// Width is the width of every figure; 0 means ColumnWidth (3.3 in).
	// Fonts keep their size in points whatever the width.
	Width vg.Length
	// Height, if > 0, is the height of every figure; 0 sizes each figure
	// to what it holds (bar charts grow with their bars).
	Height vg.Length
	// Title draws each figure's Title above it; by default a figure has
	// none, so that a paper gives its own caption.
	Title bool
	// LogY is the scale of the memory axes of the figures over time.
	LogY Scale
	// Figures are the kinds of figure to make, from FigureKinds; empty
	// means every kind.
	Figures []string
	// MaxPoints is the most buckets of a series a figure draws (see
	// sim.Decimate); 0 means DefaultMaxPoints.
	MaxPoints int

	// Sizes holds the request sizes of traces, by trace name (see
	// SizeCounter), for the trace figures' histograms. A trace without
	// one gets no histogram.
	Sizes map[string]*SizeHistogram

	// Label names a strategy spec in legends and on axes; nil means
	// ShortSpec.
	Label func(spec string) string
	// Colors overrides the colours of strategy specs; a spec without one
	// gets its colour from StrategyColors over the specs of the results.
	Colors map[string]color.RGBA

	// Replace lets Write replace the report that its directory holds
	// already; without it Write refuses such a directory (see CheckDir).
	Replace bool

	stems  map[string]string // file name stem of each trace
	labels map[string]string // label of each trace in figures
	colors map[string]color.RGBA
	looks  map[string]look // the looks of sweep variants (see look)
}

// withDefaults fills in the defaults, and the colours and file names that
// depend on the whole set of results.
func (o Options) withDefaults(results []sim.Result) Options {
	if len(o.Formats) == 0 {
		o.Formats = DefaultFormats
	}
	if o.DPI <= 0 {
		o.DPI = DefaultDPI
	}
	if o.Width <= 0 {
		o.Width = ColumnWidth
	}
	if o.MaxPoints <= 0 {
		o.MaxPoints = DefaultMaxPoints
	}
	strategies := strategiesOf(results)
	if o.Label == nil {
		labels := SweepLabels(strategies)
		o.Label = func(spec string) string {
			if l, ok := labels[spec]; ok {
				return l
			}
			return ShortSpec(specOnly(spec))
		}
	}
	if o.colors == nil {
		o.colors = StrategyColors(strategies)
		sweeps := Sweeps(strategies)
		sweepColors(o.colors, sweeps)
		for s, c := range o.Colors {
			o.colors[s] = c
		}
		o.looks = sweepLooks(o.colors, sweeps)
	}
	if o.stems == nil {
		o.stems = FileStems(traceNames(results))
	}
	if o.labels == nil {
		o.labels = traceLabels(traceNames(results))
	}
	return o
}

// traceLabels names traces in figures by the base names of their files
// without the extensions of traces ("tiny" for "testdata/tiny.csv.gz"),
// which keeps legends short, or by their full names when two such names
// are the same.
func traceLabels(names []string) map[string]string {
	out := map[string]string{}
	seen := map[string]bool{}
	for _, n := range names {
		b := trimExt(n)
		if seen[b] {
			for _, m := range names {
				out[m] = m
			}
			return out
		}
		seen[b] = true
		out[n] = b
	}
	return out
}

func (o *Options) traceLabel(trace string) string {
	if l, ok := o.labels[trace]; ok {
		return l
	}
	return trace
}

func (o *Options) color(spec string) color.RGBA {
	if c, ok := o.colors[spec]; ok {
		return c
	}
	return StrategyColors([]sim.Strategy{specOnly(spec)})[spec]
}

// look returns how spec's line is drawn: a sweep variant's look, else its
// colour's (see lookOf).
func (o *Options) look(spec string) look {
	if l, ok := o.looks[spec]; ok {
		return l
	}
	return lookOf(o.color(spec))
}

// specOnly returns the strategy a spec names, for a spec that no result
// holds: what the spec says, without defaults.
func specOnly(spec string) sim.Strategy {
	var s sim.Strategy
	s.UnmarshalText([]byte(spec)) // never fails
	return s
}

func (o *Options) stem(trace string) string {
	if s, ok := o.stems[trace]; ok {
		return s
	}
	return FileStems([]string{trace})[trace]
}

// traceNames returns the traces of results in order of first appearance.
func traceNames(results []sim.Result) []string {
	var names []string
	for _, r := range results {
		if !slices.Contains(names, r.Trace) {
			names = append(names, r.Trace)
		}
	}
	return names
}

// FileStems gives each trace name a stem for file names, safe on any file
// system and distinct from the others even where file systems ignore case:
// the base name without its directory and its extensions (.csv, .csv.gz),
// with every character but letters, digits, '.', '-' and '_' replaced by
// '_' ("testdata/tiny.csv" → "tiny", "my run (2).csv.gz" → "my_run_2").
// A stem already taken gets a suffix: "tiny-2".
func FileStems(names []string) map[string]string {
	out := map[string]string{}
	taken := map[string]bool{}
	for _, name := range names {
		if _, ok := out[name]; ok {
			continue
		}
		s := sanitize(name)
		stem := s
		for i := 2; taken[strings.ToLower(stem)]; i++ {
			stem = fmt.Sprintf("%s-%d", s, i)
		}
		taken[strings.ToLower(stem)] = true
		out[name] = stem
	}
	return out
}

// trimExt returns the base name of a trace's file without the extensions
// of traces: "tiny" for "testdata/tiny.csv.gz".
func trimExt(name string) string {
	base := name
	if i := strings.LastIndexAny(base, `/\`); i >= 0 && i < len(base)-1 {
		base = base[i+1:]
	}
	for _, ext := range []string{".gz", ".csv", ".pickle", ".pkl", ".txt", ".log", ".json"} {
		if len(base) > len(ext) && strings.EqualFold(base[len(base)-len(ext):], ext) {
			base = base[:len(base)-len(ext)]
		}
	}
	return base
}

func sanitize(name string) string {
	base := trimExt(name)
	var b strings.Builder
	under := false
	for _, r := range base {
		ok := r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_')
		if !ok {
			if !under {
				b.WriteByte('_')
			}
			under = true
			continue
		}
		b.WriteRune(r)
		under = false
	}
	s := strings.Trim(b.String(), "._-")
	if len(s) > 60 {
		s = strings.TrimRight(s[:60], "._-")
	}
	if s == "" {
		s = "trace"
	}
	return s
}

// A Scale is the scale of an axis.
type Scale int

const (
	ScaleAuto   Scale = iota // logarithmic when the values span a wide range
	ScaleLinear              // linear from 0
	ScaleLog                 // logarithmic
)

// FigureKinds are the kinds of figure of a report, as Options.Figures and
// simulate's --figures name them, in the order of the index: the overhead
// and the breakdown of peak reserved memory across traces, and for each sweep (see [Sweeps]) its figures against its
// parameter; then for each trace memory over time (all strategies in one
// plot), memory over time in small multiples (one panel per strategy),
// fragmentation over time, peak reserved, the trace itself and, when there
// is a sweep, peak reserved against device allocations (the Pareto figure).
var FigureKinds = []string{"overhead", "breakdown", "sweep", "memory", "panels", "fragmentation", "peak", "trace", "pareto"}

// ParseFigureKinds parses a comma-separated list of FigureKinds ("all" for
// every kind).
func ParseFigureKinds(s string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.ToLower(strings.TrimSpace(k))
		switch {
		case k == "all":
			out = append(out, FigureKinds...)
		case slices.Contains(FigureKinds, k):
			out = append(out, k)
		default:
			return nil, fmt.Errorf("unknown figure %q (known: all, %s)", k, strings.Join(FigureKinds, ", "))
		}
	}
	return out, nil
}

// Figures returns the figures of a report on results that opts.Figures
// asks for (every kind by default), in the order of the index: the
// overhead and the breakdown across traces, then for each trace (in order of first
// appearance) the kinds of FigureKinds in their order. Figures over time
// need the results' series; they are left out for traces without one.
func Figures(results []sim.Result, opts Options) []*Figure {
	o := opts.withDefaults(results)
	var figs []*Figure
	add := func(f *Figure) {
		if f != nil {
			figs = append(figs, f)
		}
	}
	want := func(kind string) bool { return len(o.Figures) == 0 || slices.Contains(o.Figures, kind) }
	// A variant that refused its settings (sim.Result.Refused) was not
	// replayed: the sweep's figure says so, the others leave it out.
	all := results
	results = slices.DeleteFunc(slices.Clone(results), func(r sim.Result) bool { return r.Refused != "" })
	if want("overhead") {
		add(OverheadFigure(results, o))
	}
	if want("breakdown") {
		add(BreakdownFigure(results, o))
	}
	if want("sweep") {
		for _, sw := range Sweeps(strategiesOf(all)) {
			add(SweepFigure(sw, all, o))
		}
	}
	sweeps := Sweeps(strategiesOf(results))
	for _, t := range traceNames(results) {
		if want("memory") {
			add(MemoryFigure(t, results, o))
		}
		if want("panels") {
			add(MemoryPanelsFigure(t, results, o))
		}
		if want("fragmentation") {
			add(FragmentationFigure(t, results, o))
		}
		if want("peak") {
			add(PeakFigure(t, results, o))
		}
		if want("trace") {
			add(TraceFigure(t, results, o.Sizes[t], o))
		}
		if want("pareto") && len(sweeps) > 0 {
			add(ParetoFigure(t, results, o))
		}
	}
	return figs
}

// finish gives fig the height and title that o asks for.
func (o *Options) finish(fig *Figure) *Figure {
	if fig == nil {
		return nil
	}
	if o.Height > 0 {
		fig.Height = o.Height
	} else if o.Title {
		fig.Height += titleHeight()
	}
	fig.title = o.Title
	return fig
}

// The data files of a report.
const (
	SummaryCSV    = "summary.csv"
	SummaryJSON   = "summary.json"
	TimeSeriesCSV = "timeseries.csv"
	IndexHTML     = "index.html"
)

// Write writes a report on results into dir, which it creates if need be:
// summary.csv and summary.json (the result schema, with the rows of each
// device of a trace of several devices: see sim.WithDevices), timeseries.csv (see
// TimeSeriesHeader), every figure of Figures in each format of
// opts.Formats (NAME.png, NAME.svg, NAME.pdf), index.html, which shows
// the summary table and every figure in one page, and ManifestFile. It
// returns the names of the report's files, sorted, the manifest aside.
//
// The report is written whole or not at all (see [DirWriter]): a
// directory that holds a report already is refused unless opts.Replace,
// which replaces every file of the old report; other files in dir are left
// alone.
//
// The report depends only on results and opts: it holds no dates, and
// writing the same results twice gives the same files, byte for byte, but
// for the timings in the summaries.
func Write(dir string, results []sim.Result, opts Options) ([]string, error) {
	d, err := NewDirWriter(dir, opts.Replace)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer d.Abort()
	files, err := WriteFiles(d, results, opts)
	if err != nil {
		return nil, err
	}
	if err := d.Commit(); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return files, nil
}

// WriteFiles writes the files of the report on results, as Write does,
// with d, and returns the names of d's files, sorted; the caller commits
// d, after files of its own if it has any.
func WriteFiles(d *DirWriter, results []sim.Result, opts Options) ([]string, error) {
	o := opts.withDefaults(results)
	write := func(name string, data []byte) error {
		if err := d.WriteFile(name, data); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		return nil
	}
	for _, data := range []struct {
		name string
		fn   func(*bytes.Buffer) error
	}{
		{SummaryCSV, func(b *bytes.Buffer) error { return WriteCSV(b, sim.WithDevices(results)) }},
		{SummaryJSON, func(b *bytes.Buffer) error { return WriteJSON(b, sim.WithDevices(results)) }},
		{TimeSeriesCSV, func(b *bytes.Buffer) error { return WriteTimeSeries(b, results) }},
	} {
		var b bytes.Buffer
		if err := data.fn(&b); err != nil {
			return nil, fmt.Errorf("report: %s: %w", data.name, err)
		}
		if err := write(data.name, b.Bytes()); err != nil {
			return nil, err
		}
	}

	figs := Figures(results, o)
	rendered, err := render(figs, o, d.stopped)
	if err != nil {
		return nil, err
	}
	for i, fig := range figs {
		for j, f := range o.Formats {
			if err := write(fig.Name+"."+string(f), rendered[i][j]); err != nil {
				return nil, err
			}
		}
	}
	// The index shows every figure as SVG, made for it when the report
	// has no SVG files (--plot-format pdf alone).
	var svgs [][]byte
	if k := slices.Index(o.Formats, SVG); k >= 0 {
		for i := range figs {
			svgs = append(svgs, rendered[i][k])
		}
	} else {
		only := o
		only.Formats = []Format{SVG}
		previews, err := render(figs, only, d.stopped)
		if err != nil {
			return nil, err
		}
		for i := range figs {
			svgs = append(svgs, previews[i][0])
		}
	}
	var idx bytes.Buffer
	if err := writeIndex(&idx, results, figs, svgs, o); err != nil {
		return nil, fmt.Errorf("report: %s: %w", IndexHTML, err)
	}
	if err := write(IndexHTML, idx.Bytes()); err != nil {
		return nil, err
	}
	files := slices.Clone(d.files)
	slices.Sort(files)
	return files, nil
}

// render renders every figure in every format, figures in parallel: out[i][j]
// is figure i in format j. A figure is not begun once stopped returns an
// error, which render then returns.
func render(figs []*Figure, o Options, stopped func() error) ([][][]byte, error) {
	out := make([][][]byte, len(figs))
	errs := make([]error, len(figs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, fig := range figs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := stopped(); err != nil {
				errs[i] = err
				return
			}
			for _, f := range o.Formats {
				var b bytes.Buffer
				if err := fig.Write(&b, f, o.DPI); err != nil {
					errs[i] = err
					return
				}
				out[i] = append(out[i], b.Bytes())
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
