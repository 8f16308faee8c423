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

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
)

// Sweeps: the variants of one strategy in a set of results (the specs of a
// strategy that differ in some parameters, as round:cutoff=20..24 gives
// them) are drawn as one family. They are labelled by the parameters that
// vary, written out even at their defaults ("round:cutoff=24", not
// "round"); they take a sequential palette, light to dark, from the
// strategy's own colour, in the order of those parameters' values; and the
// report adds a figure of each family's figures against its parameter and,
// per trace, a Pareto figure of peak reserved memory against device
// allocations.

// A Sweep is the variants of one strategy among a set of specs.
type Sweep struct {
	Strategy string   // the strategy's name
	Params   []string // the parameters whose values differ, in spec order
	// Specs are the variants' full specs, in increasing order of the
	// varied parameters' values (the first parameter first).
	Specs []string
	// Values are the varied parameters' values of each spec: Values[i][j]
	// is Params[j]'s in Specs[i].
	Values [][]string
}

// Label returns spec's label within the sweep: the strategy and the
// varied parameters, "round:cutoff=24".
func (s Sweep) Label(spec string) string {
	i := slices.Index(s.Specs, spec)
	if i < 0 {
		return spec
	}
	parts := make([]string, len(s.Params))
	for j, p := range s.Params {
		parts[j] = p + "=" + s.Values[i][j]
	}
	return s.Strategy + ":" + strings.Join(parts, ",")
}

// Sweeps finds the sweeps among strategies (the results' strategies): the
// strategies with more than one distinct spec, in order of first
// appearance. It reads the strategies' parameters (sim.Strategy.Params),
// not their specs, and consults no registry.
func Sweeps(strategies []sim.Strategy) []Sweep {
	var names []string
	byName := map[string][]sim.Strategy{}
	for _, s := range strategies {
		if !slices.ContainsFunc(byName[s.Name], func(t sim.Strategy) bool { return t.Spec == s.Spec }) {
			if byName[s.Name] == nil {
				names = append(names, s.Name)
			}
			byName[s.Name] = append(byName[s.Name], s)
		}
	}
	var out []Sweep
	for _, name := range names {
		if len(byName[name]) > 1 {
			out = append(out, newSweep(name, byName[name]))
		}
	}
	return out
}

func newSweep(name string, variants []sim.Strategy) Sweep {
	// A parameter made of settings in one variant is compared by its
	// settings in all: where it holds none (pytorch's conf=none), it has
	// nothing to compare.
	made := map[string]bool{}
	for _, s := range variants {
		for _, p := range s.Params {
			if len(p.Settings) > 0 {
				made[p.Key] = true
			}
		}
	}
	params := make([]map[string]string, len(variants))
	var keys []string
	for i, s := range variants {
		params[i] = map[string]string{}
		for _, kv := range sweepParams(s, made) {
			params[i][kv.Key] = kv.Value
			if !slices.Contains(keys, kv.Key) {
				keys = append(keys, kv.Key)
			}
		}
	}
	sw := Sweep{Strategy: name}
	for _, k := range keys {
		for _, p := range params[1:] {
			if p[k] != params[0][k] {
				sw.Params = append(sw.Params, k)
				break
			}
		}
	}
	order := make([]int, len(variants))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		for _, k := range sw.Params {
			if c := compareValues(params[a][k], params[b][k]); c != 0 {
				return c
			}
		}
		return strings.Compare(variants[a].Spec, variants[b].Spec)
	})
	for _, i := range order {
		sw.Specs = append(sw.Specs, variants[i].Spec)
		var vals []string
		for _, k := range sw.Params {
			vals = append(vals, params[i][k])
		}
		sw.Values = append(sw.Values, vals)
	}
	return sw
}

