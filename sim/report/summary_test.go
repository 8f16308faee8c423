package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/sim/report"
)

// A trace whose name a spreadsheet would read as a formula is escaped in
// summary.csv and timeseries.csv.
func TestCSVEscapesFormulas(t *testing.T) {
	results, _ := replay(t, "=HYPERLINK(1)", tinyTrace(t, false), "unpooled")
	var b bytes.Buffer
	require.NoError(t, report.WriteCSV(&b, results))
	lines := strings.Split(b.String(), "\n")
	assert.True(t, strings.HasPrefix(lines[1], "'=HYPERLINK(1),unpooled,"), lines[1])
	b.Reset()
	require.NoError(t, report.WriteTimeSeries(&b, results))
	lines = strings.Split(b.String(), "\n")
	assert.True(t, strings.HasPrefix(lines[1], "'=HYPERLINK(1),unpooled,0,"), lines[1])
}
