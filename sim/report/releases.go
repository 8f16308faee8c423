package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpualloc/gpualloc/internal/tabular"
	"github.com/gpualloc/gpualloc/sim"
)

// A sweep over releases (pytorch:version=2.1..2.11) answers "what would
// each release have done with my run": its figure gives, release by
// release, the peak of reserved memory, the device allocations and the
// OOMs, each release's figures whatever they are. A release that ran out
// of memory keeps its peak and device allocations (the line of a sweep
// over numbers leaves a gap), since its OOMs are what differs; a release
// that refused the settings (sim.Result.Refused) stands as a grey band.

// refusedBand is the colour of the band of a release that refused the
// settings.
var refusedBand = color.RGBA{R: 0xee, G: 0xee, B: 0xee, A: 255}

// releaseFigure plots sw, whose first varied parameter's values xs are
// releases in order, against them, one line per trace (and combination of
// the other varied parameters): peak reserved bytes (top) and device
// allocations (middle), each axis spanning the values rather than starting
// at 0, since releases differ by a few percent, with the value written
// where it changes from the release before, and the device's capacity
// dashed when the peaks come near it; and OOMs as bars (bottom),
// each count written. Releases are placed evenly in order, each labelled
// by its number alone under the axis, which names the parameter. It
// returns nil when no result is of sw.
func releaseFigure(sw Sweep, xs []string, results []sim.Result, o Options) *Figure {
	param := sw.Params[0]
	type line struct {
		name      string
		peak, dev []xy // NaN Y: refused
		ooms      []xy
	}
	var lines []*line
	refused := map[int]bool{}
	for _, r := range results {
		_, i, ok := sweepOf([]Sweep{sw}, r.Strategy.Spec)
		if !ok {
			continue
		}
		name := o.traceLabel(r.Trace)
		for j, p := range sw.Params[1:] {
			name += ", " + p + "=" + sw.Values[i][j+1]
		}
		k := slices.IndexFunc(lines, func(l *line) bool { return l.name == name })
		if k < 0 {
			k = len(lines)
			lines = append(lines, &line{name: name})
		}
		l := lines[k]
		x := float64(slices.Index(xs, sw.Values[i][0]))
		if r.Refused != "" {
			refused[int(x)] = true
			l.peak = append(l.peak, xy{x, math.NaN()})
			l.dev = append(l.dev, xy{x, math.NaN()})
			continue
		}
		l.peak = append(l.peak, xy{x, float64(r.PeakReservedBytes)})
		l.dev = append(l.dev, xy{x, float64(r.DeviceMallocs)})
		l.ooms = append(l.ooms, xy{x, float64(r.OOMs)})
	}
	if len(lines) == 0 {
		return nil
	}
	byX := func(a, b xy) int { return cmp.Compare(a.X, b.X) }
	var top float64
	for _, l := range lines {
		slices.SortFunc(l.peak, byX)
		slices.SortFunc(l.dev, byX)
		slices.SortFunc(l.ooms, byX)
		for _, q := range l.peak {
			if !math.IsNaN(q.Y) {
				top = max(top, q.Y)
			}
		}
	}
	colors := traceColors(len(lines))
	var legend []legendEntry
	for i, l := range lines {
		legend = append(legend, legendEntry{name: l.name, thumb: markerLineThumb(colors[i], i)})
	}
	// The device's capacity, when every release ran on the same and it
	// lies near the peaks: a release at it ran out of memory there.
	var capacity int64
	for _, r := range results {
		if _, _, ok := sweepOf([]Sweep{sw}, r.Strategy.Spec); ok && r.Refused == "" {
			if capacity != 0 && r.CapacityBytes != capacity {
				capacity = -1
				break
			}
			capacity = r.CapacityBytes
		}
	}
	u := byteUnit(top)
	showCapacity := capacity > 0 && float64(capacity) <= top*1.02
	if showCapacity {
		legend = append(legend, legendEntry{name: "the device's capacity, " + strconv.FormatFloat(float64(capacity)/u.Size, 'g', 4, 64) + " " + u.Name,
			thumb: lineThumb(black, refWidth, 2, 1.5)})
	}
	if len(refused) > 0 {
		legend = append(legend, legendEntry{name: "refused the settings: not replayed", thumb: areaThumb(refusedBand, refusedBand, 0)})
	}
	fig := &Figure{
		Name:  "sweep-" + sanitize(sw.Strategy+"-"+param),
		Title: sw.Strategy + ": peak reserved, device allocations and OOMs of each release",
		Caption: fmt.Sprintf("What each release of %s (%s) does with each trace: peak reserved memory (top), device allocations (middle) and allocations that ran out of memory (bottom), release by release. The axes of peak reserved and device allocations span the values and do not start at 0; a value is written where it changes from the release before; the dashed line is the device's capacity, when the peaks come near it. A release that refused the settings is a grey band.",
			sw.Strategy, strings.Join(sw.Params, ", ")),
		Width:  o.Width,
		legend: legend,
	}
	one := len(lines) == 1 // values written only on a figure of one line
	panels := []struct {
		label string
		pts   func(*line) []xy
		scale float64
		text  func(float64) string
	}{
		{"peak reserved\n(" + u.Name + ")", func(l *line) []xy { return l.peak }, u.Size, sizeText(lines[0].peak, u)},
		{"device\nmallocs", func(l *line) []xy { return l.dev }, 1, func(v float64) string { return tabular.Count(int64(v)) }},
	}
	ticks := make([]plot.Tick, len(xs))
	for i, v := range xs {
		ticks[i] = plot.Tick{Value: float64(i), Label: v}
	}
	newPanel := func(label string) *plot.Plot {
		p := newPlot()
		p.Y.Label.Text = label
		p.Y.Tick.Marker = countTicks{}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = -0.5, float64(len(xs))-0.5
		return p
	}
	for k, pn := range panels {
		p := newPanel(pn.label)
		if k == 0 {
			p.Y.Tick.Marker = plainTicks{yLabels}
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		var marks []valueMark
		var drawn []plot.Plotter
		for i, l := range lines {
			pts := make([]xy, len(pn.pts(l)))
			for j, q := range pn.pts(l) {
				pts[j] = xy{q.X, q.Y / pn.scale}
				if math.IsNaN(q.Y) {
					continue
				}
				lo, hi = min(lo, pts[j].Y), max(hi, pts[j].Y)
				if prev := pn.pts(l)[max(j-1, 0)].Y; one && (j == 0 || q.Y != prev) {
					marks = append(marks, valueMark{x: q.X, y: pts[j].Y, text: pn.text(q.Y), run: true, below: j > 0 && q.Y < prev})
				}
			}
			drawn = append(drawn, markerLinePlotter{pts: pts, color: colors[i], shape: i})
		}
		if hi < lo { // every release refused
			lo, hi = 0, 1
		}
		// The values span a few percent: the axis spans them, with room
		// above for the values written.
		span := max(hi-lo, hi*0.01, 1/pn.scale)
		p.Y.Min, p.Y.Max = max(lo-span*0.35, 0), hi+span*0.7
		p.Add(refusedBands{at: refused, label: k == 0}, horizontalGrid())
		if k == 0 && showCapacity {
			at := float64(capacity) / u.Size
			p.Y.Max = max(p.Y.Max, at+span*0.3)
			p.Y.Min = max(lo-span*0.7, 0)
			p.Add(refLine{at: at, horizontal: true})
			for i := range marks {
				marks[i].below = true // the capacity's line runs above
			}
		}
		p.Add(drawn...)
		p.Add(valueMarks{marks: marks})
		fig.panels = append(fig.panels, p)
	}

	// OOMs: bars side by side, one per line, each count written.
	p := newPanel("OOMs")
	p.X.Label.Text = "PyTorch release (" + sw.Strategy + ":" + param + ")"
	var bars []rect
	var marks []valueMark
	hi := 0.0
	width := 0.7 / float64(len(lines))
	for i, l := range lines {
		for _, q := range l.ooms {
			x := q.X - 0.35 + width*float64(i)
			bars = append(bars, rect{x0: x + width*0.1, x1: x + width*0.9, y0: 0, y1: q.Y, fill: colors[i]})
			marks = append(marks, valueMark{x: x + width/2, y: q.Y, text: tabular.Count(int64(q.Y))})
			hi = max(hi, q.Y)
		}
	}
	if !one && len(lines) > 3 {
		marks = nil // too narrow to write
	}
	p.Y.Min, p.Y.Max = 0, max(hi*1.35, 1)
	p.Add(refusedBands{at: refused}, horizontalGrid(), rectPlotter{rects: bars}, valueMarks{marks: marks})
	fig.panels = append(fig.panels, p)
	fig.Height = legendHeight(legend, o.Width-4) + 3*sweepHeight
	return o.finish(fig)
}

// sizeText returns how the sizes of pts are written in unit u: with
// the fewest decimals, from one to four, that write different sizes
// differently (18.24 GiB and 18.19 GiB, which FormatSize writes alike).
func sizeText(pts []xy, u unit) func(float64) string {
	decimals := 1
	for ; decimals < 4; decimals++ {
		seen := map[string]float64{}
		clash := false
		for _, q := range pts {
			if math.IsNaN(q.Y) {
				continue
			}
			t := strconv.FormatFloat(q.Y/u.Size, 'f', decimals, 64)
			if v, ok := seen[t]; ok && v != q.Y {
				clash = true
			}
			seen[t] = q.Y
		}
		if !clash {
			break
		}
	}
	return func(v float64) string { return strconv.FormatFloat(v/u.Size, 'f', decimals, 64) + " " + u.Name }
}

// A valueMark is a value written by a point of a plot: centred above it,
// or, for the first point of a run of equal values (run), from it
// rightwards along the run, above it or below it (below, for a value
// lower than the one before, whose line comes down from above).
type valueMark struct {
	x, y       float64
	text       string
	run, below bool
}

// valueMarks writes values by their points, on a white ground over what
// lies behind; a value that would pass the right edge ends at its point.
type valueMarks struct{ marks []valueMark }

func (v valueMarks) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, m := range v.marks {
		sty := textStyle(smallPt)
		sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
		gap := markerRadius + 1.5
		at := vg.Point{X: trX(m.x), Y: trY(m.y) + gap}
		if m.below {
			sty.YAlign = draw.YTop
			at.Y = trY(m.y) - gap
		}
		if m.run {
			sty.XAlign = draw.XLeft
			at.X -= markerRadius
			if at.X+sty.Width(m.text) > c.Max.X {
				sty.XAlign = draw.XRight
				at.X += 2 * markerRadius
			}
		}
		r := sty.Rectangle(m.text)
		ground := vg.Rectangle{Min: vg.Point{X: at.X + r.Min.X - 0.5, Y: at.Y + r.Min.Y}, Max: vg.Point{X: at.X + r.Max.X + 0.5, Y: at.Y + r.Max.Y}}
		c.SetColor(color.White)
		c.Fill(ground.Path())
		c.FillText(sty, at, m.text)
	}
}

// refusedBands fills the column of each release that refused the
// settings, with "refused" written up it when label is set.
type refusedBands struct {
	at    map[int]bool
	label bool
}

func (b refusedBands) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	sty := textStyle(smallPt)
	sty.Color = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 255}
	sty.Rotation = math.Pi / 2
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
	for x := range b.at {
		x0, x1 := trX(float64(x)-0.5), trX(float64(x)+0.5)
		r := vg.Rectangle{Min: vg.Point{X: x0, Y: c.Min.Y}, Max: vg.Point{X: x1, Y: c.Max.Y}}
		c.SetColor(refusedBand)
		c.Fill(r.Path())
		if b.label {
			c.FillText(sty, vg.Point{X: (x0 + x1) / 2, Y: (c.Min.Y + c.Max.Y) / 2}, "refused")
		}
	}
}

// countTicks mark an axis of counts: plainTicks's at whole numbers only.
type countTicks struct{}

func (countTicks) Ticks(min, max float64) []plot.Tick {
	return slices.DeleteFunc(plainTicks{yLabels}.Ticks(min, max), func(t plot.Tick) bool { return t.Value != math.Trunc(t.Value) })
}
