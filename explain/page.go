package explain

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/figure"
	"github.com/gpualloc/gpualloc/sim/report"
)

// figureGroups is the most groups of live bytes a figure draws apart; the
// rest are drawn as "other".
const figureGroups = 6

// WritePage writes into d an index.html that shows each report, as text
// gives it, with three figures, written beside it as PNG: the device's
// memory over the trace (live bytes stacked by holder, reserved bytes and
// the capacity as lines, the moment marked), where the memory went at the
// moment, and the holders as bars. The reports need their Timeline
// (Options.Timeline). It writes nothing outside d; the caller commits it.
func WritePage(d *report.DirWriter, reps []Report, text func(*Report) string) error {
	names := make([]string, len(reps))
	for i, r := range reps {
		names[i] = r.Trace
	}
	stems := report.FileStems(names)
	var sections []string
	for i := range reps {
		r := &reps[i]
		stem := fmt.Sprintf("%s-device%d", stems[r.Trace], r.Device)
		plots := []struct {
			name, caption string
			plot          func(*Report) (*plot.Plot, *figure.Legend, vg.Length, error)
		}{
			{stem + "-memory", memoryCaption(r), memoryPlot},
			{stem + "-breakdown", "Where the reserved memory went at the moment: the bytes the live allocations asked for, their rounding, the free bytes inside segments that hold a live block (fragmented), the segments that hold none (cached), and the device's memory not reserved.", breakdownPlot},
			{stem + "-holders", fmt.Sprintf("Who holds the live bytes at the moment, by %s: the largest groups, then the rest as other.", r.By), holdersPlot},
		}
		var figs []figure.Figure
		for _, f := range plots {
			p, leg, h, err := f.plot(r)
			if err != nil {
				return err
			}
			png, err := figure.Render(p, leg, h)
			if err != nil {
				return err
			}
			figs = append(figs, figure.Figure{Name: f.name, Caption: f.caption, PNG: png})
		}
		sec, err := figure.Section(d, fmt.Sprintf("%s, device %d", r.Trace, r.Device), text(r), figs)
		if err != nil {
			return err
		}
		sections = append(sections, sec)
	}
	return figure.WriteIndex(d, "explain", "Why the run needed the memory it did, and what would have fit", sections)
}

// memoryCaption says how to read the memory figure of r.
func memoryCaption(r *Report) string {
	s := "The device's live bytes over the trace, stacked by holder (each the largest of its stretch of events), the device's capacity (dashed), and the moment explained (dotted)"
	if r.Timeline != nil && r.Timeline.Reserved != nil {
		return s + ", with the reserved bytes of the replay as the trace ran (black)."
	}
	return s + "; the reserved bytes are left out: the replay's course sums the trace's devices."
}

// groupColor returns the colour of group i.
func groupColor(i int) color.RGBA { return report.Palette[i%len(report.Palette)] }

// label shortens a holder's name for a figure.
func label(s string, n int) string { return figure.Shorten(ShortSite(s), n) }

// memoryPlot draws the device's memory over the trace.
func memoryPlot(r *Report) (*plot.Plot, *figure.Legend, vg.Length, error) {
	tl := r.Timeline
	if tl == nil || len(tl.Points) == 0 {
		return nil, nil, 0, fmt.Errorf("%s: device %d: no timeline to draw", r.Trace, r.Device)
	}
	leg := figure.NewLegend()
	var top int64 = r.CapacityBytes
	for _, p := range tl.Points {
		var s int64
		for _, v := range p.Live {
			s += v
		}
		top = max(top, s)
	}
	for _, p := range tl.Reserved {
		top = max(top, p.Bytes)
	}
	name, scale := figure.Unit(top)
	p := figure.NewPlot()
	p.X.Label.Text = "event"
	p.Y.Label.Text = name
	p.Y.Min = 0
	// The groups drawn apart, the rest summed into the last.
	n := min(len(tl.Groups)-1, figureGroups)
	groups := append(append([]string{}, tl.Groups[:n]...), "other")
	end := float64(tl.Points[len(tl.Points)-1].Last + 1)
	// cum is the course of the live bytes of groups 0 to k; of all of
	// them for the last.
	cum := func(k int) plotter.XYs {
		var xys plotter.XYs
		for _, pt := range tl.Points {
			var s int64
			for j, v := range pt.Live {
				if j <= k || k == n {
					s += v
				}
			}
			xys = append(xys, plotter.XY{X: float64(pt.First), Y: float64(s) / scale})
		}
		return append(xys, plotter.XY{X: end, Y: xys[len(xys)-1].Y})
	}
	for k := n; k >= 0; k-- {
		l, err := plotter.NewLine(cum(k))
		if err != nil {
			return nil, nil, 0, err
		}
		l.StepStyle = plotter.PostStep
		l.FillColor = groupColor(k)
		l.LineStyle.Width = 0
		p.Add(l)
	}
	for k := 0; k <= n; k++ {
		leg.Add(label(groups[k], 48), &swatch{groupColor(k)})
	}
	if tl.Reserved != nil {
		var xys plotter.XYs
		for _, pt := range tl.Reserved {
			xys = append(xys, plotter.XY{X: float64(pt.First), Y: float64(pt.Bytes) / scale})
		}
		xys = append(xys, plotter.XY{X: end, Y: xys[len(xys)-1].Y})
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, nil, 0, err
		}
		l.StepStyle = plotter.PostStep
		l.LineStyle.Width = vg.Points(1)
		p.Add(l)
		leg.Add("reserved", l)
	}
	c, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(r.CapacityBytes) / scale}, {X: end, Y: float64(r.CapacityBytes) / scale}})
	if err != nil {
		return nil, nil, 0, err
	}
	c.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	c.LineStyle.Color = color.RGBA{R: 200, A: 255}
	p.Add(c)
	leg.Add("capacity", c)
	m, err := plotter.NewLine(plotter.XYs{{X: float64(r.EventIndex), Y: 0}, {X: float64(r.EventIndex), Y: float64(top) / scale}})
	if err != nil {
		return nil, nil, 0, err
	}
	m.LineStyle.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
	m.LineStyle.Width = vg.Points(1)
	p.Add(m)
	leg.Add("moment ("+r.Moment+")", m)
	p.X.Max = end
	return p, leg, leg.Height(2 * vg.Inch), nil
}

