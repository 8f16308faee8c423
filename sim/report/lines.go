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

// A look is how a strategy's line is drawn: its colour, and the indexes of
// its marker (in markerShapes) and its dash pattern. A strategy of
// Palette's colour takes the marker and the pattern of its place there;
// the variants of a sweep, which share their strategy's hue, keep its
// pattern and take a marker each, in the sweep's order (see
// [Options.look]).
type look struct {
	c          color.RGBA
	mark, dash int
}

// lookOf is the look of a strategy drawn in c, by c's place in Palette.
func lookOf(c color.RGBA) look {
	i := paletteIndex(c)
	return look{c: c, mark: i, dash: i}
}

// line is the look's line.
func (l look) line() draw.LineStyle {
	return draw.LineStyle{Color: l.c, Width: dataWidth, Dashes: dashPatterns[l.dash%len(dashPatterns)]}
}

// glyph is the look's marker.
func (l look) glyph() draw.GlyphStyle {
	return draw.GlyphStyle{Color: l.c, Radius: markerRadius, Shape: marker(l.mark)}
}

// thumb is the legend sample of a strategy's line: its dashes and its
// marker.
func (l look) thumb() func(draw.Canvas) {
	return func(cv draw.Canvas) {
		y := (cv.Min.Y + cv.Max.Y) / 2
		cv.StrokeLine2(l.line(), cv.Min.X, y, cv.Max.X, y)
		cv.DrawGlyph(l.glyph(), vg.Point{X: (cv.Min.X + cv.Max.X) / 2, Y: y})
	}
}

// markedLine strokes a step line in a strategy's style and puts its marker
// at a few places along it, at x positions staggered by strategy (slot of
// slots) so that the markers of lines that coincide do not cover each
// other. Points with a NaN y break the line.
type markedLine struct {
	pts         []xy
	look        look
	slot, slots int
}

// markersPerLine is how many markers a line of a figure over time carries.
const markersPerLine = 5

func (m markedLine) Plot(c draw.Canvas, p *plot.Plot) {
	sty := m.look.line()
	for _, run := range runs(m.pts) {
		linePlotter{pts: run, sty: sty}.Plot(c, p)
	}
	trX, trY := p.Transforms(&c)
	gs := m.look.glyph()
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
