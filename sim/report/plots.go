package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
)

// Heights of the parts of figures.
const (
	seriesHeight = 2.0 * vg.Inch  // a plot over time, below its legend
	panelHeight  = 1.45 * vg.Inch // each panel of the trace figure
	barPitch     = 0.15 * vg.Inch // a bar and its gap
	barAxes      = 0.42 * vg.Inch // the x axis and margins of a bar chart
	barFill      = 0.72           // share of its pitch a bar fills
	groupFill    = 0.84           // share of a group's pitch its bars fill
)

func newPlot() *plot.Plot {
	p := plot.New()
	style(p)
	return p
}

// traceResults returns the results of trace, in order.
func traceResults(trace string, results []sim.Result) []sim.Result {
	var out []sim.Result
	for _, r := range results {
		if r.Trace == trace {
			out = append(out, r)
		}
	}
	return out
}

// withSeries returns the results that have a series, and their series
// decimated to at most n points.
func withSeries(results []sim.Result, n int) ([]sim.Result, [][]sim.Point) {
	var rs []sim.Result
	var ss [][]sim.Point
	for _, r := range results {
		if r.Series.Len() == 0 {
			continue
		}
		rs = append(rs, r)
		ss = append(ss, sim.Decimate(r.Series.Points(), n))
	}
	return rs, ss
}

// strategyLegend returns a legend entry for each strategy of rs, in order.
func (o *Options) strategyLegend(rs []sim.Result, thumb func(color.Color) func(draw.Canvas)) []legendEntry {
	var out []legendEntry
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.Strategy.Spec] {
			continue
		}
		seen[r.Strategy.Spec] = true
		out = append(out, legendEntry{name: o.Label(r.Strategy.Spec), thumb: thumb(o.color(r.Strategy.Spec))})
	}
	return out
}

// liveEntry is the legend entry of the live bytes, the lower bound, in the
// figures of memory over time.
func liveEntry() legendEntry {
	return legendEntry{name: "live bytes (lower bound)", thumb: areaThumb(liveFill, black, boundWidth)}
}

// MemoryFigure plots memory over the replays of trace: the bytes each
// strategy reserved from the device, one line per strategy (its colour,
// dash pattern and marker), above the live requested bytes of the trace
// (grey, edged in black), the lower bound that any strategy needs. Each
// line is the largest value within each bucket of the series, so every
// peak shows at its height. The x axis is time when the trace has
// timestamps, else the event index; the y axis is logarithmic when
// Options.LogY says so, or by default when the strategies' peaks span more
// than [LogRange] (one outlier would flatten the rest). It returns nil when
// no result of the trace has a series.
func MemoryFigure(trace string, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	rs, ss, ax := o.strategySeries(trace, results)
	if len(rs) == 0 {
		return nil
	}
	legend := append([]legendEntry{liveEntry()}, o.strategyLegend(rs, strategyThumb)...)
	fig, p := o.seriesFigure(trace, "memory", legend, ax, ss)
	fig.Caption = fmt.Sprintf("Bytes reserved from the device by each strategy (lines, each with its own colour, dashes and marker) and bytes requested by the trace's live allocations (grey, edged in black: no strategy can reserve less, and its peak is the lower bound), against %s. Each line is the largest value within each of at most %d buckets of events, so that every peak shows.", ax.what(), o.MaxPoints)
	y := o.memoryScale(p, rs, ss)
	if y.log {
		fig.Caption += " The memory axis is logarithmic."
	}
	live := ax.steps(ss[0], func(q sim.Point) float64 { return y.at(q.Requested.Max) })
	p.Add(areaPlotter{upper: live, fill: liveFill})
	for i, r := range rs {
		p.Add(markedLine{pts: ax.stepsOf(ss[i], y.values(reservedPeaks(ss[i]))), c: o.color(r.Strategy.Spec), slot: i, slots: len(rs)})
	}
	// The lower bound last, thinner than the strategies' lines: a strategy
	// that holds no more than the trace needs shows on both sides of it.
	p.Add(linePlotter{pts: live, sty: draw.LineStyle{Color: black, Width: boundWidth}})
	return o.finish(fig)
}

