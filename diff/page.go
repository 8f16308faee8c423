package diff

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/gpualloc/gpualloc/internal/figure"
	"github.com/gpualloc/gpualloc/sim/report"
)

// figureSites is the most sites the bars of a figure show.
const figureSites = 12

// WritePairPage writes into d an index.html that shows each pair as text
// gives it, with two figures beside it as PNG: the memory of both runs on
// one time axis, and the differences of the sites as diverging bars. runs
// are the two Runs the pairs compare. It writes nothing outside d; the
// caller commits it.
func WritePairPage(d *report.DirWriter, pairs []Pair, runs []*Run, text func(*Pair) string) error {
	var sections []string
	for i := range pairs {
		p := &pairs[i]
		stem := fmt.Sprintf("device%d", p.Device)
		da, db := runs[0].device(p.Device), runs[1].device(p.BDevice)
		var figs []figure.Figure
		curves, byStep, err := curvePlot([]string{"A", "B"}, []*Device{da, db}, -1)
		if err != nil {
			return err
		}
		figs = append(figs, figure.Figure{Name: stem + "-memory", Caption: curveCaption(byStep, "A's and B's"), PNG: curves})
		bars, err := sitePlot(p)
		if err != nil {
			return err
		}
		figs = append(figs, figure.Figure{Name: stem + "-sites", Caption: fmt.Sprintf("Where the live bytes at the peaks differ, by %s: B's bytes less A's, the largest differences (at most %d); they add up to %s.",
			p.By, figureSites, Signed(p.DeltaLiveBytes)), PNG: bars})
		s, err := figure.Section(d, fmt.Sprintf("A %s, B %s, device %d", p.A, p.B, p.Device), text(p), figs)
		if err != nil {
			return err
		}
		sections = append(sections, s)
	}
	return figure.WriteIndex(d, "diff", "Two runs side by side", sections)
}

// WriteRanksPage writes into d an index.html that shows each summary as
// text gives it, with two figures: the memory of every rank on one time
// axis, and each rank's peak of reserved bytes less the median as
// diverging bars. runs are the ranks' Runs, in order.
func WriteRanksPage(d *report.DirWriter, sums []Summary, runs []*Run, text func(*Summary) string) error {
	groups, err := MatchDevices(runs)
	if err != nil {
		return err
	}
	var sections []string
	for i := range sums {
		s := &sums[i]
		stem := fmt.Sprintf("device%d", s.Device)
		devs := make([]*Device, len(runs))
		names := make([]string, len(runs))
		peak := 0
		for k, r := range runs {
			devs[k] = &r.Devices[groups[i][k]]
			names[k] = r.Trace
			if r.Trace == s.PeakRank {
				peak = k
			}
		}
		curves, byStep, err := curvePlot(names, devs, peak)
		if err != nil {
			return err
		}
		ranks, err := rankPlot(s)
		if err != nil {
			return err
		}
		figs := []figure.Figure{
			{Name: stem + "-memory", Caption: curveCaption(byStep, "every rank's") + " The rank that peaks is drawn thick.", PNG: curves},
			{Name: stem + "-ranks", Caption: "Each rank's peak of reserved bytes less the median of the ranks' peaks.", PNG: ranks},
		}
		sec, err := figure.Section(d, fmt.Sprintf("%d ranks, device %d", len(runs), s.Device), text(s), figs)
		if err != nil {
			return err
		}
		sections = append(sections, sec)
	}
	return figure.WriteIndex(d, "diff", "The ranks of a job side by side", sections)
}

// device returns the figures of device d of r.
func (r *Run) device(d int) *Device {
	for i := range r.Devices {
		if r.Devices[i].Device == d {
			return &r.Devices[i]
		}
	}
	return &Device{Device: d}
}

// curveCaption says how to read a memory figure.
func curveCaption(byStep bool, whose string) string {
	axis := "each run's events spread over 0 to 1"
	if byStep {
		axis = "aligned by step: step k from k-1 to k"
	}
	return fmt.Sprintf("The memory of %s device over the trace, %s: the reserved bytes (solid) where the replay tells them for the device, and the live bytes (dotted), each the largest of its stretch of events.", whose, axis)
}