// sweepParams returns the parameters of a strategy that its variants are
// compared by: each parameter with its value, and in place of a value made
// of settings (the pytorch strategy's conf) its settings, each under its
// own key ("max_split_size_mb" of "conf=max_split_size_mb:64"), so that a
// sweep of conf varies them one by one. A parameter of the same name as a
// setting overrides it unless it is at its default (pytorch's "auto"
// leaves the setting as conf gives it). A parameter named in made, made of
// settings in some variant, contributes only its settings.
func sweepParams(s sim.Strategy, made map[string]bool) []gpualloc.KeyValue {
	var out []gpualloc.KeyValue
	fromSettings := map[string]int{} // index in out
	for _, p := range s.Params {
		if len(p.Settings) > 0 || made[p.Key] {
			for _, kv := range p.Settings {
				fromSettings[kv.Key] = len(out)
				out = append(out, kv)
			}
			continue
		}
		if i, ok := fromSettings[p.Key]; ok {
			if p.Value != p.Default {
				out[i].Value = p.Value
			}
			continue
		}
		out = append(out, gpualloc.KeyValue{Key: p.Key, Value: p.Value})
	}
	return out
}

// number returns the value of a parameter as a number, if it is one: a
// number or size, +Inf for an unlimited value, 0 and 1 for false and true.
func number(v string) (float64, bool) {
	switch strings.ToLower(v) {
	case "inf", "unlimited":
		return math.Inf(1), true
	case "false", "off", "no":
		return 0, true
	case "true", "on", "yes":
		return 1, true
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return f, true
	}
	if n, err := gpualloc.ParseSize(v); err == nil {
		return float64(n), true
	}
	return 0, false
}

// release returns the numbers of a value written as a release, "2.10":
// two integers joined by a dot, the first not 0 (a fraction such as 0.5
// is a number).
func release(v string) (major, minor int, ok bool) {
	a, b, found := strings.Cut(v, ".")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	return x, y, found && err1 == nil && err2 == nil && x > 0 && y >= 0
}

// compareValues orders parameter values: releases by their numbers
// (2.9 before 2.10), numbers by value, before text; a value left unset
// ("" or "auto") first.
func compareValues(a, b string) int {
	if am, an, ok := release(a); ok {
		if bm, bn, ok := release(b); ok {
			return cmp.Or(cmp.Compare(am, bm), cmp.Compare(an, bn))
		}
	}
	rank := func(v string) int {
		if v == "" || v == "auto" || v == "none" {
			return 0
		}
		if _, ok := number(v); ok {
			return 1
		}
		return 2
	}
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	x, okx := number(a)
	y, oky := number(b)
	if okx && oky {
		return cmp.Compare(x, y)
	}
	return strings.Compare(a, b)
}

// sweepOf returns the sweep that spec belongs to among sweeps.
func sweepOf(sweeps []Sweep, spec string) (Sweep, int, bool) {
	for _, s := range sweeps {
		if i := slices.Index(s.Specs, spec); i >= 0 {
			return s, i, true
		}
	}
	return Sweep{}, 0, false
}

// SweepLabels returns a label for the spec of each of strategies: its
// sweep's label (see [Sweep.Label]) for the variants of a sweep, else its
// [ShortSpec].
func SweepLabels(strategies []sim.Strategy) map[string]string {
	sweeps := Sweeps(strategies)
	out := make(map[string]string, len(strategies))
	for _, s := range strategies {
		if sw, _, ok := sweepOf(sweeps, s.Spec); ok {
			out[s.Spec] = sw.Label(s.Spec)
		} else {
			out[s.Spec] = ShortSpec(s)
		}
	}
	return out
}

// sweepHeight is the height of each panel of a sweep figure.
const sweepHeight = 1.3 * vg.Inch