// LogRange is how far apart the smallest and the largest peak of a figure
// over time may lie before its memory axis turns logarithmic by default.
const LogRange = 10

// yBytes places bytes on a memory axis, linear or logarithmic.
type yBytes struct {
	u   unit
	log bool
	min float64 // the axis's minimum, in u, on a logarithmic axis
}

func (y yBytes) at(b int64) float64 {
	v := float64(b) / y.u.Size
	if y.log {
		return max(v, y.min)
	}
	return v
}

func (y yBytes) values(bs []int64) []float64 {
	v := make([]float64, len(bs))
	for i, b := range bs {
		v[i] = y.at(b)
	}
	return v
}

// memoryScale sets the memory axis of p for the results rs and their
// series ss, as Options.LogY says.
func (o *Options) memoryScale(p *plot.Plot, rs []sim.Result, ss [][]sim.Point) yBytes {
	var peak, lo int64
	for _, r := range rs {
		peak = max(peak, r.PeakReservedBytes, r.PeakRequestedBytes)
		if v := r.PeakReservedBytes; v > 0 && (lo == 0 || v < lo) {
			lo = v
		}
	}
	log := o.LogY == ScaleLog || o.LogY == ScaleAuto && lo > 0 && peak > LogRange*lo
	u := memoryAxis(p, "memory", peak)
	y := yBytes{u: u, log: log}
	if !log || peak <= 0 {
		return y
	}
	// From a power of ten below a tenth of the lower bound: the live
	// bytes' rise from nothing shows, the detail near 0 does not.
	var lower int64
	for _, r := range rs {
		lower = max(lower, r.PeakRequestedBytes)
	}
	bottom := float64(max(lower, 1)) / u.Size / 10
	y.min = math.Pow(10, math.Floor(math.Log10(bottom)))
	p.Y.Scale = plot.LogScale{}
	p.Y.Min, p.Y.Max = y.min, float64(peak)/u.Size*1.3
	p.Y.Tick.Marker = plainLogTicks{}
	return y
}

// MemoryPanelsFigure is MemoryFigure in small multiples: one panel per
// strategy, each with the live requested bytes (the lower bound) and that
// strategy's reserved bytes, every panel on the same axes, so that
// strategies whose lines coincide in MemoryFigure are seen one by one. It
// returns nil when no result of the trace has a series.
func MemoryPanelsFigure(trace string, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	legend := []legendEntry{liveEntry(), {name: "reserved by the strategy", thumb: lineThumb(traceColor, dataWidth)}}
	fig, ax := o.panelsFigure(trace, "memory-panels", results, legend, func(p *plot.Plot, i int, rs []sim.Result, ss [][]sim.Point, ax xAxis) string {
		y := o.memoryScale(p, rs, ss)
		// A short label and few ticks: a panel is a fraction of an inch tall.
		p.Y.Label.Text = y.u.Name
		if y.log {
			p.Y.Tick.Marker = decadeTicks{}
		} else {
			p.Y.Tick.Marker = plainTicks{3}
		}
		live := ax.steps(ss[i], func(q sim.Point) float64 { return y.at(q.Requested.Max) })
		p.Add(areaPlotter{upper: live, fill: liveFill},
			linePlotter{pts: ax.stepsOf(ss[i], y.values(reservedPeaks(ss[i]))), sty: draw.LineStyle{Color: shade(o.color(rs[i].Strategy.Spec)), Width: 1.25 * dataWidth}},
			linePlotter{pts: live, sty: draw.LineStyle{Color: black, Width: boundWidth}})
		return o.Label(rs[i].Strategy.Spec)
	})
	if fig == nil {
		return nil
	}
	fig.Title = trace + ": memory over time, by strategy"
	fig.Caption = fmt.Sprintf("Memory over time as in the figure above, one panel per strategy on the same axes: the bytes the strategy reserved (line) above the trace's live requested bytes (grey, edged in black: the lower bound), against %s.", ax.what())
	return o.finish(fig)
}

