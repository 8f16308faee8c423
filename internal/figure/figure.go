// Package figure holds the style that simulate explain's and simulate
// diff's pages share: the HTML page with its sections of text and
// figures, and the figures' typeface, ticks, units, legend and rendering
// to PNG at the report's column width.
package figure

import (
	"bytes"
	"fmt"
	"html"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/gpualloc/gpualloc/sim/report"
)

// A Figure is a PNG of a page, with its file's stem and its caption.
type Figure struct {
	Name, Caption string
	PNG           []byte
}

// Section writes figs into d, each as its Name with ".png", and returns
// the HTML of a section that shows title, text as written and the
// figures with their captions.
func Section(d *report.DirWriter, title, text string, figs []Figure) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "<section>\n<h2>%s</h2>\n<pre>%s</pre>\n", html.EscapeString(title), html.EscapeString(text))
	for _, f := range figs {
		if err := d.WriteFile(f.Name+".png", f.PNG); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "<figure><img src=\"%s.png\" alt=\"%s\"><figcaption>%s</figcaption></figure>\n",
			html.EscapeString(f.Name), html.EscapeString(f.Name), html.EscapeString(f.Caption))
	}
	b.WriteString("</section>\n")
	return b.String(), nil
}

// WriteIndex writes into d the index.html of the sections, titled
// "simulate " and command, headed by heading.
func WriteIndex(d *report.DirWriter, command, heading string, sections []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>simulate %s</title>
<style>
body { font-family: "Liberation Sans", Arial, sans-serif; margin: 2em; max-width: 60em; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 13px; }
figure { display: inline-block; margin: 0 1.5em 1.5em 0; vertical-align: top; width: 30em; }
figure img { width: 100%%; }
figcaption { font-size: 13px; color: #333; }
</style>
</head>
<body>
<h1>%s</h1>
`, html.EscapeString(command), html.EscapeString(heading))
	for _, s := range sections {
		b.WriteString(s)
	}
	b.WriteString("</body>\n</html>\n")
	return d.WriteFile("index.html", []byte(b.String()))
}

// The text of the figures, in the page's typeface (Liberation Sans,
// built in) at its sizes.
var (
	SmallFont = font.Font{Typeface: "Liberation", Variant: "Sans", Size: 7}
	LabelFont = font.Font{Typeface: "Liberation", Variant: "Sans", Size: 8}
)

// plainTicks are gonum's default ticks with their labels in the fewest
// digits: "2500", not "2500.00"; "0.3", not "0.30000000000000004".
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			v := math.Round(ticks[i].Value*1e9) / 1e9
			ticks[i].Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return ticks
}

// NewPlot returns a plot in the page's style.
func NewPlot() *plot.Plot {
	p := plot.New()
	p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
	p.X.Tick.Label.Font = SmallFont
	p.Y.Tick.Label.Font = SmallFont
	p.X.Label.TextStyle.Font = LabelFont
	p.Y.Label.TextStyle.Font = LabelFont
	return p
}

// Unit returns the binary unit in which n bytes read best, and its bytes.
func Unit(n int64) (string, float64) {
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

// A Legend is a plot's legend, in the page's style, and the number of
// its entries.
type Legend struct {
	plot.Legend
	N int
}

// NewLegend returns an empty legend in the page's style.
func NewLegend() *Legend {
	l := &Legend{Legend: plot.NewLegend()}
	l.TextStyle.Font = SmallFont
	l.Top, l.Left = true, true
	return l
}

// Add adds an entry.
func (l *Legend) Add(name string, thumb ...plot.Thumbnailer) {
	l.Legend.Add(name, thumb...)
	l.N++
}

// LegendRow is the height of a legend's entry.
const LegendRow = 6.5 * vg.Length(1) // points

// Height returns the height of a figure whose data area is h high, with
// room for leg's entries above it.
func (l *Legend) Height(h vg.Length) vg.Length {
	return h + vg.Length(l.N)*LegendRow + 4
}

// Render draws p at the report's column width and height h, with leg's
// entries, if any, above the data area so that they cover none of it,
// and returns the PNG.
func Render(p *plot.Plot, leg *Legend, h vg.Length) ([]byte, error) {
	img := vgimg.NewWith(vgimg.UseWH(report.ColumnWidth, h), vgimg.UseDPI(report.DefaultDPI))
	c := draw.New(img)
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	if leg != nil && leg.N > 0 {
		top := vg.Length(leg.N)*LegendRow + 4
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

// Shorten keeps the end of s within n characters, marked by an ellipsis
// where it cuts.
func Shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return "…" + string(r[len(r)-n+1:])
	}
	return s
}
