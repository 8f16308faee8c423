package report_test

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/cmpimg"
	"gonum.org/v1/plot/vg"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	_ "github.com/gpualloc/gpualloc/strategy/naive"
	_ "github.com/gpualloc/gpualloc/strategy/round"
	_ "github.com/gpualloc/gpualloc/strategy/unpooled"
	"github.com/gpualloc/gpualloc/traces"
)

// strategies are those of the golden figures, with their fixed colours.
var strategies = []string{"naive", "round", "unpooled"}

// tinyTrace returns the text of testdata/tiny.csv, without its time_us
// column if noTime.
func tinyTrace(t testing.TB, noTime bool) string {
	t.Helper()
	b, err := os.ReadFile("testdata/tiny.csv")
	require.NoError(t, err)
	if !noTime {
		return string(b)
	}
	var out strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(line, "#") && strings.Count(line, ",") == 3 {
			line = line[:strings.LastIndexByte(line, ',')] + "\n"
		}
		out.WriteString(line)
	}
	return out.String()
}

// replay replays a trace's text through each strategy, with series, and
// returns the results and the request sizes.
func replay(t testing.TB, name, text string, specs ...string) ([]sim.Result, *report.SizeHistogram) {
	t.Helper()
	var results []sim.Result
	var sizes *report.SizeHistogram
	for i, spec := range specs {
		sel, err := gpualloc.Select(spec, func(string) (string, bool) { return "", false })
		require.NoError(t, err)
		cr, err := traces.NewReader(strings.NewReader(text), name, traces.Options{})
		require.NoError(t, err)
		var r traces.Reader = cr
		if i == 0 {
			sc := report.NewSizeCounter(cr)
			sizes, r = &sc.Sizes, sc
		}
		res, err := sim.Replay(r, sim.Config{Params: sel})
		require.NoError(t, err)
		results = append(results, res)
	}
	return results, sizes
}

// goldenDPI keeps the golden images small.
const goldenDPI = 100

