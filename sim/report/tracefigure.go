package report

import (
	"fmt"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpualloc/gpualloc/sim"
)

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
		// The two greys named where they are seen.
		fig.legend = []legendEntry{
			{name: "live bytes, the most in each bucket", thumb: areaThumb(liveFill, traceColor, boundWidth)},
			{name: "from the least to the most", thumb: areaThumb(bandFill, bandFill, boundWidth)},
		}
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
	fig.Height = vg.Length(len(fig.panels))*panelHeight + legendHeight(fig.legend, o.Width-4)
	return o.finish(fig)
}
