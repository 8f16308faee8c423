package report_test

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
)

func TestSplitPercents(t *testing.T) {
	for _, tc := range []struct {
		parts []int64
		want  []int
	}{
		{[]int64{1, 1, 1}, []int{34, 33, 33}},
		{[]int64{0, 0, 0, 5}, []int{0, 0, 0, 100}},
		{[]int64{0, 0}, []int{0, 0}},
		{[]int64{995, 5}, []int{100, 0}},           // 99.5 and 0.5: the earlier of equal remainders
		{[]int64{1, 1000, 1000}, []int{0, 50, 50}}, // 0.05, 49.98, 49.98
		{[]int64{3 << 50, 1 << 50}, []int{75, 25}}, // no overflow
		{[]int64{-5, 10}, []int{0, 100}},           // a negative part counts as 0
	} {
		got := report.SplitPercents(tc.parts)
		assert.Equal(t, tc.want, got, "%v", tc.parts)
		sum := 0
		for _, p := range got {
			sum += p
		}
		if slices.ContainsFunc(tc.parts, func(p int64) bool { return p > 0 }) {
			assert.Equal(t, 100, sum, "%v", tc.parts)
		}
	}
}

// TestSplitColumn checks the table's column of the split at the peak and
// its note against the results' fields.
func TestSplitColumn(t *testing.T) {
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	tab := report.SummaryTable(append(results, sim.Result{Trace: "empty", Strategy: results[0].Strategy}))
	col := slices.Index(tab.Head, report.SplitHead)
	require.GreaterOrEqual(t, col, 0)
	assert.True(t, tab.Right[col])
	for i, r := range results {
		require.Equal(t, r.PeakReservedBytes, r.AtPeakLiveBytes+r.AtPeakRoundingBytes+r.AtPeakFragmentedBytes+r.AtPeakCachedBytes, r.Strategy.Spec)
		var want []string
		for _, p := range report.SplitPercents([]int64{r.AtPeakLiveBytes, r.AtPeakRoundingBytes, r.AtPeakFragmentedBytes, r.AtPeakCachedBytes}) {
			want = append(want, strconv.Itoa(p))
		}
		assert.Equal(t, strings.Join(want, "/"), tab.Rows[i][col], r.Strategy.Spec)
	}
	assert.Equal(t, "-", tab.Rows[len(results)][col], "nothing reserved")
	assert.True(t, slices.ContainsFunc(tab.Notes, func(n string) bool { return strings.HasPrefix(n, report.SplitHead+":") }))
	// unpooled holds exactly what is live: all of it live.
	assert.Equal(t, "100/0/0/0", tab.Rows[2][col])
}

// TestBreakdownFigure checks the breakdown figure against a golden image,
// with and without the offline plan, and what it says of each.
func TestBreakdownFigure(t *testing.T) {
	assert.Nil(t, report.BreakdownFigure(nil, report.Options{}))
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	noTime, _ := replay(t, "notime.csv", tinyTrace(t, true), strategies...)
	both := append(slices.Clone(results), noTime...)
	fig := report.BreakdownFigure(both, report.Options{})
	require.NotNil(t, fig)
	assert.Equal(t, "breakdown", fig.Name)
	assert.Empty(t, fig.Trace)
	assert.NotContains(t, fig.Caption, "offline")
	checkGolden(t, "breakdown", fig)
	one := report.BreakdownFigure(results, report.Options{})
	assert.Less(t, one.Height, fig.Height, "a panel per trace")

	off := results[0].PeakRequestedBytes * 11 / 10
	withOff := report.BreakdownFigure(withReferences(results, off), report.Options{})
	assert.Contains(t, withOff.Caption, "offline plan")
	checkGolden(t, "breakdown_offline", withOff)
	var svg bytes.Buffer
	require.NoError(t, withOff.Write(&svg, report.SVG, 0))
	for _, s := range []string{"live (requested)", "rounding", "fragmented", "cached", "lower bound", "offline plan", "tiny (MiB)"} {
		assert.Contains(t, svg.String(), s)
	}
}
