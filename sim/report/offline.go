package report

import (
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
)

// addReferenceColumns adds to t the columns of the references that some
// results have: OFFLINE (the offline plan's bytes), VS OFFLINE (peak
// reserved / the offline plan, as OVERHEAD is over the lower bound) and MIN
// CAPACITY; "-" where a result has none.
func addReferenceColumns(t *Table, results []sim.Result) {
	if slices.ContainsFunc(results, func(r sim.Result) bool { return r.OfflineBytes != nil }) {
		t.Head = append(t.Head, "OFFLINE", "VS OFFLINE")
		t.Right = append(t.Right, true, true)
		for i, r := range results {
			off, vs := "-", "-"
			if r.OfflineBytes != nil {
				off = gpualloc.FormatSize(*r.OfflineBytes)
				switch {
				case r.OOMs > 0:
					vs = "oom"
				case *r.OfflineBytes > 0:
					vs = formatRatio(float64(r.PeakReservedBytes) / float64(*r.OfflineBytes))
				}
			}
			t.Rows[i] = append(t.Rows[i], off, vs)
		}
	}
	if slices.ContainsFunc(results, func(r sim.Result) bool { return r.MinCapacityBytes != nil }) {
		t.Head = append(t.Head, "MIN CAPACITY")
		t.Right = append(t.Right, true)
		for i, r := range results {
			c := "-"
			if r.MinCapacityBytes != nil {
				c = gpualloc.FormatSize(*r.MinCapacityBytes)
			}
			t.Rows[i] = append(t.Rows[i], c)
		}
	}
}

// offlineOf returns the offline bytes of the results of one trace, if one
// has them.
func offlineOf(rs []sim.Result) (int64, bool) {
	for _, r := range rs {
		if r.OfflineBytes != nil {
			return *r.OfflineBytes, true
		}
	}
	return 0, false
}

// The offline plan's line: black and dotted, beside the lower bound's
// dashes.
var offlineDashes = []vg.Length{0.6, 1.4}

const offlineWidth = vg.Length(1.2)

var offlineThumb = lineThumb(black, offlineWidth, offlineDashes...)

// offlineLine is a vertical dotted line across the data area at the
// offline plan.
type offlineLine struct{ at float64 }

func (l offlineLine) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	if x := trX(l.at); x >= c.Min.X-0.01 && x <= c.Max.X+0.01 {
		c.StrokeLine2(draw.LineStyle{Color: black, Width: offlineWidth, Dashes: offlineDashes}, x, c.Min.Y, x, c.Max.Y)
	}
}

// offlineDots returns the markers of the overhead figure's offline row, at
// y: each trace's offline plan over its lower bound, in the trace's marker.
func offlineDots(tracesInOrder []string, results []sim.Result, y float64) []dot {
	var dots []dot
	for g, t := range tracesInOrder {
		rs := traceResults(t, results)
		off, ok := offlineOf(rs)
		if !ok || rs[0].PeakRequestedBytes == 0 {
			continue
		}
		x := float64(off) / float64(rs[0].PeakRequestedBytes)
		dots = append(dots, dot{x: x, y: y + traceOffset(g, len(tracesInOrder)), sty: traceGlyph(g)})
	}
	return dots
}
