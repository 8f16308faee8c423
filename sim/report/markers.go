package report

import (
	"math"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// markerShapes are the markers of strategies, sweep variants and traces,
// in the order they are handed out: 24 that differ in shape or in fill, so
// that up to 24 things of one figure each have their own and the figure
// reads in greyscale. The first eight are gonum's, which the figures had
// before there were more; the rest are polygons of this file, filled and
// open. Past 24, markers repeat (a figure of so many traces still tells
// its rows or lines apart by position).
var markerShapes = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
	draw.RingGlyph{}, draw.BoxGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
	polygon{n: 4, fill: true}, polygon{n: 4}, // diamonds
	polygon{n: 3, turn: -1, fill: true}, polygon{n: 3, turn: -1}, // triangles pointing down
	polygon{n: 5, turn: 1, fill: true}, polygon{n: 5, turn: 1}, // pentagons
	polygon{n: 6, fill: true}, polygon{n: 6}, // hexagons
	polygon{n: 5, turn: 1, star: true, fill: true}, polygon{n: 5, turn: 1, star: true}, // stars
	polygon{n: 3, fill: true}, polygon{n: 3}, // triangles pointing right
	polygon{n: 3, turn: 2, fill: true}, polygon{n: 3, turn: 2}, // triangles pointing left
	asterisk{}, bar{},
}

// marker returns the i-th marker, repeating past the last.
func marker(i int) draw.GlyphDrawer { return markerShapes[i%len(markerShapes)] }

// A polygon is a regular polygon of n corners (a star of n points when
// star is set), the first corner at turn quarter turns from the right, of
// the glyph's radius; filled, or drawn as an outline.
type polygon struct {
	n          int
	turn       float64
	star, fill bool
}

func (g polygon) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := float64(sty.Radius) * 1.15 // as much ink as gonum's circle of the radius
	corners := g.n
	if g.star {
		corners *= 2
		r *= 1.2
	}
	var p vg.Path
	for k := range corners {
		a := g.turn*math.Pi/2 + 2*math.Pi*float64(k)/float64(corners)
		rk := r
		if g.star && k%2 == 1 {
			rk = r * 0.45
		}
		q := vg.Point{X: pt.X + vg.Length(rk*math.Cos(a)), Y: pt.Y + vg.Length(rk*math.Sin(a))}
		if k == 0 {
			p.Move(q)
		} else {
			p.Line(q)
		}
	}
	p.Close()
	if g.fill {
		c.SetColor(sty.Color)
		c.Fill(p)
		return
	}
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(0.5)})
	c.Stroke(p)
}

// asterisk is a six-armed star of strokes.
type asterisk struct{}

func (asterisk) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(0.5)})
	r := float64(sty.Radius) * 1.2
	for k := range 3 {
		a := math.Pi/2 + math.Pi*float64(k)/3
		dx, dy := vg.Length(r*math.Cos(a)), vg.Length(r*math.Sin(a))
		var p vg.Path
		p.Move(vg.Point{X: pt.X - dx, Y: pt.Y - dy})
		p.Line(vg.Point{X: pt.X + dx, Y: pt.Y + dy})
		c.Stroke(p)
	}
}

// bar is a short thick vertical stroke.
type bar struct{}

func (bar) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(1.2)})
	r := sty.Radius * 1.2
	var p vg.Path
	p.Move(vg.Point{X: pt.X, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X, Y: pt.Y + r})
	c.Stroke(p)
}
