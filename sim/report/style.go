package report

import (
	"hash/fnv"
	"image/color"
	"maps"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/gpualloc/gpualloc/sim"
)

// Figure sizes for a two-column paper. Every figure of a report is
// ColumnWidth wide unless [Options].Width says otherwise; its fonts are
// sized for print at that width, so include it at 100% (\columnwidth in a
// two-column LaTeX paper), not scaled.
const (
	// ColumnWidth is the width of one column of a two-column paper
	// (IEEE 3.5 in, ACM 3.33 in, USENIX 3.3 in): 3.3 inches.
	ColumnWidth = 3.3 * vg.Inch
	// PageWidth is the full text width of a two-column paper: 7 inches.
	PageWidth = 7 * vg.Inch
)

// Type sizes, in points: tick labels, legends and annotations at 7 pt, axis
// labels at 8 pt, the sizes of a figure's text next to a 9–10 pt body.
const (
	smallPt = 7
	labelPt = 8
)

// The typeface of every figure: Liberation Sans, metrically the same as
// Arial and Helvetica, which stay legible at 7 pt where a serif face thins
// out. It is built in (no system fonts are read), so a figure is the same
// on every machine.
var typeface = font.Font{Typeface: "Liberation", Variant: "Sans"}

// Line widths.
const (
	dataWidth  = vg.Length(1)    // a strategy's line
	refWidth   = vg.Length(0.75) // the dashed lower bound across bars
	boundWidth = vg.Length(0.5)  // the lower bound over time, drawn over the strategies
	axisWidth  = vg.Length(0.5)
	gridWidth  = vg.Length(0.3)
)

var (
	black     = color.RGBA{A: 255}
	gridColor = color.RGBA{R: 0xdd, G: 0xdd, B: 0xdd, A: 255}
	// liveFill is the area under the live requested bytes (the lower
	// bound) in the memory figure, and the band of live bytes in the trace
	// figure.
	liveFill = color.RGBA{R: 0xd9, G: 0xd9, B: 0xd9, A: 255}
	// bandFill is the band of live bytes in the trace figure, between the
	// smallest and the largest value of each bucket.
	bandFill = color.RGBA{R: 0xbb, G: 0xbb, B: 0xbb, A: 255}
	// traceColor draws the trace itself (live bytes, request sizes), which
	// belongs to no strategy.
	traceColor = color.RGBA{R: 0x44, G: 0x44, B: 0x44, A: 255}
)

func rgb(hex uint32) color.RGBA {
	return color.RGBA{R: uint8(hex >> 16), G: uint8(hex >> 8), B: uint8(hex), A: 255}
}

// Palette is the strategies' colours, colour-blind safe. Six are Okabe
// and Ito's (Color Universal Design, 2008) without black, which the report
// keeps for the lower bound; then the darker colours of Paul Tol's muted
// scheme, ColorBrewer's brown (BrBG) and CARTO Bold's purple. The first ten
// are reserved for the built-in strategies (see StrategyColors), chosen so
// that every two of them differ by at least 26 in CIELAB (ΔE*ab) to normal
// vision and 13 to a deuteranope's or protanope's (Machado, Oliveira and
// Fernandes, 2009): bestfit brown and gmlake purple, where bestfit's
// reddish purple was near pytorch's wine and, to a deuteranope, the same
// as gmlake's teal. The rest serve other strategies.
var Palette = []color.RGBA{
	rgb(0xD55E00), // vermillion: naive
	rgb(0x0072B2), // blue: round
	rgb(0x009E73), // bluish green: unpooled
	rgb(0x8C510A), // brown (ColorBrewer BrBG): bestfit
	rgb(0xE69F00), // orange: buddy
	rgb(0x56B4E9), // sky blue: tlsf
	rgb(0x882255), // wine (Tol): pytorch
	rgb(0x332288), // indigo (Tol): bfc
	rgb(0x7F3C8D), // purple (CARTO Bold): gmlake
	rgb(0x999933), // olive (Tol): dualcursor
	rgb(0xCC79A7), // reddish purple (Okabe–Ito)
	rgb(0x44AA99), // teal (Tol)
	rgb(0xCC6677), // rose (Tol)
	rgb(0x117733), // green (Tol)
	rgb(0xAA4499), // purple (Tol)
	rgb(0xF0E442), // yellow (Okabe–Ito)
}

