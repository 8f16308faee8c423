package explain

import (
	"bytes"
	"fmt"
	"html"
	"image/color"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/gpualloc/gpualloc"
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
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>simulate explain</title>
<style>
body { font-family: "Liberation Sans", Arial, sans-serif; margin: 2em; max-width: 60em; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 13px; }
figure { display: inline-block; margin: 0 1.5em 1.5em 0; vertical-align: top; width: 30em; }
figure img { width: 100%; }
figcaption { font-size: 13px; color: #333; }
</style>
</head>
<body>
<h1>Why the run needed the memory it did, and what would have fit</h1>
`)
	for i := range reps {
		r := &reps[i]
		stem := fmt.Sprintf("%s-device%d", stems[r.Trace], r.Device)
		fmt.Fprintf(&b, "<section>\n<h2>%s, device %d</h2>\n<pre>%s</pre>\n", html.EscapeString(r.Trace), r.Device, html.EscapeString(text(r)))
		figs := []struct {
			name, caption string
			plot          func(*Report) (*plot.Plot, *legend, vg.Length, error)
		}{
			{stem + "-memory", memoryCaption(r), memoryPlot},
			{stem + "-breakdown", "Where the reserved memory went at the moment: the bytes the live allocations asked for, their rounding, the free bytes inside segments that hold a live block (fragmented), the segments that hold none (cached), and the device's memory not reserved.", breakdownPlot},
			{stem + "-holders", fmt.Sprintf("Who holds the live bytes at the moment, by %s: the largest groups, then the rest as other.", r.By), holdersPlot},
		}
		for _, f := range figs {
			p, leg, h, err := f.plot(r)
			if err != nil {
				return err
			}
			png, err := render(p, leg, h)
			if err != nil {
				return err
			}
			if err := d.WriteFile(f.name+".png", png); err != nil {
				return err
			}
			fmt.Fprintf(&b, "<figure><img src=\"%s.png\" alt=\"%s\"><figcaption>%s</figcaption></figure>\n",
				html.EscapeString(f.name), html.EscapeString(f.name), html.EscapeString(f.caption))
		}
		b.WriteString("</section>\n")
	}
	b.WriteString("</body>\n</html>\n")
	return d.WriteFile("index.html", []byte(b.String()))
}

// memoryCaption says how to read the memory figure of r.
func memoryCaption(r *Report) string {
	s := "The device's live bytes over the trace, stacked by holder (each the largest of its stretch of events), the device's capacity (dashed), and the moment explained (dotted)"
	if r.Timeline != nil && r.Timeline.Reserved != nil {
		return s + ", with the reserved bytes of the replay as the trace ran (black)."
	}
	return s + "; the reserved bytes are left out: the replay's course sums the trace's devices."
}

// unit returns the binary unit in which n reads best, and its bytes.
func unit(n int64) (string, float64) {
	switch {
	case n >= 2<<30:
		return "GiB", 1 << 30
	case n >= 2<<20:
		return "MiB", 1 << 20
	case n >= 2<<10:
		return "KiB", 1 << 10
	}
	return "bytes", 1
}

// The text of the figures, in the report's typeface (Liberation Sans,
// built in) at its sizes.
var (
	smallFont = font.Font{Typeface: "Liberation", Variant: "Sans", Size: 7}
	labelFont = font.Font{Typeface: "Liberation", Variant: "Sans", Size: 8}
)

// plainTicks are gonum's default ticks with their labels in the fewest
// digits: "2500", not "2500.00".
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
		}
	}
	return ticks
}

// newPlot returns a plot in the report's style.
func newPlot() *plot.Plot {
	p := plot.New()
	p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
	p.X.Tick.Label.Font = smallFont
	p.Y.Tick.Label.Font = smallFont
	p.X.Label.TextStyle.Font = labelFont
	p.Y.Label.TextStyle.Font = labelFont
	return p
}

// A legend is a plot's legend and the number of its entries.
type legend struct {
	plot.Legend
	n int
}

// newLegend returns a legend in the report's style.
func newLegend() *legend {
	l := &legend{Legend: plot.NewLegend()}
	l.TextStyle.Font = smallFont
	l.Top, l.Left = true, true
	return l
}

func (l *legend) add(name string, thumb plot.Thumbnailer) {
	l.Add(name, thumb)
	l.n++
}

// legendRow is the height of a legend's entry.
const legendRow = 6.5 * vg.Length(1) // points

// render draws p at the report's width and height h, its legend, if any,
// above the data area so that it covers none of it, and returns the PNG.
func render(p *plot.Plot, leg *legend, h vg.Length) ([]byte, error) {
	img := vgimg.NewWith(vgimg.UseWH(report.ColumnWidth, h), vgimg.UseDPI(report.DefaultDPI))
	c := draw.New(img)
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	if leg != nil {
		top := vg.Length(leg.n)*legendRow + 4
		leg.Draw(draw.Crop(c, 4, 0, h-top, 0))
		c = draw.Crop(c, 0, 0, 0, -top)
	}
	p.Draw(c)
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// groupColor returns the colour of group i.
func groupColor(i int) color.RGBA { return report.Palette[i%len(report.Palette)] }

// label shortens a holder's name for a figure.
func label(s string, n int) string {
	s = ShortSite(s)
	if r := []rune(s); len(r) > n {
		return "…" + string(r[len(r)-n+1:])
	}
	return s
}

// memoryPlot draws the device's memory over the trace.
func memoryPlot(r *Report) (*plot.Plot, *legend, vg.Length, error) {
	tl := r.Timeline
	if tl == nil || len(tl.Points) == 0 {
		return nil, nil, 0, fmt.Errorf("%s: device %d: no timeline to draw", r.Trace, r.Device)
	}
	leg := newLegend()
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
	name, scale := unit(top)
	p := newPlot()
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
		leg.add(label(groups[k], 48), &swatch{groupColor(k)})
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
		leg.add("reserved", l)
	}
	c, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(r.CapacityBytes) / scale}, {X: end, Y: float64(r.CapacityBytes) / scale}})
	if err != nil {
		return nil, nil, 0, err
	}
	c.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	c.LineStyle.Color = color.RGBA{R: 200, A: 255}
	p.Add(c)
	leg.add("capacity", c)
	m, err := plotter.NewLine(plotter.XYs{{X: float64(r.EventIndex), Y: 0}, {X: float64(r.EventIndex), Y: float64(top) / scale}})
	if err != nil {
		return nil, nil, 0, err
	}
	m.LineStyle.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
	m.LineStyle.Width = vg.Points(1)
	p.Add(m)
	leg.add("moment ("+r.Moment+")", m)
	p.X.Max = end
	return p, leg, 2*vg.Inch + vg.Length(leg.n)*legendRow + 4, nil
}

// A swatch is a legend entry of a filled colour.
type swatch struct{ c color.Color }

func (s *swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.c, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

// bars draws labelled horizontal bars of values in bytes, with their
// values written at their ends.
func bars(labels []string, values []int64, colors []color.RGBA) (*plot.Plot, *legend, vg.Length, error) {
	var top int64
	for _, v := range values {
		top = max(top, v)
	}
	name, scale := unit(top)
	p := newPlot()
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
		l.TextStyle[i].Font = smallFont
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
func breakdownPlot(r *Report) (*plot.Plot, *legend, vg.Length, error) {
	labels := []string{"live", "rounding", "fragmented", "cached", "not reserved"}
	values := []int64{r.LiveBytes - r.UnservedBytes, r.RoundingBytes, r.FragmentedBytes, r.CachedBytes, max(r.CapacityBytes-r.ReservedBytes, 0)}
	// Colours of their own, not the holders': the parts are no holders.
	return bars(labels, values, []color.RGBA{{R: 0x44, G: 0x44, B: 0x44, A: 255}, report.Palette[7], report.Palette[8], report.Palette[9],
		{R: 0xbb, G: 0xbb, B: 0xbb, A: 255}})
}

// holdersPlot draws the holders as bars.
func holdersPlot(r *Report) (*plot.Plot, *legend, vg.Length, error) {
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
