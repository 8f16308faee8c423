package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
)

// Where the memory goes: each strategy's peak reserved bytes split into
// live, rounding, fragmented and cached bytes (sim.Result.AtPeakLiveBytes
// and the three after it), as a table cell and as a figure.

// SplitHead is the head of the summary table's column of the split of
// peak reserved bytes: the percentages of it that were live, rounding,
// fragmented and cached at the peak, as "62/1/30/7" (see [SplitPercents]),
// "-" when nothing was reserved.
const SplitHead = "AT PEAK L/R/F/C"

// splitNote is the note of the table that says what the column holds.
const splitNote = SplitHead + ": peak reserved in % live / rounding / fragmented (free inside device allocations in use) / cached (device allocations holding nothing live); in bytes as at_peak_* in CSV and JSON"

// splitParts returns a result's split of its peak reserved bytes, in the
// order live, rounding, fragmented, cached.
func splitParts(r sim.Result) [4]int64 {
	return [4]int64{r.AtPeakLiveBytes, r.AtPeakRoundingBytes, r.AtPeakFragmentedBytes, r.AtPeakCachedBytes}
}

// SplitPercents returns the shares of parts in their sum as whole
// percentages that add up to 100: each share rounded down, then the
// points left over given to the largest remainders, the earlier part first
// among equal ones (Hamilton's method). It returns zeros when the sum is
// not positive. O(len(parts)²).
func SplitPercents(parts []int64) []int {
	out := make([]int, len(parts))
	var sum int64
	for _, p := range parts {
		sum += max(p, 0)
	}
	if sum <= 0 {
		return out
	}
	rem := make([]int64, len(parts))
	left := 100
	for i, p := range parts {
		p = max(p, 0)
		// 100 × p / sum without overflow for sums of up to 2^56 bytes.
		q, r := p/sum, p%sum
		v := 100*q + (100*r)/sum
		out[i] = int(v)
		rem[i] = (100 * r) % sum
		left -= out[i]
	}
	for ; left > 0; left-- {
		best := -1
		for i := range parts {
			if rem[i] >= 0 && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		out[best]++
		rem[best] = -1
	}
	return out
}

// splitCell formats a result's split for the table.
func splitCell(r sim.Result) string {
	if r.PeakReservedBytes <= 0 {
		return "-"
	}
	parts := splitParts(r)
	var b strings.Builder
	for i, p := range SplitPercents(parts[:]) {
		if i > 0 {
			b.WriteByte('/')
		}
		fmt.Fprint(&b, p)
	}
	return b.String()
}

// The four parts as the breakdown figure draws them: grey levels that
// stay apart in print, darkest for what the trace needs, and hatching on
// the fragmented part, the one a strategy's placement decides.
var splitStyles = [4]struct {
	name  string
	fill  color.RGBA
	hatch bool
}{
	{"live (requested)", rgb(0x404040), false},
	{"rounding", rgb(0x969696), false},
	{"fragmented", color.RGBA{R: 255, G: 255, B: 255, A: 255}, true},
	{"cached", rgb(0xd9d9d9), false},
}

const (
	hatchStep  = vg.Length(2.2) // between hatch lines, horizontally
	hatchWidth = vg.Length(0.4)
	edgeWidth  = vg.Length(0.4) // the outline of each part
)

// BreakdownFigure draws where each strategy's peak reserved memory went:
// for each trace a panel of horizontal bars, one per strategy, each split
// into the live, rounding, fragmented and cached bytes at the peak (see
// sim.Result.AtPeakLiveBytes) in grey levels and hatching that read in
// greyscale, with the lower bound (the trace's peak live requested bytes)
// as a dashed line and, when the results have it, the offline plan as a
// dotted one. Each bar is labelled with the peak and its overhead, or
// "oom". Each panel has its own byte axis, named in its title. It returns
// nil when there are no results.
func BreakdownFigure(results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	if len(results) == 0 {
		return nil
	}
	var legend []legendEntry
	for _, s := range splitStyles {
		legend = append(legend, legendEntry{name: s.name, thumb: partThumb(s.fill, s.hatch)})
	}
	legend = append(legend, legendEntry{name: "lower bound", thumb: lineThumb(black, refWidth, 2, 1.5)})
	hasOffline := slices.ContainsFunc(results, func(r sim.Result) bool { return r.OfflineBytes != nil })
	if hasOffline {
		legend = append(legend, legendEntry{name: "offline plan", thumb: offlineThumb})
	}
	names := traceNames(results)
	most := 0
	for _, t := range names {
		most = max(most, len(traceResults(t, results)))
	}
	fig := &Figure{
		Name:  "breakdown",
		Title: "where the memory goes at the peak",
		Caption: "Each strategy's peak reserved memory (bar), split at the first event after which it stood at its peak into the bytes the live allocations requested, " +
			"their rounding (handed out beyond the request), the fragmented bytes (free inside device allocations that hold a live block) and the cached bytes " +
			"(device allocations that hold none); the dashed line is the lower bound, the peak of live requested bytes. One panel per trace, each on its own scale; " +
			"each bar is labelled with the peak and its overhead over the lower bound.",
		Width:  o.Width,
		legend: legend,
	}
	if hasOffline {
		fig.Caption += " The dotted line is the offline plan: every allocation placed knowing when it is freed."
	}
	lh := legendHeight(legend, o.Width-4)
	panel := vg.Length(most)*barPitch + barAxes + titleHeight()
	fig.Height = lh + vg.Length(len(names))*panel
	for _, t := range names {
		fig.panels = append(fig.panels, o.breakdownPanel(t, traceResults(t, results), fig, panel))
	}
	return o.finish(fig)
}

// breakdownPanel is the panel of one trace of the breakdown figure, height
// tall.
func (o *Options) breakdownPanel(trace string, rs []sim.Result, fig *Figure, height vg.Length) *plot.Plot {
	var lower, top int64
	for _, r := range rs {
		lower = max(lower, r.PeakRequestedBytes)
		top = max(top, r.PeakReservedBytes, r.PeakRequestedBytes)
	}
	offline, hasOffline := offlineOf(rs)
	if hasOffline {
		top = max(top, offline)
	}
	u := byteUnit(float64(top))
	p := newPlot()
	p.Title.Text = o.traceLabel(trace) + " (" + u.Name + ")"
	p.Title.Padding = 2
	p.X.Tick.Marker = plainTicks{xLabels}
	p.Add(verticalGrid())
	n := len(rs)
	names := make([]string, n)
	var stacks []stack
	var labels []hbar
	for i, r := range rs {
		y := float64(n - 1 - i)
		names[n-1-i] = o.Label(r.Strategy.Spec)
		parts := splitParts(r)
		st := stack{y: y}
		for _, b := range parts {
			st.parts = append(st.parts, float64(b)/u.Size)
		}
		stacks = append(stacks, st)
		label := gpualloc.FormatSize(r.PeakReservedBytes) + " (" + overheadRatio(r) + ")"
		if r.OOMs > 0 {
			label = gpualloc.FormatSize(r.PeakReservedBytes) + " (oom)"
		}
		labels = append(labels, hbar{y: y, value: float64(r.PeakReservedBytes) / u.Size, label: label})
	}
	nominalY(p, names)
	p.Add(stackPlotter{stacks: stacks, thickness: barFill}, refLine{at: float64(lower) / u.Size})
	if hasOffline {
		p.Add(offlineLine{at: float64(offline) / u.Size})
	}
	h := hbarPlotter{bars: labels, thickness: barFill, labelSty: textStyle(smallPt)}
	p.Add(h.only(labelsOnly))
	p.X.Min = 0
	// fitLabels reads the figure's size: give it one panel's.
	one := *fig
	one.Height = legendHeight(fig.legend, fig.Width-4) + height
	fitLabels(p, &one, h, false)
	if hasOffline {
		p.X.Max = math.Max(p.X.Max, float64(offline)/u.Size*1.02)
	}
	return p
}

// A stack is one bar of the breakdown figure: its parts from the left, in
// axis units, centred on y.
type stack struct {
	y     float64
	parts []float64
}

// stackPlotter draws stacked horizontal bars of a given thickness (in y
// units), each part in its style of splitStyles and outlined.
type stackPlotter struct {
	stacks    []stack
	thickness float64
}

func (s stackPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, st := range s.stacks {
		y0, y1 := trY(st.y-s.thickness/2), trY(st.y+s.thickness/2)
		at := 0.0
		for i, v := range st.parts {
			if v <= 0 {
				continue
			}
			x0, x1 := trX(at), trX(at+v)
			at += v
			r := vg.Rectangle{Min: vg.Point{X: x0, Y: y0}, Max: vg.Point{X: x1, Y: y1}}
			part(c, r, splitStyles[i].fill, splitStyles[i].hatch)
		}
	}
}

// hatch draws diagonal lines (rising to the right) across r, cut at its
// edges.
func hatch(c draw.Canvas, r vg.Rectangle) {
	sty := draw.LineStyle{Color: black, Width: hatchWidth}
	// The lines y - r.Min.Y = x - k for k stepping across the rectangle.
	h := r.Max.Y - r.Min.Y
	for k := r.Min.X - h; k < r.Max.X; k += hatchStep {
		lo := max(r.Min.X, k)
		hi := min(r.Max.X, k+h)
		if hi <= lo {
			continue
		}
		c.StrokeLine2(sty, lo, r.Min.Y+(lo-k), hi, r.Min.Y+(hi-k))
	}
}

// partThumb is the legend's sample of a part: a small outlined box.
func partThumb(fill color.Color, hatched bool) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		h := cv.Max.Y - cv.Min.Y
		r := vg.Rectangle{
			Min: vg.Point{X: cv.Min.X + 1, Y: cv.Min.Y + h*0.15},
			Max: vg.Point{X: cv.Max.X - 1, Y: cv.Max.Y - h*0.15},
		}
		part(cv, r, fill, hatched)
	}
}

// part fills r, hatches it if asked, and outlines it.
func part(c draw.Canvas, r vg.Rectangle, fill color.Color, hatched bool) {
	c.SetColor(fill)
	c.Fill(r.Path())
	if hatched {
		hatch(c, r)
	}
	c.StrokeLines(draw.LineStyle{Color: black, Width: edgeWidth},
		[]vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}, r.Min})
}
