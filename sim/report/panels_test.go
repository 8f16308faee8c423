package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/sim/report"
)

// The name of a panel of a strategy of a long label wraps after its
// commas, each line within the panel, rather than running out of it.
func TestPanelLongLabel(t *testing.T) {
	const long = "round:cutoff=20,page=8KiB,reserve=3,first_parameter=12345,second_parameter=67890"
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), "naive", "round")
	results[1].Strategy = specOnly(long)
	fig := report.MemoryPanelsFigure("testdata/tiny.csv", results, report.Options{})
	require.NotNil(t, fig)
	var b bytes.Buffer
	require.NoError(t, fig.Write(&b, report.SVG, 0))
	svg := b.String()
	assert.False(t, strings.Contains(svg, ">"+long+"<"), "the name on one line")
	assert.True(t, strings.Contains(svg, ">round:cutoff=20,page=8KiB,reserve=3,first_parameter=12345,<"), "its first line")
	assert.True(t, strings.Contains(svg, ">second_parameter=67890<"), "its second line")
	assert.False(t, strings.Contains(svg, "…"), "two lines hold it whole")
}
