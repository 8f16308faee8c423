package report

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"

	"github.com/gpualloc/gpualloc/sim"
)

// longSpec is a strategy spec far wider than a column-wide figure.
const longSpec = "pytorch:conf=max_split_size_mb:64,expandable_segments:True,roundup_power2_divisions:8,garbage_collection_threshold:0.8"

func TestFitLabel(t *testing.T) {
	sty := textStyle(smallPt)
	assert.Equal(t, "naive", fitLabel(sty, "naive", 50, 3))
	got := fitLabel(sty, longSpec, 100, 3)
	lines := strings.Split(got, "\n")
	require.Len(t, lines, 3, got)
	assert.Equal(t, "pytorch:", lines[0], "the name breaks from its parameters")
	for _, l := range lines {
		assert.LessOrEqual(t, sty.Width(l), vg.Length(100), l)
	}
	assert.True(t, strings.HasSuffix(lines[2], "…"), "what does not fit is cut short: %q", got)
	// Wide enough, every parameter shows, a line after each comma that
	// the width needs.
	got = fitLabel(sty, longSpec, 200, 3)
	assert.Equal(t, longSpec, strings.ReplaceAll(got, "\n", ""))
	assert.NotContains(t, got, "…")
	// A piece wider than the width alone is cut short too.
	assert.LessOrEqual(t, sty.Width(fitLabel(sty, "x:"+strings.Repeat("a", 200), 100, 2)), vg.Length(100))
}

// A strategy of a long label leaves the peak and overhead figures' data
// at least half their width.
func TestLongLabelFigures(t *testing.T) {
	results := []sim.Result{
		{Trace: "t", Strategy: specOnly("naive"), PeakRequestedBytes: 8 << 20, PeakReservedBytes: 10 << 20, Overhead: 1.25},
		{Trace: "t", Strategy: specOnly(longSpec), PeakRequestedBytes: 8 << 20, PeakReservedBytes: 20 << 20, Overhead: 2.5},
	}
	for _, fig := range []*Figure{PeakFigure("t", results, Options{}), OverheadFigure(results, Options{})} {
		require.NotNil(t, fig)
		p := fig.panels[0]
		c := draw.NewCanvas(new(recorder.Canvas), fig.Width-4, fig.Height-4-legendHeight(fig.legend, fig.Width-4))
		dc := p.DataCanvas(c)
		assert.GreaterOrEqual(t, dc.Max.X-dc.Min.X, fig.Width/2, "%s: the data area keeps half the figure", fig.Name)
	}
}