// SweepFigure plots, for one sweep, the peak reserved bytes, the overhead
// and the device allocations of every trace against the sweep's first
// varied parameter, one line per trace (and per combination of the other
// varied parameters), in three panels, the first and last on a log scale
// when their values span more than ten times. The parameter's values are placed
// by value when every one is a finite number, else evenly in order. A
// variant that ran out of memory or refused its settings leaves a gap in
// its line. A sweep over releases (every value like "2.10") has its own
// figure instead, of peak reserved bytes, device allocations and OOMs
// release by release (see releaseFigure). It returns nil when sw has fewer
// than two variants in results.
func SweepFigure(sw Sweep, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	if len(sw.Specs) < 2 || len(sw.Params) == 0 {
		return nil
	}
	param := sw.Params[0]
	// The x positions of the first parameter's values.
	var xs []string
	for _, v := range sw.Values {
		if !slices.Contains(xs, v[0]) {
			xs = append(xs, v[0])
		}
	}
	slices.SortStableFunc(xs, compareValues)
	byValue := true
	releases := true
	for _, v := range xs {
		f, ok := number(v)
		byValue = byValue && ok && !math.IsInf(f, 0)
		_, _, r := release(v)
		releases = releases && r
	}
	if releases {
		return releaseFigure(sw, xs, results, o)
	}
	pos := func(v string) float64 {
		if byValue {
			f, _ := number(v)
			return f
		}
		return float64(slices.Index(xs, v))
	}

	// One line per trace and combination of the other parameters.
	type line struct {
		name string
		pts  [3][]xy // peak reserved, overhead, device mallocs; NaN Y: a gap
	}
	var lines []*line
	find := func(name string) *line {
		for _, l := range lines {
			if l.name == name {
				return l
			}
		}
		l := &line{name: name}
		lines = append(lines, l)
		return l
	}
	var top int64
	for _, r := range results {
		_, i, ok := sweepOf([]Sweep{sw}, r.Strategy.Spec)
		if !ok {
			continue
		}
		name := o.traceLabel(r.Trace)
		for j, p := range sw.Params[1:] {
			name += ", " + p + "=" + sw.Values[i][j+1]
		}
		l := find(name)
		x := pos(sw.Values[i][0])
		ys := [3]float64{float64(r.PeakReservedBytes), r.Overhead, float64(r.DeviceMallocs)}
		if r.OOMs > 0 || r.Refused != "" {
			ys = [3]float64{math.NaN(), math.NaN(), math.NaN()}
		} else {
			top = max(top, r.PeakReservedBytes)
		}
		for k := range ys {
			l.pts[k] = append(l.pts[k], xy{x, ys[k]})
		}
	}
	if len(lines) == 0 {
		return nil
	}
	colors := traceColors(len(lines))
	var legend []legendEntry
	for i, l := range lines {
		legend = append(legend, legendEntry{name: l.name, thumb: markerLineThumb(colors[i], i)})
	}
	fig := &Figure{
		Name:  "sweep-" + sanitize(sw.Strategy+"-"+param),
		Title: sw.Strategy + ": peak reserved, overhead and device allocations against " + param,
		Caption: fmt.Sprintf("The variants of %s (%s) on each trace: peak reserved memory (top), overhead over the lower bound, peak reserved / peak live requested, 1× being ideal (middle), and device allocations (bottom), against %s. A variant that ran out of memory or refused its settings leaves a gap.",
			sw.Strategy, strings.Join(sw.Params, ", "), param),
		Width:  o.Width,
		legend: legend,
	}
	u := byteUnit(float64(top))
	labels := []string{"peak reserved\n(" + u.Name + ")", "overhead", "device\nmallocs"}
	scale := []float64{u.Size, 1, 1}
	for k := range 3 {
		p := newPlot()
		p.Add(horizontalGrid())
		p.Y.Label.Text = labels[k]
		p.Y.Tick.Marker = plainTicks{yLabels}
		if k == 1 {
			p.Y.Tick.Marker = ratioTicks{}
		}
		if k == 2 {
			p.X.Label.Text = param
		}
		if byValue {
			p.X.Tick.Marker = plainTicks{xLabels}
		} else {
			ticks := make([]plot.Tick, len(xs))
			for i, v := range xs {
				ticks[i] = plot.Tick{Value: float64(i), Label: v}
			}
			p.X.Tick.Marker = plot.ConstantTicks(ticks)
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for i, l := range lines {
			pts := make([]xy, len(l.pts[k]))
			for j, q := range l.pts[k] {
				pts[j] = xy{q.X, q.Y / scale[k]}
				if !math.IsNaN(pts[j].Y) {
					lo, hi = min(lo, pts[j].Y), max(hi, pts[j].Y)
				}
			}
			slices.SortFunc(pts, func(a, b xy) int { return cmp.Compare(a.X, b.X) })
			p.Add(markerLinePlotter{pts: pts, color: colors[i], shape: i})
		}
		p.X.Min, p.X.Max = pos(xs[0]), pos(xs[len(xs)-1])
		pad := (p.X.Max - p.X.Min) * 0.04
		p.X.Min, p.X.Max = p.X.Min-pad, p.X.Max+pad
		switch {
		case hi < lo: // every variant ran out of memory
		case k != 1 && lo > 0 && hi/lo > 10:
			// Traces of different scales: a log axis shows each.
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = decade125Ticks{}
			p.Y.Min, p.Y.Max = lo/1.3, hi*1.3
		case k == 1:
			p.Y.Min, p.Y.Max = 1, max(hi*1.04, 1.1)
		default:
			p.Y.Min, p.Y.Max = 0, hi*1.08
		}
		fig.panels = append(fig.panels, p)
	}
	fig.Height = legendHeight(legend, o.Width-4) + 3*sweepHeight
	return o.finish(fig)
}

// traceColors are the colours of n lines that stand for traces: greys
// would fade, so the palette's colours in order.
func traceColors(n int) []color.RGBA {
	out := make([]color.RGBA, n)
	for i := range out {
		out[i] = Palette[i%len(Palette)]
	}
	return out
}

// ParetoFigure plots each result on trace without OOM as a point, its
// device allocations across and its peak reserved memory up, coloured as
// the strategy, and marks the Pareto front: the results that no other
// beats on one without losing on the other, ringed and joined by a dashed
// line. It returns nil when the trace has fewer than two such results.
func ParetoFigure(trace string, results []sim.Result, opts Options) *Figure {
	o := opts.withDefaults(results)
	var rs []sim.Result
	for _, r := range traceResults(trace, results) {
		if r.OOMs == 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) < 2 {
		return nil
	}
	front := ParetoFront(rs)
	var top int64
	bottom := rs[0].PeakReservedBytes
	hiX := 1.0
	for _, r := range rs {
		top = max(top, r.PeakReservedBytes)
		bottom = min(bottom, r.PeakReservedBytes)
		hiX = max(hiX, float64(r.DeviceMallocs))
	}
	u := byteUnit(float64(top))

	// The legend: a swept strategy once, as its ramp, the others each.
	sweeps := Sweeps(strategiesOf(rs))
	// Each entry of the legend has its marker's shape, so that colours
	// near each other still tell apart.
	var legend []legendEntry
	shape := map[string]int{} // by spec
	done := map[string]int{}  // swept strategies: their shape
	for _, r := range rs {
		if sw, _, ok := sweepOf(sweeps, r.Strategy.Spec); ok {
			k, seen := done[sw.Strategy]
			if !seen {
				k = len(legend)
				done[sw.Strategy] = k
				var cs []color.RGBA
				for _, s := range sw.Specs {
					cs = append(cs, o.color(s))
				}
				legend = append(legend, legendEntry{name: sweepRange(sw), thumb: rampThumb(cs, k)})
			}
			shape[r.Strategy.Spec] = k
			continue
		}
		shape[r.Strategy.Spec] = len(legend)
		legend = append(legend, legendEntry{name: o.Label(r.Strategy.Spec), thumb: dotThumb(o.color(r.Strategy.Spec), len(legend))})
	}
	legend = append(legend, legendEntry{name: "Pareto front", thumb: frontThumb})
	fig := &Figure{
		Name: o.stem(trace) + "-pareto", Trace: trace,
		Title:   trace + ": peak reserved against device allocations",
		Caption: "Each strategy and variant that did not run out of memory: device allocations across (log scale), peak reserved memory up. The ringed points joined by the dashed line are the Pareto front: no other point is lower without being further right. The memory axis spans the points and does not start at 0. Variants of one strategy go from light to dark in the order of their parameter.",
		Width:   o.Width,
		Height:  legendHeight(legend, o.Width-4) + seriesHeight,
		legend:  legend,
	}
	p := newPlot()
	fig.panels = []*plot.Plot{p}
	p.Add(horizontalGrid(), verticalGrid())
	p.X.Label.Text = "device mallocs"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = decade125Ticks{}
	p.Y.Label.Text = "peak reserved (" + u.Name + ")"
	p.Y.Tick.Marker = plainTicks{yLabels}
	p.X.Max = hiX * 1.5
	// The memory axis spans the points, not 0 to the top: the peaks
	// compared differ by a few percent (6.05 against 6.09 GiB), which an
	// axis from 0 flattens.
	pad := max(float64(top-bottom)*0.08, float64(top)*0.005)
	p.Y.Min, p.Y.Max = max(float64(bottom)-pad, 0)/u.Size, (float64(top)+pad)/u.Size
	pt := func(r sim.Result) xy {
		return xy{max(float64(r.DeviceMallocs), 1), float64(r.PeakReservedBytes) / u.Size}
	}
	var line []xy
	for _, r := range front {
		line = append(line, pt(r))
	}
	p.Add(linePlotter{pts: line, sty: draw.LineStyle{Color: black, Width: refWidth, Dashes: []vg.Length{2, 1.5}}})
	var dots []dot
	lo := hiX
	for _, r := range rs {
		q := pt(r)
		sty := draw.GlyphStyle{Color: o.color(r.Strategy.Spec), Radius: markerRadius, Shape: marker(shape[r.Strategy.Spec])}
		dots = append(dots, dot{x: q.X, y: q.Y, sty: sty})
		lo = min(lo, q.X)
	}
	p.X.Min = lo / 1.5
	for _, r := range front {
		q := pt(r)
		dots = append(dots, dot{x: q.X, y: q.Y, sty: ring})
	}
	p.Add(dotPlotter{dots: dots})
	return o.finish(fig)
}

// ParetoFront returns the results without OOM that no other result without
// OOM beats on peak reserved memory without making more device
// allocations, nor on device allocations without reserving more: in
// increasing order of device allocations (and decreasing peak reserved).
func ParetoFront(rs []sim.Result) []sim.Result {
	var sorted []sim.Result
	for _, r := range rs {
		if r.OOMs == 0 {
			sorted = append(sorted, r)
		}
	}
	slices.SortStableFunc(sorted, func(a, b sim.Result) int {
		return cmp.Or(cmp.Compare(a.DeviceMallocs, b.DeviceMallocs), cmp.Compare(a.PeakReservedBytes, b.PeakReservedBytes))
	})
	var out []sim.Result
	for _, r := range sorted {
		if len(out) == 0 || r.PeakReservedBytes < out[len(out)-1].PeakReservedBytes {
			out = append(out, r)
		}
	}
	return out
}

// sweepRange names a sweep's variants in a legend: "round: cutoff 20 … 34".
func sweepRange(sw Sweep) string {
	first, last := sw.Values[0], sw.Values[len(sw.Values)-1]
	var parts []string
	for j, p := range sw.Params {
		parts = append(parts, p+" "+first[j]+" … "+last[j])
	}
	return sw.Strategy + ": " + strings.Join(parts, ", ")
}

// drawMarker draws marker number shape (of markerShapes) at pt.
func drawMarker(c draw.Canvas, pt vg.Point, shape int, fill color.Color) {
	c.DrawGlyph(draw.GlyphStyle{Color: fill, Radius: markerRadius, Shape: marker(shape)}, pt)
}

// markerLinePlotter draws a line through points with a marker at each; a
// point whose Y is NaN breaks the line and has no marker.
type markerLinePlotter struct {
	pts   []xy
	color color.RGBA
	shape int
}

func (m markerLinePlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := draw.LineStyle{Color: m.color, Width: dataWidth}
	var run []vg.Point
	flush := func() {
		if len(run) > 1 {
			c.StrokeLines(sty, c.ClipLinesXY(run)...)
		}
		run = run[:0]
	}
	for _, q := range m.pts {
		if math.IsNaN(q.Y) {
			flush()
			continue
		}
		run = append(run, vg.Point{X: trX(q.X), Y: trY(q.Y)})
	}
	flush()
	for _, q := range m.pts {
		if !math.IsNaN(q.Y) {
			pt := vg.Point{X: trX(q.X), Y: trY(q.Y)}
			if c.Contains(pt) {
				drawMarker(c, pt, m.shape, m.color)
			}
		}
	}
}

func markerLineThumb(col color.RGBA, shape int) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		lineThumb(col, dataWidth)(cv)
		drawMarker(cv, vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: (cv.Min.Y + cv.Max.Y) / 2}, shape, col)
	}
}