// fixedColor is the colour of each built-in strategy, an index into
// Palette: the same in every figure, every report and every paper.
var fixedColor = map[string]int{
	"naive":      0,
	"round":      1,
	"unpooled":   2,
	"bestfit":    3,
	"buddy":      4,
	"tlsf":       5,
	"pytorch":    6,
	"bfc":        7,
	"gmlake":     8,
	"dualcursor": 9,
}

// StrategyColors gives each of strategies its colour from [Palette], by
// spec, so that a strategy has the same colour in every figure of a report
// and across reports:
//
//   - a built-in strategy at its default parameters (as the defaults it
//     carries say: see [ShortSpec]) has a fixed colour
//     (naive vermillion, round blue, unpooled green, bestfit brown, buddy
//     orange, tlsf sky blue, pytorch wine, bfc indigo, gmlake purple,
//     dualcursor olive), whatever else is in the set;
//   - any other spec (a built-in with other parameters, a strategy of your
//     own) takes one of the colours no built-in has, chosen by a hash of
//     its text, so that it keeps its colour from run to run;
//   - when two such specs want the same colour, the one first in sorted
//     order keeps it and the other takes the next free colour, the
//     built-ins' colours that the set does not use coming last.
//
// A spec's colour therefore depends only on the set of specs, never on
// their order. Past len(Palette) strategies, colours repeat.
func StrategyColors(strategies []sim.Strategy) map[string]color.RGBA {
	short := map[string]string{} // ShortSpec by spec
	for _, s := range strategies {
		short[s.Spec] = ShortSpec(s)
	}
	uniq := slices.Sorted(maps.Keys(short))
	taken := make([]bool, len(Palette))
	out := make(map[string]color.RGBA, len(uniq))
	var rest []string
	for _, s := range uniq {
		if i, ok := fixedIndex(short[s]); ok && !taken[i] {
			taken[i] = true
			out[s] = Palette[i]
			continue
		}
		rest = append(rest, s)
	}
	// The order in which a spec looks for a free colour: from its own
	// among the free ones, then the built-ins' colours.
	free := len(Palette) - len(fixedColor)
	for _, s := range rest {
		h := fnv.New32a()
		h.Write([]byte(s))
		start := int(h.Sum32() % uint32(free))
		i := -1
		for n := range len(Palette) {
			var j int
			if n < free {
				j = len(fixedColor) + (start+n)%free
			} else {
				j = n - free
			}
			if !taken[j] {
				i = j
				break
			}
		}
		if i < 0 { // every colour is taken: start again
			clear(taken)
			i = len(fixedColor) + start
		}
		taken[i] = true
		out[s] = Palette[i]
	}
	return out
}

// fixedIndex returns the fixed colour of a short spec (see [ShortSpec])
// that names a built-in strategy at its default parameters.
func fixedIndex(short string) (int, bool) {
	name, params, _ := strings.Cut(short, ":")
	i, ok := fixedColor[strings.ToLower(name)]
	return i, ok && params == ""
}

// style sets a plot's fonts, lines and ticks for print.
func style(p *plot.Plot) {
	p.BackgroundColor = color.White
	p.Title.TextStyle.Font = font.From(typeface, labelPt)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(typeface, labelPt)
		a.Label.Padding = 2
		a.Tick.Label.Font = font.From(typeface, smallPt)
		a.Tick.Length = 3
		a.Tick.LineStyle.Width = axisWidth
		a.LineStyle.Width = axisWidth
		a.Padding = 0
	}
}

// textStyle returns the style of annotations.
func textStyle(size vg.Length) text.Style {
	return text.Style{
		Color:   black,
		Font:    font.From(typeface, size),
		Handler: plot.DefaultTextHandler,
	}
}

// horizontalGrid returns light horizontal grid lines at the y ticks.
func horizontalGrid() plot.Plotter {
	return gridPlotter{horizontal: true}
}

// verticalGrid returns light vertical grid lines at the x ticks.
func verticalGrid() plot.Plotter {
	return gridPlotter{}
}

type gridPlotter struct{ horizontal bool }

func (g gridPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := draw.LineStyle{Color: gridColor, Width: gridWidth}
	if g.horizontal {
		for _, t := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
			if t.IsMinor() || t.Value < p.Y.Min || t.Value > p.Y.Max {
				continue
			}
			y := trY(t.Value)
			c.StrokeLine2(sty, c.Min.X, y, c.Max.X, y)
		}
		return
	}
	for _, t := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		if t.IsMinor() || t.Value < p.X.Min || t.Value > p.X.Max {
			continue
		}
		x := trX(t.Value)
		c.StrokeLine2(sty, x, c.Min.Y, x, c.Max.Y)
	}
}
