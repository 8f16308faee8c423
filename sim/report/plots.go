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
		if seen[r.Strategy] {
			continue
		}
		seen[r.Strategy] = true
		out = append(out, legendEntry{name: o.Label(r.Strategy), thumb: thumb(o.color(r.Strategy))})
	}
	return out
}

func lineEntry(c color.Color) func(draw.Canvas) { return lineThumb(c, dataWidth) }

// MemoryFigure plots memory over the replays of trace: the bytes each
// strategy reserved from the device, one line per strategy, above the
// live requested bytes of the trace (grey, edged in black), the lower
// bound that any strategy needs. Each line is the largest value within
// each bucket of the series, so every peak shows at its height. The x axis
// is time when the trace has timestamps, else the event index. It returns
// nil when no result of the trace has a series.
func MemoryFigure(trace string, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	rs, ss, ax := o.strategySeries(trace, results)
	if len(rs) == 0 {
		return nil
	}
	var peak int64
	for _, r := range rs {
		peak = max(peak, r.PeakReservedBytes, r.PeakRequestedBytes)
	}
	legend := append([]legendEntry{{name: "live bytes (lower bound)", thumb: areaThumb(liveFill, black, boundWidth)}},
		o.strategyLegend(rs, lineEntry)...)
	fig, p := o.seriesFigure(trace, "memory", legend, ax, ss)
	fig.Caption = fmt.Sprintf("Bytes reserved from the device by each strategy (lines) and bytes requested by the trace's live allocations (grey, edged in black: no strategy can reserve less, and its peak is the lower bound), against %s. Each line is the largest value within each of at most %d buckets of events, so that every peak shows.", ax.what(), o.MaxPoints)
	u := memoryAxis(p, "memory", peak)
	live := ax.steps(ss[0], func(q sim.Point) float64 { return float64(q.Requested.Max) / u.Size })
	p.Add(areaPlotter{upper: live, fill: liveFill})
	for i, r := range rs {
		peaks := reservedPeaks(ss[i])
		v := make([]float64, len(peaks))
		for j, b := range peaks {
			v[j] = float64(b) / u.Size
		}
		pts := ax.stepsOf(ss[i], v)
		p.Add(linePlotter{pts: pts, sty: draw.LineStyle{Color: o.color(r.Strategy), Width: dataWidth}})
	}
	// The lower bound last, thinner than the strategies' lines: a strategy
	// that holds no more than the trace needs shows on both sides of it.
	p.Add(linePlotter{pts: live, sty: draw.LineStyle{Color: black, Width: boundWidth}})
	return fig
}

// FragmentationFigure plots fragmentation over the replays of trace, one
// line per strategy: 1 - requested / reserved bytes after the last event of
// each bucket of the series (GMLake's definition taken at that moment; at
// the peaks of the whole replay it is the result's Fragmentation). A moment
// at which nothing is reserved counts as 0. It returns nil when no result
// of the trace has a series.
func FragmentationFigure(trace string, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	rs, ss, ax := o.strategySeries(trace, results)
	if len(rs) == 0 {
		return nil
	}
	fig, p := o.seriesFigure(trace, "fragmentation", o.strategyLegend(rs, lineEntry), ax, ss)
	fig.Caption = fmt.Sprintf("Fragmentation of each strategy against %s: 1 - requested / reserved bytes, sampled after the last event of each of at most %d buckets of events (GMLake's definition; the table's FRAG takes it at the peaks of the whole replay). 0 is ideal.", ax.what(), o.MaxPoints)
	p.Y.Label.Text = "fragmentation"
	p.Y.Min, p.Y.Max = 0, 1
	p.X.Padding = 1.5 // a line at 0% clear of the axis
	p.Y.Tick.Marker = percentTicks{yLabels}
	for i, r := range rs {
		pts := ax.steps(ss[i], func(q sim.Point) float64 {
			if q.Reserved.End <= 0 {
				return 0
			}
			return min(max(1-float64(q.Requested.End)/float64(q.Reserved.End), 0), 1)
		})
		p.Add(linePlotter{pts: pts, sty: draw.LineStyle{Color: o.color(r.Strategy), Width: dataWidth}})
	}
	return fig
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
		legend = append(legend, legendEntry{name: "offline plan, " + gpualloc.FormatSize(offline), thumb: offlineLegend.thumb})
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
		names[n-1-i] = o.Label(r.Strategy)
		label := gpualloc.FormatSize(r.PeakReservedBytes) + " (" + overheadRatio(r) + ")"
		if r.OOMs > 0 {
			label = gpualloc.FormatSize(r.PeakReservedBytes) + " (oom)"
		}
		bars = append(bars, hbar{y: y, value: float64(r.PeakReservedBytes) / u.Size, fill: o.color(r.Strategy), label: label})
	}
	nominalY(p, names)
	h := hbarPlotter{bars: bars, thickness: barFill, labelSty: textStyle(smallPt)}
	p.Add(h.only(barsOnly),
		vlinePlotter{x: float64(lower) / u.Size, sty: draw.LineStyle{Color: black, Width: refWidth, Dashes: []vg.Length{2, 1.5}}})
	if hasOffline {
		fig.Caption += " The dotted line is the offline plan: every allocation placed knowing when it is freed."
		p.Add(vlinePlotter{x: float64(offline) / u.Size, sty: offlineStyle()})
	}
	p.Add(h.only(labelsOnly))
	p.X.Min = 0
	fitLabels(p, fig, h, false)
	return fig
}

