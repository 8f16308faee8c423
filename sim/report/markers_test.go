package report

import (
	"bytes"
	"image"
	"image/color"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Every marker draws something, and no two draw the same pixels: 24
// things of one figure each have one of their own.
func TestMarkersDistinct(t *testing.T) {
	const size = 24
	var sheets [][]byte
	sheet := vgimg.NewWith(vgimg.UseWH(vg.Length(size*len(markerShapes)), size), vgimg.UseDPI(288))
	sc := draw.New(sheet)
	sc.SetColor(color.White)
	sc.Fill(sc.Rectangle.Path())
	for i := range markerShapes {
		c := vgimg.NewWith(vgimg.UseWH(size, size), vgimg.UseDPI(288))
		dc := draw.New(c)
		dc.SetColor(color.White)
		dc.Fill(dc.Rectangle.Path())
		g := draw.GlyphStyle{Color: color.Black, Radius: 6, Shape: marker(i)}
		dc.DrawGlyph(g, vg.Point{X: size / 2, Y: size / 2})
		sc.DrawGlyph(g, vg.Point{X: vg.Length(size*i + size/2), Y: size / 2})
		img := c.Image().(*image.RGBA)
		dark := 0
		for j := 0; j < len(img.Pix); j += 4 {
			if img.Pix[j] < 200 {
				dark++
			}
		}
		require.Positive(t, dark, "marker %d draws nothing", i)
		for k, other := range sheets {
			require.False(t, bytes.Equal(other, img.Pix), "markers %d and %d look the same", k, i)
		}
		sheets = append(sheets, img.Pix)
	}
	if p := os.Getenv("MARKER_SHEET"); p != "" {
		f, err := os.Create(p)
		require.NoError(t, err)
		defer f.Close()
		_, err = vgimg.PngCanvas{Canvas: sheet}.WriteTo(f)
		require.NoError(t, err)
	}
}
