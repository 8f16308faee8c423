package report

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The plotters of the report's figures: lines and areas over data points,
// horizontal bars with a value written at their end, rectangles and
// reference lines. They draw only inside the data area.

// linePlotter strokes a polyline.
type linePlotter struct {
	pts []xy
	sty draw.LineStyle
}

func (l linePlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	line := make([]vg.Point, len(l.pts))
	for i, q := range l.pts {
		line[i] = vg.Point{X: trX(q.X), Y: trY(q.Y)}
	}
	c.StrokeLines(l.sty, c.ClipLinesXY(line)...)
}

// areaPlotter fills the area between two polylines over the same x range,
// lower from left to right and upper from left to right; a nil lower is
// the x axis (y = 0, or the axis's minimum when that is above 0).
type areaPlotter struct {
	lower, upper []xy
	fill         color.Color
}

func (a areaPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	if len(a.upper) == 0 {
		return
	}
	trX, trY := p.Transforms(&c)
	poly := make([]vg.Point, 0, len(a.upper)+len(a.lower)+2)
	for _, q := range a.upper {
		poly = append(poly, vg.Point{X: trX(q.X), Y: trY(q.Y)})
	}
	if a.lower == nil {
		base := trY(max(0, p.Y.Min)) // the axis's bottom on a log scale
		poly = append(poly,
			vg.Point{X: trX(a.upper[len(a.upper)-1].X), Y: base},
			vg.Point{X: trX(a.upper[0].X), Y: base})
	} else {
		for i := len(a.lower) - 1; i >= 0; i-- {
			q := a.lower[i]
			poly = append(poly, vg.Point{X: trX(q.X), Y: trY(q.Y)})
		}
	}
	c.FillPolygon(a.fill, c.ClipPolygonXY(poly))
}

// rectPlotter fills rectangles given in data coordinates.
type rectPlotter struct {
	rects []rect
}

type rect struct {
	x0, y0, x1, y1 float64
	fill           color.Color
}

func (r rectPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, q := range r.rects {
		pts := []vg.Point{
			{X: trX(q.x0), Y: trY(q.y0)}, {X: trX(q.x1), Y: trY(q.y0)},
			{X: trX(q.x1), Y: trY(q.y1)}, {X: trX(q.x0), Y: trY(q.y1)},
		}
		c.FillPolygon(q.fill, c.ClipPolygonXY(pts))
	}
}

// refLine draws a reference line across the data area: vertical at x =
// at, or horizontal at y = at, dashed.
type refLine struct {
	at         float64
	horizontal bool
}

func (r refLine) Plot(c draw.Canvas, p *plot.Plot) {
	sty := draw.LineStyle{Color: black, Width: refWidth, Dashes: []vg.Length{2, 1.5}}
	trX, trY := p.Transforms(&c)
	if r.horizontal {
		if y := trY(r.at); y >= c.Min.Y-0.01 && y <= c.Max.Y+0.01 {
			c.StrokeLine2(sty, c.Min.X, y, c.Max.X, y)
		}
		return
	}
	if x := trX(r.at); x >= c.Min.X-0.01 && x <= c.Max.X+0.01 {
		c.StrokeLine2(sty, x, c.Min.Y, x, c.Max.Y)
	}
}

// hbar is one horizontal bar, from the plotter's base to value, centred on
// y, with a label written after its end.
type hbar struct {
	y, value float64
	fill     color.Color
	label    string
}

// hbarPlotter draws horizontal bars of a given thickness (in y units),
// and their labels over whatever lies behind them (grid, reference lines),
// on a white ground.
type hbarPlotter struct {
	bars      []hbar
	base      float64
	thickness float64
	labelSty  text.Style
	part      int // barsAndLabels, barsOnly or labelsOnly
}

const (
	barsAndLabels = iota
	barsOnly
	labelsOnly
)

const (
	labelGap = vg.Length(2)   // between a bar's end and its label
	minBar   = vg.Length(1.5) // the shortest bar drawn
)

// only returns the plotter of the bars or of the labels alone, so that
// something can be drawn between them.
func (h hbarPlotter) only(part int) hbarPlotter {
	h.part = part
	return h
}

func (h hbarPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := h.labelSty
	sty.YAlign = draw.YCenter
	for _, b := range h.bars {
		x0, x1 := trX(h.base), trX(b.value)
		y0, y1 := trY(b.y-h.thickness/2), trY(b.y+h.thickness/2)
		// A bar at the base still shows its colour.
		x1 = max(x1, x0+minBar)
		if h.part != labelsOnly {
			pts := []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}
			c.FillPolygon(b.fill, c.ClipPolygonXY(pts))
		}
		if h.part != barsOnly && b.label != "" {
			at := vg.Point{X: x1 + labelGap, Y: trY(b.y)}
			r := sty.Rectangle(b.label)
			ground := vg.Rectangle{
				Min: vg.Point{X: at.X + r.Min.X - 1, Y: at.Y + r.Min.Y},
				Max: vg.Point{X: at.X + r.Max.X + 1, Y: at.Y + r.Max.Y},
			}
			c.SetColor(color.White)
			c.Fill(ground.Path())
			c.FillText(sty, at, b.label)
		}
	}
}

// A dot is a marker at a place of a plot.
type dot struct {
	x, y float64
	sty  draw.GlyphStyle
}

// dotPlotter draws markers inside the data area.
type dotPlotter struct{ dots []dot }

func (d dotPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, q := range d.dots {
		pt := vg.Point{X: trX(q.x), Y: trY(q.y)}
		if c.Contains(pt) {
			c.DrawGlyph(q.sty, pt)
		}
	}
}