// OverheadFigure draws the overhead of each strategy on each trace (peak
// reserved / lower bound, 1× being ideal) as horizontal bars grouped by
// trace, the overhead written on each bar ("oom" for a strategy that ran
// out of memory). The axis is logarithmic when an overhead passes 6×.
// It returns nil when there are no results.
func OverheadFigure(results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	if len(results) == 0 {
		return nil
	}
	tracesInOrder := traceNames(results)
	var strategies []string
	for _, r := range results {
		if !slices.Contains(strategies, r.Strategy) {
			strategies = append(strategies, r.Strategy)
		}
	}
	k := len(strategies)
	nbars := 0
	hi := 1.0
	for _, r := range results {
		nbars++
		if r.OOMs == 0 {
			hi = max(hi, r.Overhead)
		}
	}
	legend := o.strategyLegend(results, boxThumb)
	if slices.ContainsFunc(results, func(r sim.Result) bool { return r.OfflineBytes != nil }) {
		legend = append(legend, offlineLegend)
	}
	lh := legendHeight(legend, o.Width-4)
	ng := len(tracesInOrder)
	fig := &Figure{
		Name:    "overhead",
		Title:   "overhead per strategy and trace",
		Caption: "Peak reserved memory over the lower bound (the peak of live requested bytes) for each strategy on each trace: 1× is ideal. A strategy that ran out of memory is marked oom.",
		Width:   o.Width,
		Height:  lh + vg.Length(float64(ng*k)/groupFill)*barPitch + barAxes,
		legend:  legend,
	}
	p := newPlot()
	fig.panels = []*plot.Plot{p}
	p.X.Label.Text = "overhead (peak reserved / lower bound)"
	logScale := hi > 6
	if logScale {
		p.X.Scale = plot.LogScale{}
	}
	p.X.Tick.Marker = ratioTicks{log: logScale}
	p.Add(verticalGrid())
	// Each trace's group spans groupFill of a unit of y, a slot for each
	// strategy; the rest of the unit parts the groups.
	slot := groupFill / float64(k)
	var bars []hbar
	names := make([]string, ng)
	for g, t := range tracesInOrder {
		centre := float64(ng - 1 - g)
		names[ng-1-g] = o.traceLabel(t)
		for _, r := range traceResults(t, results) {
			j := slices.Index(strategies, r.Strategy)
			y := centre + groupFill/2 - (float64(j)+0.5)*slot
			b := hbar{y: y, value: math.Max(r.Overhead, 1), fill: o.color(r.Strategy), label: overheadRatio(r)}
			if r.OOMs > 0 {
				b.value, b.label = 1, "oom"
			}
			bars = append(bars, b)
		}
	}
	nominalY(p, names)
	p.Y.Min, p.Y.Max = -groupFill/2-slot/4, float64(ng-1)+groupFill/2+slot/4
	h := hbarPlotter{bars: bars, base: 1, thickness: slot * barFill, labelSty: textStyle(smallPt)}
	p.Add(h.only(barsOnly))
	addOfflineMarks(p, fig, tracesInOrder, results, slot)
	p.Add(h.only(labelsOnly))
	p.X.Min = 1
	fitLabels(p, fig, h, logScale)
	return fig
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
	return fig
}

// overheadRatio formats a result's overhead as a ratio: 1.00×, 14.0×.
func overheadRatio(r sim.Result) string {
	if r.PeakRequestedBytes == 0 {
		return "-"
	}
	v := r.Overhead
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
