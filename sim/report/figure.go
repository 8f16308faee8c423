package report

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/text/encoding/charmap"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"
)

// A Format is a file format of figures.
type Format string

const (
	PNG Format = "png" // raster, at Options.DPI
	SVG Format = "svg" // vector, text as text (fonts named, not embedded)
	PDF Format = "pdf" // vector, fonts embedded: for LaTeX
)

// DefaultFormats are the formats a report's figures are written in when
// [Options].Formats is empty.
var DefaultFormats = []Format{PNG, SVG}

// ParseFormats parses a comma-separated list of formats: "png,svg,pdf".
func ParseFormats(s string) ([]Format, error) {
	var out []Format
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		switch Format(f) {
		case PNG, SVG, PDF:
			if !containsFormat(out, Format(f)) {
				out = append(out, Format(f))
			}
		default:
			return nil, fmt.Errorf("unknown plot format %q (known: png, svg, pdf)", f)
		}
	}
	return out, nil
}

func containsFormat(fs []Format, f Format) bool {
	for _, g := range fs {
		if g == f {
			return true
		}
	}
	return false
}

// DefaultDPI is the resolution of PNG figures when [Options].DPI is 0:
// print quality at the figure's size.
const DefaultDPI = 300

// A Figure is one figure of a report, ready to be written in any format.
type Figure struct {
	// Name is the figure's file name without the extension, safe on every
	// file system: "dynamic-memory", "overhead".
	Name string
	// Trace is the trace the figure shows, "" for a figure across traces.
	Trace string
	// Title says in a few words what the figure shows; Caption says how to
	// read it. The index shows both; the figure itself has neither, so
	// that a paper can give its own.
	Title, Caption string
	// Width and Height are the figure's size.
	Width, Height vg.Length

	legend []legendEntry
	panels []*plot.Plot // stacked top to bottom, their data areas aligned
	cols   int          // panels in a grid of cols columns, row by row (0: one)
	title  bool         // draw Title above the figure
	// yLabel, if not "", is the label of a single panel's logarithmic y
	// axis, drawn by the figure (see logYLabel).
	yLabel string
}

// logYLabel has the figure draw the y label of its one panel p, whose y
// axis is logarithmic. gonum's layout places the label's box at the
// middle of the data range, which on a logarithmic axis lies near the
// top, and shrinks the plot from above to make the box fit: a gap under
// the legend. The axis keeps a blank label of the same height, which
// makes the layout leave the label's room at the left, and the figure
// writes the label there, centred on the data.
func (fig *Figure) logYLabel(p *plot.Plot) {
	fig.yLabel, p.Y.Label.Text = p.Y.Label.Text, " "
}

// titleHeight is the room a figure's title takes.
func titleHeight() vg.Length {
	return textStyle(labelPt).Height("Hg") + 3
}

// Write writes the figure in format f; dpi is the resolution of PNG (0
// means DefaultDPI). The output depends only on the figure: no dates, no
// names of the machine.
func (fig *Figure) Write(w io.Writer, f Format, dpi int) error {
	if dpi <= 0 {
		dpi = DefaultDPI
	}
	var c vg.CanvasWriterTo
	switch f {
	case PNG:
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(fig.Width, fig.Height), vgimg.UseDPI(dpi))}
	case SVG:
		c = vgsvg.New(fig.Width, fig.Height)
	case PDF:
		c = cp1252Canvas{vgpdf.New(fig.Width, fig.Height)}
	default:
		return fmt.Errorf("report: unknown figure format %q", f)
	}
	fig.draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("report: %s.%s: %w", fig.Name, f, err)
	}
	out := buf.Bytes()
	switch f {
	case SVG:
		out = fixSVG(out)
	case PDF:
		out = fixPDF(out)
	}
	_, err := w.Write(out)
	return err
}

// Save writes the figure to path, in the format its extension names.
func (fig *Figure) Save(path string, dpi int) error {
	f := Format(strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), "."))
	if !containsFormat([]Format{PNG, SVG, PDF}, f) {
		return fmt.Errorf("report: %s: unknown figure format %q (known: png, svg, pdf)", path, f)
	}
	var buf bytes.Buffer
	if err := fig.Write(&buf, f, dpi); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// svgFonts finds the font families that vgsvg writes without a fallback.