// checkGolden compares a figure's PNG with testdata/NAME_golden.png; the
// -regen flag of cmpimg rewrites the golden file.
func checkGolden(t *testing.T, name string, fig *report.Figure) {
	t.Helper()
	require.NotNil(t, fig)
	var got bytes.Buffer
	require.NoError(t, fig.Write(&got, report.PNG, goldenDPI))
	path := filepath.Join("testdata", name+"_golden.png")
	if *cmpimg.GenerateTestData {
		require.NoError(t, os.WriteFile(path, got.Bytes(), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run 'go test ./sim/report -regen' to create the golden image")
	ok, err := cmpimg.EqualApprox("png", got.Bytes(), want, 0.02)
	require.NoError(t, err)
	if !ok {
		failed := filepath.Join(os.TempDir(), "report-"+name+".png") // kept for a look
		os.WriteFile(failed, got.Bytes(), 0o644)
		t.Errorf("%s differs from %s (the new image is %s; run 'go test ./sim/report -regen' to accept it)", name, path, failed)
	}
}

// TestGoldenFigures checks every kind of figure against a golden image, on
// the tiny trace.
func TestGoldenFigures(t *testing.T) {
	results, sizes := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	noTime, _ := replay(t, "notime.csv", tinyTrace(t, true), strategies...)
	const tr = "testdata/tiny.csv"
	opts := report.Options{}
	for _, tc := range []struct {
		name string
		fig  *report.Figure
	}{
		{"memory", report.MemoryFigure(tr, results, opts)},
		{"memory_events", report.MemoryFigure("notime.csv", noTime, opts)},
		{"memory_log", report.MemoryFigure(tr, results, report.Options{LogY: report.ScaleLog})},
		{"memory_panels", report.MemoryPanelsFigure(tr, results, opts)},
		{"titled", report.PeakFigure(tr, results, report.Options{Title: true, Width: 4 * vg.Inch})},
		{"fragmentation", report.FragmentationFigure(tr, results, opts)},
		{"peak", report.PeakFigure(tr, results, opts)},
		{"trace", report.TraceFigure(tr, results, sizes, opts)},
		{"overhead", report.OverheadFigure(append(slices.Clone(results), noTime...), opts)},
	} {
		t.Run(tc.name, func(t *testing.T) { checkGolden(t, tc.name, tc.fig) })
	}
}

func TestFigureNames(t *testing.T) {
	results, sizes := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	var names []string
	for _, f := range report.Figures(results, report.Options{Sizes: map[string]*report.SizeHistogram{"testdata/tiny.csv": sizes}}) {
		names = append(names, f.Name)
		assert.NotEmpty(t, f.Title, f.Name)
		assert.NotEmpty(t, f.Caption, f.Name)
		assert.Equal(t, report.ColumnWidth, f.Width, f.Name)
		assert.Greater(t, f.Height, f.Width/4, f.Name)
	}
	assert.Equal(t, []string{"overhead", "breakdown", "tiny-memory", "tiny-memory-panels", "tiny-fragmentation", "tiny-peak", "tiny-trace"}, names)
}

// TestFigureOptions checks the options authors change: which figures, the
// height, the title, the memory axis's scale.
func TestFigureOptions(t *testing.T) {
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	kinds, err := report.ParseFigureKinds("memory, peak")
	require.NoError(t, err)
	figs := report.Figures(results, report.Options{Figures: kinds, Height: 2 * vg.Inch, Width: report.PageWidth})
	var names []string
	for _, f := range figs {
		names = append(names, f.Name)
		assert.Equal(t, 2*vg.Inch, f.Height, f.Name)
		assert.Equal(t, report.PageWidth, f.Width, f.Name)
	}
	assert.Equal(t, []string{"tiny-memory", "tiny-peak"}, names)
	_, err = report.ParseFigureKinds("memory,pie")
	assert.EqualError(t, err, `unknown figure "pie" (known: all, overhead, breakdown, sweep, memory, panels, fragmentation, peak, trace, pareto)`)

	plain := report.PeakFigure("testdata/tiny.csv", results, report.Options{})
	titled := report.PeakFigure("testdata/tiny.csv", results, report.Options{Title: true})
	assert.Greater(t, titled.Height, plain.Height, "a title takes room")

	// The naive and unpooled peaks of tiny lie within 10× of each other:
	// linear by default, logarithmic when asked.
	var lin, log bytes.Buffer
	require.NoError(t, report.MemoryFigure("testdata/tiny.csv", results, report.Options{}).Write(&lin, report.SVG, 0))
	require.NoError(t, report.MemoryFigure("testdata/tiny.csv", results, report.Options{LogY: report.ScaleLog}).Write(&log, report.SVG, 0))
	assert.NotEqual(t, lin.String(), log.String())
	assert.Contains(t, report.MemoryFigure("testdata/tiny.csv", results, report.Options{LogY: report.ScaleLog}).Caption, "logarithmic")
	assert.NotContains(t, report.MemoryFigure("testdata/tiny.csv", results, report.Options{}).Caption, "logarithmic")
}

// TestIndexPreviewWithPDF checks that index.html shows every figure when
// the figures are written as PDF alone.
func TestIndexPreviewWithPDF(t *testing.T) {
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	dir := t.TempDir()
	files, err := report.Write(dir, results, report.Options{Formats: []report.Format{report.PDF}})
	require.NoError(t, err)
	idx, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	pdfs := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".pdf") {
			pdfs++
		}
		assert.False(t, strings.HasSuffix(f, ".svg"), "no SVG file: %s", f)
	}
	assert.Equal(t, pdfs, strings.Count(string(idx), "<svg "), "every figure shown inline")
	assert.Contains(t, string(idx), "overflow-x: auto", "a wide table scrolls within the page")
}

// TestTableMarks checks the marks and notes of the summary table: the
// overhead as a ratio, a capacity mark, the allocation tiny leaves live, "oom";
// and the overhead figure's mark of a strategy that ran out of memory.
func TestTableMarks(t *testing.T) {
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	results[0].DeviceFullAllocs = 3
	results[2].OOMs = 1
	tab := report.SummaryTable(results)
	col := slices.Index(tab.Head, "PEAK RESERVED")
	over := slices.Index(tab.Head, "OVERHEAD")
	assert.True(t, strings.HasSuffix(tab.Rows[0][col], report.CapacityMark), tab.Rows[0][col])
	assert.False(t, strings.HasSuffix(tab.Rows[1][col], report.CapacityMark), tab.Rows[1][col])
	assert.Regexp(t, `^[0-9.]+×$`, tab.Rows[1][over])
	assert.Equal(t, "oom", tab.Rows[2][over])
	require.Len(t, tab.Notes, 3)
	assert.Contains(t, tab.Notes[0], "met the device's capacity")
	// tiny ends with one allocation live, the same for every strategy.
	assert.Equal(t, int64(1), results[1].LiveAtEnd)
	assert.Equal(t, "testdata/tiny.csv: 1 allocation (3.81 MiB) never freed: every strategy's peak counts it; if the program frees it, the trace was cut short", tab.Notes[1])
	// A memory snapshot's live allocations at its end were in use: no note.
	snap := slices.Clone(results)
	for i := range snap {
		snap[i].MidRun = true
	}
	assert.Len(t, report.SummaryTable(snap).Notes, len(tab.Notes)-1)

	var b bytes.Buffer
	require.NoError(t, report.OverheadFigure(results, report.Options{}).Write(&b, report.SVG, 0))
	assert.Contains(t, b.String(), results[2].Strategy.Name+"†")

	dir := t.TempDir()
	_, err := report.Write(dir, results, report.Options{Formats: []report.Format{report.SVG}})
	require.NoError(t, err)
	idx, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	assert.Contains(t, string(idx), "never freed")
}

// TestWrite writes a report in every format and checks each file.
func TestWrite(t *testing.T) {
	results, sizes := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	dir := filepath.Join(t.TempDir(), "out")
	files, err := report.Write(dir, results, report.Options{
		Formats: []report.Format{report.PNG, report.SVG, report.PDF},
		Sizes:   map[string]*report.SizeHistogram{"testdata/tiny.csv": sizes},
	})
	require.NoError(t, err)
	var want []string
	for _, fig := range []string{"overhead", "breakdown", "tiny-fragmentation", "tiny-memory", "tiny-memory-panels", "tiny-peak", "tiny-trace"} {
		for _, ext := range []string{"pdf", "png", "svg"} {
			want = append(want, fig+"."+ext)
		}
	}
	want = append(want, "index.html", "summary.csv", "summary.json", "timeseries.csv")
	slices.Sort(want)
	assert.Equal(t, want, files)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.NotEmpty(t, b, f)
		switch filepath.Ext(f) {
		case ".png":
			img, err := png.Decode(bytes.NewReader(b))
			require.NoError(t, err, f)
			assert.Equal(t, 330, img.Bounds().Dx()/3, "%s: 3.3 in at 300 dpi", f) // 990 px
		case ".svg":
			assert.NoError(t, wellFormed(b), f)
			assert.NotContains(t, string(b), "font-family:Liberation Sans;", "%s: fonts need a fallback", f)
		case ".pdf":
			assert.True(t, bytes.HasPrefix(b, []byte("%PDF-")), f)
		}
	}
	idx, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	assert.NoError(t, wellFormed(bytes.TrimPrefix(idx, []byte("<!DOCTYPE html>"))), "index.html")
	assert.Equal(t, 7, strings.Count(string(idx), "<svg "), "every figure inline")
	for _, s := range strategies {
		assert.Contains(t, string(idx), `<td class="text">`+s+"</td>")
	}
}

