package report

import (
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Each strategy's line has a dash pattern and a marker of its own as well
// as its colour, so that lines that coincide, a greyscale print and a
// reader who does not tell the colours apart still tell the strategies
// apart. Pattern and marker follow the strategy's place in Palette, so they
// are as fixed as its colour.
var (
	dashPatterns = [][]vg.Length{
		nil, {4, 1.5}, {1, 1.2}, {4, 1.2, 1, 1.2}, {7, 2}, {2, 2},
		{4, 1, 1, 1, 1, 1}, {8, 2, 2, 2}, {1.5, 3}, {5, 1},
	}
	markerShapes = []draw.GlyphDrawer{
		draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
		draw.RingGlyph{}, draw.BoxGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
	}
)

// markerRadius is the radius of a line's markers.
const markerRadius = vg.Length(1.6)

// paletteIndex returns the place of c in Palette, or 0.
func paletteIndex(c color.RGBA) int {
	for i, p := range Palette {
		if p == c {
			return i
		}
	}
	return 0
}

// lineStyle is the line of a strategy drawn in c.
func lineStyle(c color.RGBA) draw.LineStyle {
	return draw.LineStyle{Color: c, Width: dataWidth, Dashes: dashPatterns[paletteIndex(c)%len(dashPatterns)]}
}

// glyphStyle is the marker of a strategy drawn in c.
func glyphStyle(c color.RGBA) draw.GlyphStyle {
	return draw.GlyphStyle{Color: c, Radius: markerRadius, Shape: markerShapes[paletteIndex(c)%len(markerShapes)]}
}

// strategyThumb is the legend sample of a strategy's line: its dashes and
// its marker.
func strategyThumb(c color.Color) func(draw.Canvas) {
	rgba, _ := c.(color.RGBA)
	return func(cv draw.Canvas) {
		y := (cv.Min.Y + cv.Max.Y) / 2
		cv.StrokeLine2(lineStyle(rgba), cv.Min.X, y, cv.Max.X, y)
		cv.DrawGlyph(glyphStyle(rgba), vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: y})
	}
}

// markedLine strokes a step line in a strategy's style and puts its marker
// at a few places along it, at x positions staggered by strategy (slot of
// slots) so that the markers of lines that coincide do not cover each
// other. Points with a NaN y break the line.
type markedLine struct {
	pts         []xy
	c           color.RGBA
	slot, slots int
}

// markersPerLine is how many markers a line of a figure over time carries.
const markersPerLine = 5

func (m markedLine) Plot(c draw.Canvas, p *plot.Plot) {
	sty := lineStyle(m.c)
	for _, run := range runs(m.pts) {
		linePlotter{pts: run, sty: sty}.Plot(c, p)
	}
	trX, trY := p.Transforms(&c)
	gs := glyphStyle(m.c)
	span := p.X.Max - p.X.Min
	for k := range markersPerLine {
		x := p.X.Min + span*(float64(k)+(float64(m.slot)+0.5)/float64(max(m.slots, 1)))/markersPerLine
		y, ok := stepAt(m.pts, x)
		if !ok {
			continue
		}
		pt := vg.Point{X: trX(x), Y: trY(y)}
		if c.Contains(pt) {
			c.DrawGlyph(gs, pt)
		}
	}
}

// stepAt returns the value of a step line at x.
func stepAt(pts []xy, x float64) (float64, bool) {
	for i := 0; i+1 < len(pts); i++ {
		if pts[i].X <= x && x <= pts[i+1].X && pts[i].Y == pts[i+1].Y && !math.IsNaN(pts[i].Y) {
			return pts[i].Y, true
		}
	}
	return 0, false
}

// runs splits a line at its points whose y is NaN.
func runs(pts []xy) [][]xy {
	var out [][]xy
	start := -1
	for i, q := range pts {
		if math.IsNaN(q.Y) {
			if start >= 0 {
				out = append(out, pts[start:i])
			}
			start = -1
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, pts[start:])
	}
	return out
}