// panelsFigure is a figure of trace in small multiples: one panel per
// result of trace that has a series, in two columns when there are more
// than three, each given its plotters by fill (of panel i, with the
// results, their decimated series and the x axis), which returns the
// panel's name; tick labels only on the outer panels. It returns nil when no result of
// trace has a series, and the x axis.
func (o *Options) panelsFigure(trace, what string, results []sim.Result, legend []legendEntry,
	fill func(p *plot.Plot, i int, rs []sim.Result, ss [][]sim.Point, ax xAxis) string) (*Figure, xAxis) {
	rs, ss, ax := o.strategySeries(trace, results)
	if len(rs) == 0 {
		return nil, ax
	}
	cols := 1
	if len(rs) > 3 {
		cols = 2
	}
	rows := (len(rs) + cols - 1) / cols
	// A panel squeezed by Options.Height labels only its axis's ends.
	squeezed := o.Height > 0 && (o.Height-legendHeight(legend, o.Width-4)-panelAxes)/vg.Length(rows) < panelRow*0.8
	fig := &Figure{
		Name: o.stem(trace) + "-" + what, Trace: trace,
		Width:  o.Width,
		Height: legendHeight(legend, o.Width-4) + vg.Length(rows)*panelRow + panelAxes,
		legend: legend,
		cols:   cols,
	}
	for i := range rs {
		p := timePlot(ax, ss...)
		p.Add(cornerLabel{text: fill(p, i, rs, ss, ax)})
		if squeezed {
			p.Y.Tick.Marker = endTicks{p.Y.Tick.Marker}
		}
		if i < len(rs)-cols {
			p.X.Label.Text = ""
			p.X.Tick.Marker = blankTicks{p.X.Tick.Marker}
		}
		if i%cols != 0 {
			p.Y.Label.Text = ""
			p.Y.Tick.Marker = blankTicks{p.Y.Tick.Marker}
		}
		fig.panels = append(fig.panels, p)
	}
	return fig, ax
}

// Heights of a figure in small multiples: a row of panels, and the x axis
// below the last.
const (
	panelRow  = 0.62 * vg.Inch
	panelAxes = 0.3 * vg.Inch
)

// decadeTicks mark a logarithmic axis at its powers of ten.
type decadeTicks struct{}

func (decadeTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for v := math.Pow(10, math.Ceil(math.Log10(min))); v <= max; v *= 10 {
		ts = append(ts, plot.Tick{Value: v, Label: trimFloat(v, 4)})
	}
	return ts
}

// cornerLabel names a panel in the top left corner of its data area, on a
// ground of translucent white, over what the panel draws.
type cornerLabel struct{ text string }

func (l cornerLabel) Plot(c draw.Canvas, _ *plot.Plot) {
	sty := textStyle(smallPt)
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YTop
	at := vg.Point{X: c.Min.X + 2, Y: c.Max.Y - 1}
	r := sty.Rectangle(l.text)
	c.SetColor(color.NRGBA{R: 255, G: 255, B: 255, A: 200}) // the data shows through
	c.Fill(vg.Rectangle{Min: vg.Point{X: at.X + r.Min.X - 1, Y: at.Y + r.Min.Y}, Max: vg.Point{X: at.X + r.Max.X + 1, Y: at.Y + r.Max.Y}}.Path())
	c.FillText(sty, at, l.text)
}

// endTicks are the ticks of t with only the first and the last label.
type endTicks struct{ t plot.Ticker }

