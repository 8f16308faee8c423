package report

import (
	"fmt"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
)

// addReferenceColumns adds to t the columns of the references that some
// results have: OFFLINE (the offline plan's bytes, and the peak reserved
// above it) and MIN CAPACITY; "-" where a result has none.
func addReferenceColumns(t *Table, results []sim.Result) {
	if slices.ContainsFunc(results, func(r sim.Result) bool { return r.OfflineBytes != nil }) {
		t.Head = append(t.Head, "OFFLINE", "VS OFFLINE")
		t.Right = append(t.Right, true, true)
		for i, r := range results {
			off, vs := "-", "-"
			if r.OfflineBytes != nil {
				off = gpualloc.FormatSize(*r.OfflineBytes)
				if *r.OfflineBytes > 0 && r.OOMs == 0 {
					vs = fmt.Sprintf("%+.1f%%", 100*(float64(r.PeakReservedBytes)/float64(*r.OfflineBytes)-1))
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

func offlineStyle() draw.LineStyle {
	return draw.LineStyle{Color: black, Width: offlineWidth, Dashes: offlineDashes}
}

var offlineLegend = legendEntry{name: "offline plan", thumb: lineThumb(black, offlineWidth, offlineDashes...)}

// addOfflineMarks draws, across the group of each trace of the overhead
// figure, a dotted mark at the offline plan over the lower bound, and says
// so in the caption.
func addOfflineMarks(p *plot.Plot, fig *Figure, tracesInOrder []string, results []sim.Result, slot float64) {
	ng := len(tracesInOrder)
	var marks segPlotter
	for g, t := range tracesInOrder {
		rs := traceResults(t, results)
		off, ok := offlineOf(rs)
		if !ok || len(rs) == 0 || rs[0].PeakRequestedBytes == 0 {
			continue
		}
		centre := float64(ng - 1 - g)
		x := max(float64(off)/float64(rs[0].PeakRequestedBytes), 1)
		marks.segs = append(marks.segs, [3]float64{x, centre - groupFill/2 - slot/4, centre + groupFill/2 + slot/4})
	}
	if len(marks.segs) == 0 {
		return
	}
	marks.sty = offlineStyle()
	p.Add(marks)
	fig.Caption += " The dotted mark on each trace is its offline plan over the lower bound: every allocation placed knowing when it is freed."
}

// segPlotter draws vertical segments: x, and y from and to, in data
// coordinates.
type segPlotter struct {
	segs [][3]float64
	sty  draw.LineStyle
}

func (s segPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, sg := range s.segs {
		c.StrokeLine2(s.sty, trX(sg[0]), trY(sg[1]), trX(sg[0]), trY(sg[2]))
	}
}