// A swatch is a legend entry of a filled colour.
type swatch struct{ c color.Color }

func (s *swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.c, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

// bars draws labelled horizontal bars of values in bytes, with their
// values written at their ends.
func bars(labels []string, values []int64, colors []color.RGBA) (*plot.Plot, *figure.Legend, vg.Length, error) {
	var top int64
	for _, v := range values {
		top = max(top, v)
	}
	name, scale := figure.Unit(top)
	p := figure.NewPlot()
	p.X.Label.Text = name
	p.X.Min = 0
	p.X.Max = float64(top) / scale * 1.25
	if top == 0 {
		p.X.Max = 1
	}
	// The bars are drawn from the bottom: the first label at the top.
	n := len(values)
	for i := range values {
		v := plotter.Values{}
		for j := range n {
			if j == n-1-i {
				v = append(v, float64(values[i])/scale)
			} else {
				v = append(v, 0)
			}
		}
		b, err := plotter.NewBarChart(v, vg.Points(9))
		if err != nil {
			return nil, nil, 0, err
		}
		b.Horizontal = true
		b.Color = colors[i%len(colors)]
		b.LineStyle.Width = 0
		p.Add(b)
	}
	var xys plotter.XYs
	var texts []string
	for i, v := range values {
		xys = append(xys, plotter.XY{X: float64(v) / scale, Y: float64(n - 1 - i)})
		texts = append(texts, " "+gpualloc.FormatSize(v))
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
	if err != nil {
		return nil, nil, 0, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font = figure.SmallFont
		l.TextStyle[i].YAlign = -0.5
	}
	p.Add(l)
	rev := make([]string, n)
	for i, s := range labels {
		rev[n-1-i] = s
	}
	p.NominalY(rev...)
	return p, nil, vg.Inch/2 + vg.Length(n)*vg.Points(13), nil
}

// breakdownPlot draws where the memory went at the moment.
func breakdownPlot(r *Report) (*plot.Plot, *figure.Legend, vg.Length, error) {
	labels := []string{"live", "rounding", "fragmented", "cached", "not reserved"}
	values := []int64{r.LiveBytes - r.UnservedBytes, r.RoundingBytes, r.FragmentedBytes, r.CachedBytes, max(r.CapacityBytes-r.ReservedBytes, 0)}
	// Colours of their own, not the holders': the parts are no holders.
	return bars(labels, values, []color.RGBA{{R: 0x44, G: 0x44, B: 0x44, A: 255}, report.Palette[7], report.Palette[8], report.Palette[9],
		{R: 0xbb, G: 0xbb, B: 0xbb, A: 255}})
}

// holdersPlot draws the holders as bars.
func holdersPlot(r *Report) (*plot.Plot, *figure.Legend, vg.Length, error) {
	var labels []string
	var values []int64
	for _, h := range r.Holders {
		labels = append(labels, label(h.Site, 40))
		values = append(values, h.Bytes)
	}
	if r.OtherCount > 0 {
		labels = append(labels, "other")
		values = append(values, r.OtherBytes)
	}
	if len(values) == 0 {
		labels, values = []string{"(nothing live)"}, []int64{0}
	}
	colors := make([]color.RGBA, len(values))
	for i := range colors {
		colors[i] = groupColor(min(i, figureGroups))
	}
	return bars(labels, values, colors)
}
