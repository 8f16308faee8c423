package report

import (
	"fmt"
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpualloc/gpualloc/sim"
)

// The figures of memory over time: every strategy's reserved bytes over the
// live bytes in one plot (MemoryFigure) or a panel each
// (MemoryPanelsFigure), and fragmentation (FragmentationFigure).

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
	legend := append([]legendEntry{liveEntry()}, o.strategyLegend(rs)...)
	fig, p := o.seriesFigure(trace, "memory", legend, ax, ss)
	fig.Caption = fmt.Sprintf("Bytes reserved from the device by each strategy (lines, each with its own colour, dashes and marker) and bytes requested by the trace's live allocations (grey, edged in black: no strategy can reserve less, and its peak is the lower bound), against %s. Each line is the largest value within each of at most %d buckets of events, so that every peak shows.", ax.what(), o.MaxPoints)
	y := o.memoryScale(p, rs, ss)
	if y.log {
		fig.Caption += " The memory axis is logarithmic."
		fig.logYLabel(p)
	}
	live := ax.steps(ss[0], func(q sim.Point) float64 { return y.at(q.Requested.Max) })
	p.Add(areaPlotter{upper: live, fill: liveFill})
	for i, r := range rs {
		p.Add(markedLine{pts: ax.stepsOf(ss[i], y.values(reservedPeaks(ss[i]))), look: o.look(r.Strategy.Spec), slot: i, slots: len(rs)})
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
		// A long name wraps within the panel's width, the y axis aside.
		panelLabel(p, fitLabel(textStyle(smallPt), fill(p, i, rs, ss, ax), o.Width/vg.Length(cols)-panelYAxis, 2))
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
	panelRow  = 0.74 * vg.Inch // a panel's label above it included
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

// panelLabel names a panel above its data area, flush with its left edge,
// where it covers no data: a blank title makes the layout leave a line of
// room above the data (a line per line of text), and a plotter writes the name there at the left
// rather than the plot at the centre.
func panelLabel(p *plot.Plot, text string) {
	p.Title.Text = strings.Repeat(" \n", strings.Count(text, "\n")) + " "
	p.Title.TextStyle = textStyle(smallPt)
	p.Title.Padding = 1
	p.Add(aboveLabel{text: text})
}

// aboveLabel writes its text above the data area, from its left edge.
type aboveLabel struct{ text string }

func (l aboveLabel) Plot(c draw.Canvas, _ *plot.Plot) {
	sty := textStyle(smallPt)
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YBottom
	c.FillText(sty, vg.Point{X: c.Min.X, Y: c.Max.Y + 1 + sty.FontExtents().Descent}, l.text)
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
