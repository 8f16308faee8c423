package report_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
)

// withReferences returns results with the offline plan's bytes and a
// minimum capacity set, as simulate --offline --min-capacity gives them.
func withReferences(results []sim.Result, offline int64) []sim.Result {
	out := slices.Clone(results)
	for i := range out {
		c := int64(i+10) << 20
		out[i].OfflineBytes, out[i].MinCapacityBytes = &offline, &c
	}
	return out
}

// TestOfflineFigures checks the peak and overhead figures with the offline
// plan drawn beside the lower bound, against golden images.
func TestOfflineFigures(t *testing.T) {
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	// An offline plan above the lower bound, so that it stands apart.
	off := results[0].PeakRequestedBytes * 11 / 10
	rs := withReferences(results, off)
	peak := report.PeakFigure("testdata/tiny.csv", rs, report.Options{})
	assert.Contains(t, peak.Caption, "offline plan")
	checkGolden(t, "peak_offline", peak)
	over := report.OverheadFigure(rs, report.Options{})
	assert.Contains(t, over.Caption, "offline plan of each trace over its lower bound")
	checkGolden(t, "overhead_offline", over)
	// Without the offline plan the captions say nothing of it.
	assert.NotContains(t, report.PeakFigure("testdata/tiny.csv", results, report.Options{}).Caption, "offline")
}

func TestReferenceColumns(t *testing.T) {
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	var b bytes.Buffer
	require.NoError(t, report.SummaryTable(results).Write(&b))
	assert.NotContains(t, b.String(), "OFFLINE")

	rs := withReferences(results, results[0].PeakRequestedBytes)
	tab := report.SummaryTable(rs)
	n := len(tab.Head)
	assert.Equal(t, []string{"OFFLINE", "VS OFFLINE", "MIN CAPACITY"}, tab.Head[n-3:])
	for i, r := range rs {
		row := tab.Rows[i]
		assert.Equal(t, gpualloc.FormatSize(r.PeakRequestedBytes), row[n-3], r.Strategy.Spec)
		assert.Equal(t, []string{"10.0 MiB", "11.0 MiB", "12.0 MiB"}[i], row[n-1])
		if r.OOMs == 0 {
			assert.True(t, strings.HasSuffix(row[n-2], "×"), row[n-2])
		}
	}
	b.Reset()
	require.NoError(t, report.WriteJSON(&b, rs))
	var got []map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	assert.Equal(t, float64(rs[0].PeakRequestedBytes), got[0]["offline_bytes"])
	assert.Equal(t, float64(10<<20), got[0]["min_capacity_bytes"])
	b.Reset()
	require.NoError(t, report.WriteJSON(&b, results))
	assert.Contains(t, b.String(), `"offline_bytes": null`)
}