var svgFonts = regexp.MustCompile(`font-family:Liberation (Sans|Serif|Mono);`)

// fixSVG gives the figure's fonts metric-compatible fallbacks, for viewers
// without the Liberation fonts, so that text keeps the width the layout
// measured.
func fixSVG(b []byte) []byte {
	return svgFonts.ReplaceAllFunc(b, func(m []byte) []byte {
		switch {
		case bytes.Contains(m, []byte("Sans")):
			return []byte(`font-family:'Liberation Sans',Arial,Helvetica,sans-serif;`)
		case bytes.Contains(m, []byte("Serif")):
			return []byte(`font-family:'Liberation Serif','Times New Roman',Times,serif;`)
		}
		return []byte(`font-family:'Liberation Mono','Courier New',monospace;`)
	})
}

// pdfDates are the dates the PDF writer takes from the clock.
var pdfDates = regexp.MustCompile(`/(CreationDate|ModDate) \(D:[0-9]{14}\)`)

// fixPDF sets the PDF's dates to a fixed one, so that a figure is the same
// file on every run. The replacement has the same length, which keeps the
// PDF's table of byte offsets true.
func fixPDF(b []byte) []byte {
	return pdfDates.ReplaceAllFunc(b, func(m []byte) []byte {
		i := bytes.Index(m, []byte("(D:"))
		return append(m[:i:i], "(D:20000101000000)"...)
	})
}

// cp1252Canvas hands text to the PDF canvas in Windows-1252, the code page
// in which it embeds fonts, so that "×" and "µ" print as themselves.
type cp1252Canvas struct{ *vgpdf.Canvas }

func (c cp1252Canvas) FillString(f font.Face, pt vg.Point, s string) {
	if enc, err := charmap.Windows1252.NewEncoder().String(s); err == nil {
		s = enc
	}
	c.Canvas.FillString(f, pt, s)
}

// A legendEntry is a name and a way to draw its sample. A wide entry (a
// note on a mark, longer than the rest) takes a row of its own below the
// grid of the others, so that it does not widen their columns.
type legendEntry struct {
	name  string
	thumb func(c draw.Canvas) // draws into a thumbWidth × row-height box
	wide  bool
}

// gridEntries splits entries into those laid out in the grid and the wide
// ones below it.
func gridEntries(entries []legendEntry) (grid, wide []legendEntry) {
	for _, e := range entries {
		if e.wide {
			wide = append(wide, e)
		} else {
			grid = append(grid, e)
		}
	}
	return grid, wide
}

const (
	thumbWidth  = vg.Length(12)
	legendGapX  = vg.Length(8) // between columns
	legendInset = vg.Length(3) // between a thumbnail and its text
	legendPadY  = vg.Length(3) // below the legend
)

func lineThumb(c color.Color, width vg.Length, dashes ...vg.Length) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		y := (cv.Min.Y + cv.Max.Y) / 2
		cv.StrokeLine2(draw.LineStyle{Color: c, Width: width, Dashes: dashes}, cv.Min.X, y, cv.Max.X, y)
	}
}

// areaThumb is a filled area with its top edge drawn.
func areaThumb(fill, edge color.Color, width vg.Length) func(draw.Canvas) {
	return func(cv draw.Canvas) {
		h := cv.Max.Y - cv.Min.Y
		top := cv.Max.Y - h*0.3
		r := vg.Rectangle{Min: vg.Point{X: cv.Min.X, Y: cv.Min.Y + h*0.1}, Max: vg.Point{X: cv.Max.X, Y: top}}
		cv.SetColor(fill)
		cv.Fill(r.Path())
		cv.StrokeLine2(draw.LineStyle{Color: edge, Width: width}, cv.Min.X, top, cv.Max.X, top)
	}
}

