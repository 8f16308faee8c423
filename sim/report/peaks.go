package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
)

// The figures of peaks: each strategy's peak reserved bytes on one trace
// (PeakFigure), and each strategy's overhead on every trace
// (OverheadFigure).

// PeakFigure draws the peak reserved bytes of each strategy on trace as
// horizontal bars, the lower bound as a dashed line, and on each bar its
// value and its overhead (peak reserved / lower bound), or "oom" for a
// strategy that ran out of memory. It returns nil when trace has no
// results.
func PeakFigure(trace string, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	rs := groupResults(traceResults(trace, results))
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
	// A long label wraps, and the bars stand apart to make room for it,
	// rather than squeezing the bars into what the label leaves.
	names := make([]string, n)
	for i, r := range rs {
		names[n-1-i] = fitLabel(textStyle(smallPt), o.Label(r.Strategy.Spec), maxLabelWidth(o.Width), maxLabelLines)
	}
	lh := legendHeight(legend, o.Width-4)
	fig.Height = lh + vg.Length(n)*rowPitch(barPitch, names) + barAxes
	p := newPlot()
	fig.panels = []*plot.Plot{p}
	p.X.Label.Text = "peak reserved (" + u.Name + ")"
	p.X.Tick.Marker = plainTicks{xLabels}
	p.Add(verticalGrid())
	var bars []hbar
	for i, r := range rs {
		y := float64(n - 1 - i)
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
// of memory on a trace has no marker for it, and a † after its name, which
// the legend explains (naming the traces, up to three). Rows of one sweep
// sit together. The
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
	strategies = groupVariants(strategies, Sweeps(strategiesOf(results)))
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
	var oomTraces []string
	for i, t := range tracesInOrder {
		legend = append(legend, legendEntry{name: o.traceLabel(t), thumb: glyphThumb(traceGlyph(i))})
		if slices.ContainsFunc(traceResults(t, results), func(r sim.Result) bool { return r.OOMs > 0 || r.PeakRequestedBytes == 0 }) {
			oomTraces = append(oomTraces, o.traceLabel(t))
		}
	}
	if len(oomTraces) > 0 {
		// The dagger explained where it is seen, not in a caption a
		// paper drops: which traces ran out of memory, when few did.
		what := "out of memory on a trace: no marker for it"
		if len(oomTraces) <= 3 {
			what = "out of memory on " + strings.Join(oomTraces, ", ") + ": no marker for it"
		}
		legend = append(legend, legendEntry{name: what, thumb: textThumb("†"), wide: true})
	}
	k := len(strategies)
	labels := make([]string, k)
	for j, sp := range strategies {
		labels[j] = fitLabel(textStyle(smallPt), o.Label(sp), maxLabelWidth(o.Width), maxLabelLines)
	}
	fig := &Figure{
		Name:    "overhead",
		Title:   "overhead per strategy and trace",
		Caption: "Overhead of each strategy on each trace: peak reserved memory / the lower bound (the peak of live requested bytes), 1× being ideal; the same ratio as the table's OVERHEAD and JSON's overhead. One row per strategy, one marker per trace. † marks a strategy that ran out of memory on a trace, which then has no marker.",
		Width:   o.Width,
		Height:  legendHeight(legend, o.Width-4) + vg.Length(rows)*rowPitch(dotPitch, labels) + barAxes,
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
		names[k-1-j] = labels[j]
		for g, t := range tracesInOrder {
			for _, r := range traceResults(t, results) {
				if r.Strategy.Spec != sp {
					continue
				}
				if r.OOMs > 0 || r.PeakRequestedBytes == 0 {
					names[k-1-j] = labels[j] + "†"
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
	if len(dots) == 0 {
		// No replay to place: an axis from 1× to 2×, and the plot says
		// why it is empty, where the markers would be.
		p.X.Scale = plot.LinearScale{}
		p.X.Min, p.X.Max = 0.9, 2.1
		p.X.Tick.Marker = ratioTicks{}
		why := []string{"no replay completed: every strategy ran out of memory", "every replay ran out of memory", "out of memory"}
		if slices.ContainsFunc(results, func(r sim.Result) bool { return r.OOMs == 0 }) {
			why = []string{"no overhead to show: every replay ran out of memory or had nothing live", "no overhead to show", "none"}
		}
		p.Add(centredNote{texts: why})
		fig.Caption += " Here no replay completed, so no marker is drawn."
	}
	return o.finish(fig)
}

// centredNote writes a line of text in the middle of the data area: the
// first of its texts that fits the width, else the last.
type centredNote struct{ texts []string }

func (n centredNote) Plot(c draw.Canvas, _ *plot.Plot) {
	sty := textStyle(smallPt)
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
	at := vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: (c.Min.Y + c.Max.Y) / 2}
	t := n.texts[len(n.texts)-1]
	for _, s := range n.texts {
		if sty.Width(s)+8 <= c.Max.X-c.Min.X {
			t = s
			break
		}
	}
	// A white band behind the text, so that the grid does not cross it.
	w, h := sty.Width(t), sty.Height(t)
	c.FillPolygon(color.White, []vg.Point{
		{X: at.X - w/2 - 3, Y: at.Y - h/2 - 2}, {X: at.X + w/2 + 3, Y: at.Y - h/2 - 2},
		{X: at.X + w/2 + 3, Y: at.Y + h/2 + 2}, {X: at.X - w/2 - 3, Y: at.Y + h/2 + 2}})
	c.FillText(sty, at, t)
}

// groupVariants orders specs so that the variants of each sweep sit
// together, in the sweep's order, where the first of them stood: a
// strategy's default beside the variants of its sweep.
func groupVariants(specs []string, sweeps []Sweep) []string {
	out := make([]string, 0, len(specs))
	done := map[string]bool{}
	for _, s := range specs {
		if done[s] {
			continue
		}
		group := []string{s}
		if sw, _, ok := sweepOf(sweeps, s); ok {
			group = sw.Specs
		}
		for _, v := range group {
			if slices.Contains(specs, v) && !done[v] {
				out = append(out, v)
				done[v] = true
			}
		}
	}
	return out
}

// groupResults orders the results of one trace as groupVariants orders
// their specs.
func groupResults(rs []sim.Result) []sim.Result {
	var specs []string
	for _, r := range rs {
		specs = append(specs, r.Strategy.Spec)
	}
	order := groupVariants(specs, Sweeps(strategiesOf(rs)))
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b sim.Result) int {
		return slices.Index(order, a.Strategy.Spec) - slices.Index(order, b.Strategy.Spec)
	})
	return out
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
	return draw.GlyphStyle{Color: traceColor, Radius: 2, Shape: marker(i)}
}

// textThumb is a legend sample that is a mark of text, as the mark
// written after a name in the figure.
func textThumb(mark string) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		sty := textStyle(smallPt)
		sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
		cv.FillText(sty, vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: (cv.Min.Y + cv.Max.Y) / 2}, mark)
	}
}

func glyphThumb(g draw.GlyphStyle) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		cv.DrawGlyph(g, vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: (cv.Min.Y + cv.Max.Y) / 2})
	}
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