// wellFormed checks that b parses as XML.
func wellFormed(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false
	d.AutoClose = xml.HTMLAutoClose
	d.Entity = xml.HTMLEntity
	for {
		_, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// TestWriteDeterministic writes a report twice: every file but the
// summaries, which hold timings, is the same byte for byte.
func TestWriteDeterministic(t *testing.T) {
	results, sizes := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	opts := report.Options{
		Formats: []report.Format{report.PNG, report.SVG, report.PDF},
		Sizes:   map[string]*report.SizeHistogram{"testdata/tiny.csv": sizes},
		DPI:     50,
	}
	a, b := t.TempDir(), t.TempDir()
	files, err := report.Write(a, results, opts)
	require.NoError(t, err)
	again, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	_, err = report.Write(b, again, opts)
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasPrefix(f, "summary.") {
			continue
		}
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		assert.True(t, bytes.Equal(x, y), "%s differs between two runs", f)
	}
}

func TestWriteWithoutSeries(t *testing.T) {
	results, _ := replay(t, "tiny.csv", tinyTrace(t, false), strategies...)
	for i := range results {
		results[i].Series = nil
	}
	dir := t.TempDir()
	files, err := report.Write(dir, results, report.Options{Formats: []report.Format{report.PNG}})
	require.NoError(t, err)
	assert.Equal(t, []string{"breakdown.png", "index.html", "overhead.png", "summary.csv", "summary.json", "timeseries.csv", "tiny-peak.png"}, files)
	idx, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	assert.Contains(t, string(idx), `id="tiny-peak"`)
}

func TestWriteTimeSeries(t *testing.T) {
	results, _ := replay(t, "tiny.csv", tinyTrace(t, false), "unpooled")
	var b strings.Builder
	require.NoError(t, report.WriteTimeSeries(&b, results))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	assert.Equal(t, strings.Join(report.TimeSeriesHeader, ","), lines[0])
	assert.Len(t, lines, 1+23, "one row per event of a short trace")
	assert.Equal(t, "tiny.csv,unpooled,0,0,4000000,4000000,4000000,0,0,4000000,4000000,0", lines[1], "reserved from before the event")

	noTime, _ := replay(t, "tiny.csv", tinyTrace(t, true), "unpooled")
	b.Reset()
	require.NoError(t, report.WriteTimeSeries(&b, noTime))
	lines = strings.Split(b.String(), "\n")
	assert.Equal(t, "tiny.csv,unpooled,1,,4000512,4000512,4000512,1,,4000512,4000512,4000000", lines[2], "no time: empty time columns")
}

// specsOnly returns the strategies of specs, as specOnly does.
func specsOnly(specs ...string) []sim.Strategy {
	out := make([]sim.Strategy, len(specs))
	for i, s := range specs {
		out[i] = specOnly(s)
	}
	return out
}

func TestStrategyColors(t *testing.T) {
	builtins := []string{"naive", "round", "unpooled", "bestfit", "buddy", "tlsf", "pytorch", "bfc", "gmlake", "dualcursor"}
	all := report.StrategyColors(specsOnly(builtins...))
	for i, s := range builtins {
		assert.Equal(t, report.Palette[i], all[s], s)
	}
	// A built-in's colour does not depend on the others, nor on order.
	for _, set := range [][]string{{"round"}, {"unpooled", "round"}, {"round", "round:cutoff=20", "x"}} {
		assert.Equal(t, report.Palette[1], report.StrategyColors(specsOnly(set...))["round"], "%v", set)
	}
	// A full spec at the defaults is the built-in.
	round := strategy(t, "round")
	assert.Equal(t, report.Palette[1], report.StrategyColors([]sim.Strategy{round})[round.Spec])

	specs := []string{"naive", "round", "unpooled", "round:cutoff=20", "naive:large_round=1MiB", "mine", "theirs:k=v"}
	a := report.StrategyColors(specsOnly(specs...))
	b := report.StrategyColors(specsOnly("theirs:k=v", "mine", "naive:large_round=1MiB", "round:cutoff=20", "unpooled", "round", "naive"))
	assert.Equal(t, a, b, "independent of order")
	seen := map[any]string{}
	for _, s := range specs {
		if other, ok := seen[a[s]]; ok {
			t.Errorf("%s and %s have the same colour", s, other)
		}
		seen[a[s]] = s
		if !slices.Contains(builtins, s) {
			assert.NotContains(t, report.Palette[:len(builtins)], a[s], "%s takes no built-in's colour while others are free", s)
		}
	}
	many := make([]string, 30)
	for i := range many {
		many[i] = "s" + string(rune('a'+i))
	}
	assert.Len(t, report.StrategyColors(specsOnly(many...)), 30, "colours repeat past the palette")
}

func TestFileStems(t *testing.T) {
	got := report.FileStems([]string{
		"testdata/tiny.csv", "other/tiny.csv.gz", "TINY.csv", "dynamic",
		`C:\traces\run 1 (final).csv`, "../..", "a/b/", "ünïcode.csv", "tiny.csv",
		strings.Repeat("x", 100) + ".csv",
	})
	assert.Equal(t, map[string]string{
		"testdata/tiny.csv":               "tiny",
		"other/tiny.csv.gz":               "tiny-2",
		"TINY.csv":                        "TINY-3",
		"dynamic":                         "dynamic",
		`C:\traces\run 1 (final).csv`:     "run_1_final",
		"../..":                           "trace",
		"a/b/":                            "a_b",
		"ünïcode.csv":                     "n_code",
		"tiny.csv":                        "tiny-4",
		strings.Repeat("x", 100) + ".csv": strings.Repeat("x", 60),
	}, got)
}

func TestParseFormats(t *testing.T) {
	f, err := report.ParseFormats("png, SVG,pdf,png")
	require.NoError(t, err)
	assert.Equal(t, []report.Format{report.PNG, report.SVG, report.PDF}, f)
	_, err = report.ParseFormats("png,bmp")
	assert.EqualError(t, err, `unknown plot format "bmp" (known: png, svg, pdf)`)
	_, err = report.ParseFormats("")
	assert.Error(t, err)
}

func TestSizeCounter(t *testing.T) {
	cr, err := traces.NewReader(strings.NewReader(tinyTrace(t, false)), "tiny", traces.Options{})
	require.NoError(t, err)
	sc := report.NewSizeCounter(cr)
	res, err := sim.Replay(sc, sim.Config{Params: mustParams(t, "naive")})
	require.NoError(t, err)
	assert.Equal(t, "tiny", res.Trace, "the name comes through")
	assert.Equal(t, int64(12), sc.Sizes.Total())
	assert.Equal(t, int64(1), sc.Sizes.Counts[9], "512 B: (256, 512]")
	assert.Equal(t, int64(2), sc.Sizes.Counts[11], "2000 B: (1024, 2048]")
	assert.Equal(t, int64(6000000+6500000), sc.Sizes.Bytes[23], "(4 MiB, 8 MiB]")
	var h report.SizeHistogram
	h.Add(0)
	h.Add(1)
	h.Add(1 << 40)
	assert.Equal(t, int64(1), h.Counts[0])
	assert.Equal(t, int64(1), h.Counts[40])
	assert.Equal(t, int64(2), h.Total())
}

func mustParams(t testing.TB, spec string) *gpualloc.Params {
	sel, err := gpualloc.Select(spec, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	return sel
}

func TestSaveAndSummaries(t *testing.T) {
	results, _ := replay(t, "tiny.csv", tinyTrace(t, false), "naive")
	fig := report.PeakFigure("tiny.csv", results, report.Options{})
	dir := t.TempDir()
	require.NoError(t, fig.Save(filepath.Join(dir, "p.svg"), 0))
	assert.Error(t, fig.Save(filepath.Join(dir, "p.bmp"), 0))
	assert.Nil(t, report.PeakFigure("nosuch", results, report.Options{}))
	assert.Nil(t, report.OverheadFigure(nil, report.Options{}))

	var j, c strings.Builder
	require.NoError(t, report.WriteJSON(&j, nil))
	assert.Equal(t, "[]\n", j.String())
	require.NoError(t, report.WriteCSV(&c, results))
	assert.True(t, strings.HasPrefix(c.String(), "trace,strategy,backend,capacity_bytes,device,events,"), c.String())
	tab := report.SummaryTable(results)
	assert.Equal(t, []string{"tiny.csv", "naive", "23"}, tab.Rows[0][:3])
	assert.Equal(t, len(tab.Head), len(tab.Right))
}

// strategy returns the strategy a spec resolves to, with its defaults.
func strategy(t testing.TB, spec string) sim.Strategy {
	return sim.StrategyOf(mustParams(t, spec))
}

// specOnly returns a strategy known only by its spec, as a result read
// back from JSON holds it.
func specOnly(spec string) sim.Strategy {
	var s sim.Strategy
	s.UnmarshalText([]byte(spec))
	return s
}

func TestShortSpec(t *testing.T) {
	assert.Equal(t, "round", report.ShortSpec(strategy(t, "round:cutoff=24,page=4096,reserve=5")))
	assert.Equal(t, "round:cutoff=20", report.ShortSpec(strategy(t, "round:cutoff=20,page=4KiB,reserve=5")))
	conf, err := gpualloc.Resolve(gpualloc.Spec{Name: "pytorch", Params: []gpualloc.KeyValue{{Key: "conf", Value: "max_split_size_mb:64,expandable_segments:True"}}}, nil)
	require.NoError(t, err)
	assert.Equal(t, "pytorch:conf=max_split_size_mb:64,expandable_segments:True", report.ShortSpec(sim.StrategyOf(conf)), "a conf of several settings")
	assert.Equal(t, "mine:x=1", report.ShortSpec(specOnly("mine:x=1")), "no defaults: as it is")
	assert.Equal(t, "round:cutoff=24,page=4096,reserve=5", report.ShortSpec(specOnly("round:cutoff=24,page=4096,reserve=5")),
		"no registry: the strategy carries its defaults or has none")
}