func (e endTicks) Ticks(min, max float64) []plot.Tick {
	ts := e.t.Ticks(min, max)
	first, last := -1, -1
	for i, t := range ts {
		if t.Label != "" {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	for i := range ts {
		if i != first && i != last {
			ts[i].Label = ""
		}
	}
	return ts
}

// blankTicks are the ticks of t without their labels: the inner panels of
// small multiples share the outer panels' labels.
type blankTicks struct{ t plot.Ticker }

func (b blankTicks) Ticks(min, max float64) []plot.Tick {
	ts := b.t.Ticks(min, max)
	for i := range ts {
		ts[i].Label = ""
	}
	return ts
}

// FragmentationFigure plots fragmentation over the replays of trace in
// small multiples, one panel per strategy on the same axes: 1 - requested
// / reserved bytes after the last event of each bucket of the series
// (GMLake's definition taken at that moment), as a step line over a light
// area, and the result's Fragmentation (taken at the peaks of the whole
// replay, the table's FRAG) as a dashed line and a figure after the
// strategy's name. Where nothing is live the ratio is undefined and
// nothing is drawn.
// It returns nil when no result of the trace has a series.
func FragmentationFigure(trace string, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	fig, ax := o.panelsFigure(trace, "fragmentation", results, nil, func(p *plot.Plot, i int, rs []sim.Result, ss [][]sim.Point, ax xAxis) string {
		p.Y.Label.Text = "frag."
		p.Y.Min, p.Y.Max = 0, 1
		p.X.Padding = 1.5 // a line at 0% clear of the axis
		p.Y.Tick.Marker = percentTicks{3}
		pts := ax.steps(ss[i], func(q sim.Point) float64 {
			if q.Requested.End <= 0 || q.Reserved.End <= 0 {
				return math.NaN()
			}
			return min(max(1-float64(q.Requested.End)/float64(q.Reserved.End), 0), 1)
		})
		c := o.color(rs[i].Strategy.Spec)
		for _, run := range runs(pts) {
			p.Add(areaPlotter{upper: run, fill: tint(c)})
		}
		for _, run := range runs(pts) {
			p.Add(linePlotter{pts: run, sty: draw.LineStyle{Color: c, Width: boundWidth}})
		}
		if r := rs[i]; r.OOMs == 0 && r.PeakReservedBytes > 0 {
			f := min(max(r.Fragmentation, 0), 1)
			p.Add(refLine{at: f, horizontal: true})
		}
		return o.Label(rs[i].Strategy.Spec) + ": " + fragmentation(rs[i])
	})
	if fig == nil {
		return nil
	}
	fig.Title = trace + ": fragmentation over time"
	fig.Caption = fmt.Sprintf("Fragmentation of each strategy against %s, one panel per strategy: 1 - requested / reserved bytes, sampled after the last event of each of at most %d buckets of events (GMLake's definition). 0 is ideal. Where nothing is live the ratio is undefined and nothing is drawn. The dashed line and the figure after the strategy's name are the table's FRAG, taken at the peaks of the whole replay.", ax.what(), o.MaxPoints)
	return o.finish(fig)
}

// shade is c made darker, for a line alone in its panel that must stand
// out from the live bytes' grey when printed in greyscale.
func shade(c color.RGBA) color.RGBA {
	return color.RGBA{R: uint8(int(c.R) * 65 / 100), G: uint8(int(c.G) * 65 / 100), B: uint8(int(c.B) * 65 / 100), A: 255}
}

// tint is c made light, for an area under a line of colour c.
func tint(c color.RGBA) color.RGBA {
	mix := func(v uint8) uint8 { return uint8(255 - (255-int(v))*30/100) }
	return color.RGBA{R: mix(c.R), G: mix(c.G), B: mix(c.B), A: 255}
}

// PeakFigure draws the peak reserved bytes of each strategy on trace as
// horizontal bars, the lower bound as a dashed line, and on each bar its
// value and its overhead (peak reserved / lower bound), or "oom" for a
// strategy that ran out of memory. It returns nil when trace has no
// results.
func PeakFigure(trace string, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	rs := traceResults(trace, results)
	if len(rs) == 0 {
		return nil
	}
	var lower, top int64
	for _, r := range rs {
		lower = max(lower, r.PeakRequestedBytes)
		top = max(top, r.PeakReservedBytes, r.PeakRequestedBytes)
	}
	u := byteUnit(float64(top))
	legend := []legendEntry{{name: "lower bound: peak live requested, " + gpualloc.FormatSize(lower), thumb: lineThumb(black, refWidth, 2, 1.5)}}
	offline, hasOffline := offlineOf(rs)
	if hasOffline {
		legend = append(legend, legendEntry{name: "offline plan, " + gpualloc.FormatSize(offline), thumb: offlineThumb})
		top = max(top, offline)
		u = byteUnit(float64(top))
	}
	n := len(rs)
	fig := &Figure{
		Name: o.stem(trace) + "-peak", Trace: trace,
		Title:   trace + ": peak reserved memory",
		Caption: "The most memory each strategy held from the device at once (bars), with its overhead over the lower bound (peak reserved / peak live requested: 1× is ideal), and the lower bound itself (dashed).",
		Width:   o.Width,
		legend:  legend,
	}
	lh := legendHeight(legend, o.Width-4)
	fig.Height = lh + vg.Length(n)*barPitch + barAxes
	p := newPlot()
	fig.panels = []*plot.Plot{p}
	p.X.Label.Text = "peak reserved (" + u.Name + ")"
	p.X.Tick.Marker = plainTicks{xLabels}
	p.Add(verticalGrid())
	names := make([]string, n)
	var bars []hbar
	for i, r := range rs {
		y := float64(n - 1 - i)
		names[n-1-i] = o.Label(r.Strategy.Spec)
		label := gpualloc.FormatSize(r.PeakReservedBytes) + " (" + overheadRatio(r) + ")"
		if r.OOMs > 0 {
			label = gpualloc.FormatSize(r.PeakReservedBytes) + " (oom)"
		}
		bars = append(bars, hbar{y: y, value: float64(r.PeakReservedBytes) / u.Size, fill: o.color(r.Strategy.Spec), label: label})
	}
	nominalY(p, names)
	h := hbarPlotter{bars: bars, thickness: barFill, labelSty: textStyle(smallPt)}
	p.Add(h.only(barsOnly), refLine{at: float64(lower) / u.Size})
	if hasOffline {
		fig.Caption += " The dotted line is the offline plan: every allocation placed knowing when it is freed."
		p.Add(offlineLine{at: float64(offline) / u.Size})
	}
	p.Add(h.only(labelsOnly))
	p.X.Min = 0
	fitLabels(p, fig, h, false)
	return o.finish(fig)
}

// OverheadFigure draws the overhead of each strategy on each trace (peak
// reserved / lower bound, 1× being ideal, the overhead of the table and of
// JSON) as a dot plot: a row per strategy, a marker per trace, its shape
// the trace's, so that the figure stays one column wide and under 2.5 in
// tall for ten strategies and reads in greyscale. A strategy that ran out
// of memory on a trace has no marker for it, and a † after its name. The
// axis is logarithmic when an overhead passes 6×. It returns nil when
// there are no results.
func OverheadFigure(results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	if len(results) == 0 {
		return nil
	}
	tracesInOrder := traceNames(results)
	var strategies []string
	for _, r := range results {
		if !slices.Contains(strategies, r.Strategy.Spec) {
			strategies = append(strategies, r.Strategy.Spec)
		}
	}
	hi := 1.0
	for _, r := range results {
		if r.OOMs == 0 {
			hi = max(hi, r.Overhead)
		}
		if r.OfflineBytes != nil && r.PeakRequestedBytes > 0 {
			hi = max(hi, float64(*r.OfflineBytes)/float64(r.PeakRequestedBytes))
		}
	}
	// With offline plans, a row above the strategies holds them.
	rows := len(strategies)
	hasOffline := slices.ContainsFunc(results, func(r sim.Result) bool { return r.OfflineBytes != nil })
	if hasOffline {
		rows++
	}
	var legend []legendEntry
	for i, t := range tracesInOrder {
		legend = append(legend, legendEntry{name: o.traceLabel(t), thumb: glyphThumb(traceGlyph(i))})
	}
	k := len(strategies)
	fig := &Figure{
		Name:    "overhead",
		Title:   "overhead per strategy and trace",
		Caption: "Overhead of each strategy on each trace: peak reserved memory / the lower bound (the peak of live requested bytes), 1× being ideal; the same ratio as the table's OVERHEAD and JSON's overhead. One row per strategy, one marker per trace. † marks a strategy that ran out of memory on a trace, which then has no marker.",
		Width:   o.Width,
		Height:  legendHeight(legend, o.Width-4) + vg.Length(rows)*dotPitch + barAxes,
		legend:  legend,
	}
	p := newPlot()
	fig.panels = []*plot.Plot{p}
	p.X.Label.Text = "overhead (peak reserved / lower bound)"
	logScale := hi > 6
	if logScale {
		p.X.Scale = plot.LogScale{}
	}
	// A little room left of 1×, so that markers there show whole.
	p.X.Min, p.X.Max = 0.95, hi*1.08
	if logScale {
		p.X.Min, p.X.Max = 0.92, hi*1.25
	}
	p.X.Tick.Marker = ratioTicks{log: logScale}
	p.Add(verticalGrid(), horizontalGrid())
	names := make([]string, rows)
	var dots []dot
	for j, sp := range strategies {
		row := float64(k - 1 - j)
		names[k-1-j] = o.Label(sp)
		for g, t := range tracesInOrder {
			for _, r := range traceResults(t, results) {
				if r.Strategy.Spec != sp {
					continue
				}
				if r.OOMs > 0 || r.PeakRequestedBytes == 0 {
					names[k-1-j] = o.Label(sp) + "†"
					continue
				}
				dots = append(dots, dot{x: r.Overhead, y: row + traceOffset(g, len(tracesInOrder)), sty: traceGlyph(g)})
			}
		}
	}
	if hasOffline {
		names[k] = "offline plan"
		dots = append(dots, offlineDots(tracesInOrder, results, float64(k))...)
		fig.Caption += " The top row is the offline plan of each trace over its lower bound: every allocation placed knowing when it is freed."
	}
	nominalY(p, names)
	p.Add(dotPlotter{dots: dots})
	return o.finish(fig)
}

// traceOffset places the g-th of n traces within a row of the overhead
// figure: side by side, so that equal overheads (1× for unpooled) do not
// hide each other.
func traceOffset(g, n int) float64 {
	if n > 1 {
		return 0.3 - 0.6*float64(g)/float64(n-1)
	}
	return 0
}

// dotPitch is the height of a row of the overhead figure.
const dotPitch = 0.15 * vg.Inch

// traceGlyph is the marker of the i-th trace of the overhead figure: a
// shape of its own, in the trace colour, which greyscale keeps.
func traceGlyph(i int) draw.GlyphStyle {
	return draw.GlyphStyle{Color: traceColor, Radius: 2, Shape: markerShapes[i%len(markerShapes)]}
}

func glyphThumb(g draw.GlyphStyle) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		cv.DrawGlyph(g, vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: (cv.Min.Y + cv.Max.Y) / 2})
	}
}