// ring is the mark of a point of the Pareto front: a black ring around it.
var ring = draw.GlyphStyle{Color: black, Radius: markerRadius + 1.2, Shape: draw.RingGlyph{}}

func dotThumb(col color.Color, shape int) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		drawMarker(cv, vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: (cv.Min.Y + cv.Max.Y) / 2}, shape, col)
	}
}

// rampThumb draws a sweep's colours side by side, light to dark, and its
// marker on them.
func rampThumb(cs []color.RGBA, shape int) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		h := cv.Max.Y - cv.Min.Y
		w := (cv.Max.X - cv.Min.X) / vg.Length(len(cs))
		for i, col := range cs {
			x := cv.Min.X + vg.Length(i)*w
			r := vg.Rectangle{Min: vg.Point{X: x, Y: cv.Min.Y + h*0.3}, Max: vg.Point{X: x + w, Y: cv.Max.Y - h*0.3}}
			cv.SetColor(col)
			cv.Fill(r.Path())
		}
		drawMarker(cv, vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: (cv.Min.Y + cv.Max.Y) / 2}, shape, cs[len(cs)/2])
	}
}

func frontThumb(cv draw.Canvas) {
	lineThumb(black, refWidth, 2, 1.5)(cv)
	cv.DrawGlyph(ring, vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: (cv.Min.Y + cv.Max.Y) / 2})
}

// strategiesOf returns the strategy of each result.
func strategiesOf(results []sim.Result) []sim.Strategy {
	out := make([]sim.Strategy, len(results))
	for i, r := range results {
		out[i] = r.Strategy
	}
	return out
}

// decade125Ticks mark a log axis at 1, 2 and 5 times the powers of ten in
// range, labelled (in SI units) at the powers of ten when the range spans
// three or more of them, else at each mark: a range of one or two decades
// still has several labels.
type decade125Ticks struct{}

func (decade125Ticks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	decades := 0
	for mag := math.Pow10(int(math.Floor(math.Log10(min)))); mag <= max; mag *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * mag; v >= min && v <= max {
				ticks = append(ticks, plot.Tick{Value: v})
				if m == 1 {
					decades++
				}
			}
		}
	}
	for i := range ticks {
		v := ticks[i].Value
		if decades < 3 || math.Abs(math.Log10(v)-math.Round(math.Log10(v))) < 1e-9 {
			ticks[i].Label = formatSI(v)
		}
	}
	return ticks
}
