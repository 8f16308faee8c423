package report

import (
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/gpualloc/gpualloc/sim"
)

// What the figures share: their heights, a styled plot, the results and
// series of one trace, and the legend of strategies. The figures
// themselves are in memory.go (memory over time), peaks.go (peaks and
// overhead), tracefigure.go (the trace itself) and sweep.go (sweeps and
// Pareto fronts); offline.go adds the offline plan to them.

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

// strategyLegend returns a legend entry for each strategy of rs, in order,
// with the sample of its line.
func (o *Options) strategyLegend(rs []sim.Result) []legendEntry {
	var out []legendEntry
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.Strategy.Spec] {
			continue
		}
		seen[r.Strategy.Spec] = true
		out = append(out, legendEntry{name: o.Label(r.Strategy.Spec), thumb: o.look(r.Strategy.Spec).thumb()})
	}
	return out
}

// liveEntry is the legend entry of the live bytes, the lower bound, in the
// figures of memory over time.
func liveEntry() legendEntry {
	return legendEntry{name: "live bytes (lower bound)", thumb: areaThumb(liveFill, black, boundWidth)}
}