// legendLayout lays the entries out in a grid, row by row, with as many
// columns as the width holds, each column as wide as its widest entry; it
// returns the columns' widths, the row height and the legend's height.
func legendLayout(all []legendEntry, width vg.Length) (colW []vg.Length, rowH, height vg.Length) {
	entries, wide := gridEntries(all)
	sty := textStyle(smallPt)
	rowH = sty.Height("Hg") * 1.25
	if len(entries) == 0 {
		if len(wide) == 0 {
			return nil, 0, 0
		}
		return nil, rowH, vg.Length(len(wide))*rowH + legendPadY
	}
	w := make([]vg.Length, len(entries))
	for i, e := range entries {
		w[i] = thumbWidth + legendInset + sty.Width(e.name)
	}
	for cols := len(entries); cols >= 1; cols-- {
		colW = make([]vg.Length, cols)
		for i := range entries {
			colW[i%cols] = max(colW[i%cols], w[i])
		}
		total := vg.Length(cols-1) * legendGapX
		for _, c := range colW {
			total += c
		}
		if total <= width {
			break
		}
	}
	rows := (len(entries)+len(colW)-1)/len(colW) + len(wide)
	return colW, rowH, vg.Length(rows)*rowH + legendPadY
}

// legendHeight is the height of the legend of entries across width.
func legendHeight(entries []legendEntry, width vg.Length) vg.Length {
	_, _, h := legendLayout(entries, width)
	return h
}

// drawLegend draws the legend at the top of c, centred, and returns the
// canvas below it.
func drawLegend(c draw.Canvas, all []legendEntry) draw.Canvas {
	width := c.Max.X - c.Min.X
	colW, rowH, height := legendLayout(all, width)
	if height == 0 {
		return c
	}
	entries, wide := gridEntries(all)
	cols := max(len(colW), 1)
	sty := textStyle(smallPt)
	sty.YAlign = draw.YCenter
	total := vg.Length(len(colW)-1) * legendGapX
	for _, w := range colW {
		total += w
	}
	x0 := c.Min.X + max(0, width-total)/2
	entry := func(e legendEntry, x, top vg.Length) {
		box := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x, Y: top - rowH},
			Max: vg.Point{X: x + thumbWidth, Y: top},
		}}
		e.thumb(box)
		c.FillText(sty, vg.Point{X: x + thumbWidth + legendInset, Y: top - rowH/2}, e.name)
	}
	for i, e := range entries {
		col, row := i%cols, i/cols
		x := x0
		for _, w := range colW[:col] {
			x += w + legendGapX
		}
		entry(e, x, c.Max.Y-vg.Length(row)*rowH)
	}
	rows := (len(entries) + cols - 1) / cols
	for i, e := range wide {
		w := thumbWidth + legendInset + sty.Width(e.name)
		entry(e, c.Min.X+max(0, width-w)/2, c.Max.Y-vg.Length(rows+i)*rowH)
	}
	c.Max.Y -= height
	return c
}

// draw draws the figure: a white page, the legend across the top, then the
// panels one below the other with their data areas aligned.
func (fig *Figure) draw(c draw.Canvas) {
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	const margin = vg.Length(2)
	c = draw.Crop(c, margin, -margin, margin, -margin)
	if fig.title {
		sty := textStyle(labelPt)
		sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
		c.FillText(sty, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: c.Max.Y}, fig.Title)
		c.Max.Y -= titleHeight()
	}
	c = drawLegend(c, fig.legend)
	if len(fig.panels) == 1 {
		p := fig.panels[0]
		p.Draw(c)
		if fig.yLabel != "" {
			sty := p.Y.Label.TextStyle
			sty.Rotation += math.Pi / 2
			dc := p.DataCanvas(c)
			c.FillText(sty, vg.Point{X: c.Min.X + sty.Height(fig.yLabel), Y: (dc.Min.Y + dc.Max.Y) / 2}, fig.yLabel)
		}
		return
	}
	cols := max(fig.cols, 1)
	rows := (len(fig.panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i, p := range fig.panels {
		grid[i/cols][i%cols] = p
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadY: 8, PadX: 6}
	if cols > 1 {
		tiles.PadY = 3
	}
	for r, row := range plot.Align(grid, tiles, c) {
		for k, tc := range row {
			if p := grid[r][k]; p != nil {
				p.Draw(tc)
			}
		}
	}
}