// A dot is a marker at a place of a plot.
type dot struct {
	x, y float64
	sty  draw.GlyphStyle
}

// dotPlotter draws markers inside the data area.
type dotPlotter struct{ dots []dot }

func (d dotPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, q := range d.dots {
		pt := vg.Point{X: trX(q.x), Y: trY(q.y)}
		if c.Contains(pt) {
			c.DrawGlyph(q.sty, pt)
		}
	}
}

// TraceFigure shows trace itself: its live requested bytes over time (the
// band between the smallest and the largest value of each bucket, the
// largest as a line) and, when sizes is not nil, the distribution of its
// request sizes in power-of-two bins (the share of allocations in each).
// It returns nil when there is neither a series nor sizes.
func TraceFigure(trace string, results []sim.Result, sizes *SizeHistogram, opts Options) *Figure {
	o := opts.withDefaults(results)
	_, ss := withSeries(traceResults(trace, results), o.MaxPoints)
	if sizes != nil && sizes.Total() == 0 {
		sizes = nil
	}
	if len(ss) == 0 && sizes == nil {
		return nil
	}
	fig := &Figure{
		Name: o.stem(trace) + "-trace", Trace: trace,
		Title: trace + ": the trace",
		Width: o.Width,
	}
	if len(ss) > 0 {
		s := ss[0]
		ax := newXAxis(s)
		var peak int64
		for _, q := range s {
			peak = max(peak, q.Requested.Max)
		}
		p := timePlot(ax, s)
		u := memoryAxis(p, "live memory", peak)
		hi := ax.steps(s, func(q sim.Point) float64 { return float64(q.Requested.Max) / u.Size })
		lo := ax.steps(s, func(q sim.Point) float64 { return float64(q.Requested.Min) / u.Size })
		p.Add(areaPlotter{upper: hi, fill: liveFill}, areaPlotter{lower: lo, upper: hi, fill: bandFill},
			linePlotter{pts: hi, sty: draw.LineStyle{Color: traceColor, Width: boundWidth}})
		fig.panels = append(fig.panels, p)
		fig.Caption = fmt.Sprintf("Top: bytes requested by live allocations against %s: the line and the light area below it are the largest value within each bucket of events, the darker band reaches down to the smallest. ", ax.what())
	}
	if sizes != nil {
		lo, hi, _ := sizes.bins()
		total := float64(sizes.Total())
		p := newPlot()
		p.Add(horizontalGrid())
		p.X.Label.Text = "request size"
		p.X.Min, p.X.Max = float64(lo-1), float64(hi)
		if hi-lo < 4 { // room for a few labels
			p.X.Min, p.X.Max = float64(lo-1)-1, float64(hi)+1
		}
		p.X.Tick.Marker = log2Ticks{}
		p.Y.Label.Text = "allocations"
		p.Y.Tick.Marker = percentTicks{yLabels}
		var rects []rect
		top := 0.0
		for k := lo; k <= hi; k++ {
			f := float64(sizes.Counts[k]) / total
			top = max(top, f)
			if f > 0 {
				rects = append(rects, rect{x0: float64(k-1) + 0.06, x1: float64(k) - 0.06, y0: 0, y1: f, fill: traceColor})
			}
		}
		p.Y.Min, p.Y.Max = 0, top*1.04
		p.Add(rectPlotter{rects: rects})
		fig.panels = append(fig.panels, p)
		if len(fig.panels) == 2 {
			fig.Caption += "Bottom: "
		}
		fig.Caption += "share of allocations by requested size, in power-of-two bins (a bar from 2^(k-1) to 2^k bytes counts sizes above the first, up to the second)."
	}
	fig.Height = vg.Length(len(fig.panels)) * panelHeight
	return o.finish(fig)
}

