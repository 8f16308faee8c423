package report_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/sim/report"
)

// An overhead figure where every replay ran out of memory has no marker to
// draw: it says so in its plot, over an axis from 1× to 2× whose labels
// stand apart, not the crowd of ticks of an empty range about 1×.
func TestOverheadFigureAllOOM(t *testing.T) {
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	oom := slices.Clone(results)
	for i := range oom {
		oom[i].OOMs = 1
	}
	fig := report.OverheadFigure(oom, report.Options{})
	require.NotNil(t, fig)
	assert.Contains(t, fig.Caption, "no replay completed")
	var b bytes.Buffer
	require.NoError(t, fig.Write(&b, report.SVG, 0))
	svg := b.String()
	assert.Contains(t, svg, "no replay completed: every strategy ran out of memory")
	for _, tick := range []string{">1×<", ">2×<"} {
		assert.Contains(t, svg, tick)
	}
	assert.NotContains(t, svg, "0.975×")

	// With a replay that completed, the figure is as before: no note.
	b.Reset()
	require.NoError(t, report.OverheadFigure(results, report.Options{}).Write(&b, report.SVG, 0))
	assert.NotContains(t, b.String(), "no replay completed")
}
