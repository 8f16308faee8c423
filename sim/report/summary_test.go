package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/sim"
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

// The DEVICE column names devices only on the rows of traces of several:
// a trace of one device leaves it empty rather than "all".
func TestSummaryTableDeviceColumn(t *testing.T) {
	one := 1
	results := []sim.Result{
		{Trace: "single", Strategy: specOnly("naive")},
		{Trace: "multi", Strategy: specOnly("naive")},
		{Trace: "multi", Strategy: specOnly("naive"), Device: &one},
	}
	tab := report.SummaryTable(results)
	require.Equal(t, "DEVICE", tab.Head[2])
	assert.Equal(t, []string{"", "all", "1"}, []string{tab.Rows[0][2], tab.Rows[1][2], tab.Rows[2][2]})
}