// overheadRatio formats a result's overhead as a ratio: 1.00×, 14.0×.
func overheadRatio(r sim.Result) string {
	if r.PeakRequestedBytes == 0 {
		return "-"
	}
	return formatRatio(r.Overhead)
}

// formatRatio formats a ratio with three significant digits: 1.00×, 14.0×,
// 120×.
func formatRatio(v float64) string {
	switch {
	case v >= 99.95:
		return fmt.Sprintf("%.0f×", v)
	case v >= 9.995:
		return fmt.Sprintf("%.1f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

// nominalY labels the y axis with names at 0, 1, ..., without tick marks.
func nominalY(p *plot.Plot, names []string) {
	ticks := make([]plot.Tick, len(names))
	for i, n := range names {
		ticks[i] = plot.Tick{Value: float64(i), Label: n}
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Tick.Length = 0
	p.Y.Min, p.Y.Max = -0.5, float64(len(names))-0.5
}

// fitLabels sets the x axis maximum so that the label written after each
// bar fits inside the data area, with the scale the axis has.
func fitLabels(p *plot.Plot, fig *Figure, h hbarPlotter, logScale bool) {
	lo := p.X.Min
	hi := lo
	for _, b := range h.bars {
		hi = max(hi, b.value)
	}
	if hi <= lo {
		hi = lo + 1
		if logScale {
			hi = lo * 2
		}
	}
	p.X.Max = hi
	lh := legendHeight(fig.legend, fig.Width-4)
	c := draw.NewCanvas(new(recorder.Canvas), fig.Width-4, fig.Height-4-lh)
	for range 3 {
		dc := p.DataCanvas(c)
		w := float64(dc.Max.X - dc.Min.X)
		need := hi
		for _, b := range h.bars {
			room := w - float64(labelGap+minBar+labelWidth(h.labelSty, b.label)) - 2
			if room < w/4 {
				room = w / 4 // a label wider than the plot: give up on it
			}
			if logScale {
				need = max(need, lo*math.Pow(b.value/lo, w/room))
			} else {
				need = max(need, lo+(b.value-lo)*w/room)
			}
		}
		p.X.Max = need
	}
}

func labelWidth(sty text.Style, s string) vg.Length {
	if s == "" {
		return 0
	}
	return sty.Width(s)
}