// curvePlot draws the memory of devs, named by names, on one time axis:
// by step where every device has steps, else each over 0 to 1. thick is
// the index of the device drawn thick, -1 for none. It reports whether
// the axis is by step.
func curvePlot(names []string, devs []*Device, thick int) ([]byte, bool, error) {
	byStep := true
	var top int64
	for _, d := range devs {
		byStep = byStep && len(d.Steps) > 0
		for _, pt := range d.Curve {
			top = max(top, pt.Live, pt.Reserved)
		}
	}
	name, scale := figure.Unit(top)
	p := figure.NewPlot()
	p.Y.Label.Text = name
	p.Y.Min = 0
	p.X.Label.Text = "fraction of the trace's events"
	if byStep {
		p.X.Label.Text = "step"
	}
	legend := len(devs) <= 8
	leg := figure.NewLegend()
	for k, d := range devs {
		var live, res plotter.XYs
		for _, pt := range d.Curve {
			x := pt.Frac
			if byStep {
				if pt.Step < 0 {
					continue
				}
				x = pt.Step
			}
			live = append(live, plotter.XY{X: x, Y: float64(pt.Live) / scale})
			if pt.Reserved >= 0 {
				res = append(res, plotter.XY{X: x, Y: float64(pt.Reserved) / scale})
			}
		}
		if len(live) == 0 {
			continue
		}
		c := report.Palette[k%len(report.Palette)]
		width := vg.Points(0.8)
		if k == thick || len(devs) <= 2 {
			width = vg.Points(1.4)
		}
		l, err := plotter.NewLine(live)
		if err != nil {
			return nil, false, err
		}
		l.StepStyle = plotter.PostStep
		l.LineStyle.Color, l.LineStyle.Width = c, width
		l.LineStyle.Dashes = []vg.Length{vg.Points(1), vg.Points(1.5)}
		p.Add(l)
		label := names[k]
		if len(names) > 2 {
			label = figure.Shorten(label, 28)
		}
		if len(res) > 0 {
			r, err := plotter.NewLine(res)
			if err != nil {
				return nil, false, err
			}
			r.StepStyle = plotter.PostStep
			r.LineStyle.Color, r.LineStyle.Width = c, width
			p.Add(r)
			if legend {
				leg.Add(label+" reserved", r)
			}
		}
		if legend {
			leg.Add(label+" live", l)
		}
	}
	png, err := figure.Render(p, leg, leg.Height(2.2*vg.Inch))
	return png, byStep, err
}

// The colours of the diverging bars: B holds more, B holds less.
var (
	moreColor = color.RGBA{R: 0xc0, G: 0x39, B: 0x2b, A: 255}
	lessColor = color.RGBA{R: 0x29, G: 0x80, B: 0xb9, A: 255}
)

// sitePlot draws the differences of p's sites as diverging bars.
func sitePlot(p *Pair) ([]byte, error) {
	var labels []string
	var values []int64
	for _, s := range p.Sites {
		if s.DeltaBytes == 0 || len(values) == figureSites {
			break
		}
		labels = append(labels, figure.Shorten(ShortSite(s.Site), 40))
		values = append(values, s.DeltaBytes)
	}
	if len(values) == 0 {
		labels, values = []string{"(no site differs)"}, []int64{0}
	}
	return divergingBars(labels, values, "B less A")
}

// rankPlot draws each rank's peak less the median as diverging bars.
func rankPlot(s *Summary) ([]byte, error) {
	var labels []string
	var values []int64
	for _, r := range s.Ranks {
		labels = append(labels, figure.Shorten(r.Trace, 32))
		values = append(values, r.PeakReservedBytes-s.MedianPeakReservedBytes)
	}
	return divergingBars(labels, values, "peak less the median")
}

// divergingBars draws labelled horizontal bars of differences of bytes
// from a line at 0, the first label at the top, each bar's value written
// at its end.
func divergingBars(labels []string, values []int64, what string) ([]byte, error) {
	var top int64 = 1
	for _, v := range values {
		top = max(top, abs(v))
	}
	name, scale := figure.Unit(top)
	p := figure.NewPlot()
	p.X.Label.Text = fmt.Sprintf("%s, %s", what, name)
	lim := float64(top) / scale * 1.45
	p.X.Min, p.X.Max = -lim, lim
	n := len(values)
	for i, v := range values {
		vals := make(plotter.Values, n)
		vals[n-1-i] = float64(v) / scale
		b, err := plotter.NewBarChart(vals, vg.Points(7))
		if err != nil {
			return nil, err
		}
		b.Horizontal = true
		b.Color = moreColor
		if v < 0 {
			b.Color = lessColor
		}
		b.LineStyle.Width = 0
		p.Add(b)
	}
	zero, err := plotter.NewLine(plotter.XYs{{X: 0, Y: -0.5}, {X: 0, Y: float64(n) - 0.5}})
	if err != nil {
		return nil, err
	}
	zero.LineStyle.Width = vg.Points(0.5)
	p.Add(zero)
	var xys plotter.XYs
	var texts []string
	for i, v := range values {
		xys = append(xys, plotter.XY{X: float64(v) / scale, Y: float64(n - 1 - i)})
		texts = append(texts, Signed(v))
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font = figure.SmallFont
		l.TextStyle[i].YAlign = -0.5
		if values[i] < 0 {
			l.TextStyle[i].XAlign = -1 // to the left of a bar that goes left
		}
		l.Offset.X = 0
	}
	p.Add(l)
	rev := make([]string, n)
	for i, s := range labels {
		rev[n-1-i] = s
	}
	p.NominalY(rev...)
	return figure.Render(p, nil, vg.Inch/2+vg.Length(n)*vg.Points(11))
}

// ShortSite shortens a site key, "file:function" or "file:line
// function", to the last two elements of the file's path.
func ShortSite(site string) string {
	if strings.HasPrefix(site, "(") {
		return site
	}
	i := strings.LastIndexByte(site, ':')
	if i < 0 {
		return site
	}
	parts := strings.Split(site[:i], "/")
	if len(parts) <= 2 {
		return site
	}
	return strings.Join(parts[len(parts)-2:], "/") + site[i:]
}
