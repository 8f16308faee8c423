package report

import (
	"math"

	"gonum.org/v1/plot"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// DefaultMaxPoints is the most buckets of a series that a figure draws,
// when [Options].MaxPoints is 0: more than a column-wide figure has
// distinguishable positions at print resolution.
const DefaultMaxPoints = 600

// An xAxis places the buckets of a series along the x axis: by time when
// the trace has timestamps, else by event index.
type xAxis struct {
	time   bool
	origin int64 // the first event's time, µs
	unit   unit  // of time
	label  string
}

// newXAxis chooses the x axis of series: time when every one has
// timestamps, else events.
func newXAxis(series ...[]sim.Point) xAxis {
	hasTime := false
	var t0, t1 int64
	for _, s := range series {
		if len(s) == 0 {
			continue
		}
		first, last := s[0].FirstTimeUS, s[len(s)-1].LastTimeUS
		if first == traces.NoTime || last == traces.NoTime {
			return xAxis{label: "event"}
		}
		if !hasTime {
			t0, t1 = first, last
		}
		hasTime = true
		t0, t1 = min(t0, first), max(t1, last)
	}
	if !hasTime {
		return xAxis{label: "event"}
	}
	u := timeUnit(float64(t1 - t0))
	return xAxis{time: true, origin: t0, unit: u, label: "time (" + u.Name + ")"}
}

// strategySeries returns the results of trace that have a series, their
// series decimated to at most o.MaxPoints points, and the x axis of them.
func (o *Options) strategySeries(trace string, results []sim.Result) ([]sim.Result, [][]sim.Point, xAxis) {
	rs, ss := withSeries(groupResults(traceResults(trace, results)), o.MaxPoints)
	return rs, ss, newXAxis(ss...)
}

// seriesFigure is the frame of a figure of trace over time, named after
// what it shows: a legend, and one plot of ss along ax (see [timePlot]).
func (o *Options) seriesFigure(trace, what string, legend []legendEntry, ax xAxis, ss [][]sim.Point) (*Figure, *plot.Plot) {
	lh := legendHeight(legend, o.Width-4)
	p := timePlot(ax, ss...)
	return &Figure{
		Name: o.stem(trace) + "-" + what, Trace: trace,
		Title:  trace + ": " + what + " over time",
		Width:  o.Width,
		Height: seriesHeight + lh,
		legend: legend,
		panels: []*plot.Plot{p},
	}, p
}

// timePlot returns a plot with a horizontal grid and, along x, time or the
// event index: ax, its bounds those of ss.
func timePlot(ax xAxis, ss ...[]sim.Point) *plot.Plot {
	p := newPlot()
	p.Add(horizontalGrid())
	p.X.Label.Text = ax.label
	p.X.Min, p.X.Max = ax.bounds(ss...)
	p.X.Tick.Marker = ax.ticker()
	return p
}

// memoryAxis makes the y axis of p bytes from 0 to a little above peak,
// labelled what, in the unit it returns.
func memoryAxis(p *plot.Plot, what string, peak int64) unit {
	u := byteUnit(float64(peak))
	p.Y.Label.Text = what + " (" + u.Name + ")"
	p.Y.Min, p.Y.Max = 0, math.Max(float64(peak)/u.Size*1.04, 1e-9)
	p.Y.Tick.Marker = plainTicks{yLabels}
	return u
}

// span returns where bucket i of s starts and ends on the axis: up to the
// start of the next bucket, so that the steps of a series join.
func (a xAxis) span(s []sim.Point, i int) (x0, x1 float64) {
	p := s[i]
	if !a.time {
		return float64(p.First), float64(p.Last + 1)
	}
	end := p.LastTimeUS
	if i+1 < len(s) {
		end = s[i+1].FirstTimeUS
	}
	return a.at(p.FirstTimeUS), a.at(end)
}

// at places a timestamp.
func (a xAxis) at(t int64) float64 { return float64(t-a.origin) / a.unit.Size }

// steps returns the step line of value over the buckets of s: each bucket's
// value held across its span. Neighbours of the same value make one step.
func (a xAxis) steps(s []sim.Point, value func(sim.Point) float64) []xy {
	v := make([]float64, len(s))
	for i, p := range s {
		v[i] = value(p)
	}
	return a.stepsOf(s, v)
}

// stepsOf is steps with the values given, one per bucket.
func (a xAxis) stepsOf(s []sim.Point, values []float64) []xy {
	pts := make([]xy, 0, 2*len(s))
	for i, v := range values {
		x0, x1 := a.span(s, i)
		if n := len(pts); n >= 2 && pts[n-1].Y == v && pts[n-2].Y == v {
			pts[n-1].X = x1
			continue
		}
		pts = append(pts, xy{x0, v}, xy{x1, v})
	}
	return pts
}

// reservedPeaks returns the largest reserved bytes of each bucket of s. A
// series' range of reserved bytes spans each event from just before it, so
// the largest value of a bucket of one event may be the value before it,
// which the previous bucket already shows: such a bucket shows the value
// after its event instead, so that a step down is drawn at the event that
// made it, not one event late. A peak within an event shows still.
func reservedPeaks(s []sim.Point) []int64 {
	out := make([]int64, len(s))
	for i, p := range s {
		out[i] = p.Reserved.Max
		if i > 0 && p.First == p.Last && p.Reserved.Max == s[i-1].Reserved.End {
			out[i] = p.Reserved.End
		}
	}
	return out
}

// bounds returns the range of the axis over the series.
func (a xAxis) bounds(series ...[]sim.Point) (lo, hi float64) {
	first := true
	for _, s := range series {
		if len(s) == 0 {
			continue
		}
		x0, _ := a.span(s, 0)
		_, x1 := a.span(s, len(s)-1)
		if first {
			lo, hi, first = x0, x1, false
		}
		lo, hi = min(lo, x0), max(hi, x1)
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

type xy struct{ X, Y float64 }

// what names the axis in captions.
func (a xAxis) what() string {
	if a.time {
		return "time since the first event"
	}
	return "the index of the event in the trace"
}

// ticker returns the axis's tick marks.
func (a xAxis) ticker() plot.Ticker {
	if a.time {
		return plainTicks{xLabels}
	}
	return siTicks{xLabels}
}
