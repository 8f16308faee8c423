package cli

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

func TestReferencesGolden(t *testing.T) {
	goldenRuns(t, []goldenCase{
		{"offline_min_capacity_json", nil, []string{"--offline", "--min-capacity", "-f", "json", "-s", "naive", "-s", "bestfit", "testdata/tiny.csv", "testdata/twodev.csv"}, 0},
		{"offline_min_capacity_table", nil, []string{"--offline", "--min-capacity", "-s", "naive", "-s", "pytorch", "-s", "unpooled", "testdata/tiny.csv", "testdata/minimalloc.csv"}, 0},
		{"err_min_capacity_host", nil, []string{"--min-capacity", "-b", "host", "testdata/tiny.csv"}, 2},
		{"err_time_limit", nil, []string{"--offline", "--time-limit", "-1s", "testdata/tiny.csv"}, 2},
	})
}

// TestMinCapacityBothSides replays every built-in strategy at the minimum
// capacity that simulate reports, where it must have no OOM, and 1 MiB
// below, where it must have one.
func TestMinCapacityBothSides(t *testing.T) {
	traceFiles := []string{"testdata/tiny.csv", "testdata/twodev.csv", "testdata/rmm.log"}
	args := append([]string{"--min-capacity", "--offline", "-f", "json", "-s", "all"}, traceFiles...)
	var rows, results []sim.Result
	runJSON(t, nil, &rows, args...)
	for _, r := range rows {
		if r.Device != nil {
			// A device's row: its own offline plan, its own min capacity,
			// the other devices at the replay's capacity.
			require.NotNil(t, r.OfflineBytes)
			assert.GreaterOrEqual(t, *r.OfflineBytes, r.PeakRequestedBytes)
			require.NotNil(t, r.MinCapacityBytes, "%s %s device %d", r.Trace, r.Strategy.Spec, *r.Device)
			c, d := *r.MinCapacityBytes, *r.Device
			assert.False(t, replayDevice(t, r.Trace, r.Strategy.Spec, d, c), "%s %s device %d: OOM at %d", r.Trace, r.Strategy.Spec, d, c)
			if c-1<<20 >= r.PeakRequestedBytes {
				assert.True(t, replayDevice(t, r.Trace, r.Strategy.Spec, d, c-1<<20), "%s %s device %d: no OOM at %d - 1 MiB", r.Trace, r.Strategy.Spec, d, c)
			}
			continue
		}
		results = append(results, r)
	}
	require.Len(t, results, len(traceFiles)*len(gpualloc.Names()))
	replayAt := func(trace, spec string, capacity int64) sim.Result {
		r, err := traces.Open(trace, traces.Options{})
		require.NoError(t, err)
		defer r.Close()
		sel, err := gpualloc.Select(spec, func(string) (string, bool) { return "", false })
		require.NoError(t, err)
		res, err := sim.Replay(r, sim.Config{Params: sel, Capacity: capacity, SeriesBuckets: -1})
		require.NoError(t, err)
		return res
	}
	for _, r := range results {
		require.NotNil(t, r.MinCapacityBytes, r.Strategy.Spec)
		require.NotNil(t, r.OfflineBytes, r.Strategy.Spec)
		c := *r.MinCapacityBytes
		assert.Zero(t, c%(1<<20), "%s %s: %d is not a multiple of 1 MiB", r.Trace, r.Strategy.Spec, c)
		assert.Zero(t, replayAt(r.Trace, r.Strategy.Spec, c).OOMs, "%s %s: OOM at %d", r.Trace, r.Strategy.Spec, c)
		assert.Positive(t, replayAt(r.Trace, r.Strategy.Spec, c-1<<20).OOMs, "%s %s: no OOM at %d - 1 MiB", r.Trace, r.Strategy.Spec, c)
		assert.GreaterOrEqual(t, *r.OfflineBytes, r.PeakRequestedBytes)
	}
}

func TestOfflineInReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	code, _, stderr := run(t, nil, "--offline", "-o", dir, "--plot-format", "svg", "-s", "naive", "-s", "round", "testdata/tiny.csv")
	require.Equal(t, 0, code, stderr)
	f, err := os.Open(filepath.Join(dir, "summary.csv"))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	col := slices.Index(rows[0], "offline_bytes")
	require.GreaterOrEqual(t, col, 0, "summary.csv has offline_bytes")
	require.Len(t, rows, 3)
	for _, r := range rows[1:] {
		assert.Equal(t, "8000000", r[col])
	}
	svg, err := os.ReadFile(filepath.Join(dir, "tiny-peak.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "offline plan")
}

// TestReferencesOutOfTime checks that a reference whose time limit runs
// out is left out with a note, and the run still succeeds: with a limit
// of 1ns every offline plan and min capacity search runs out.
func TestReferencesOutOfTime(t *testing.T) {
	code, stdout, stderr := run(t, nil, "--offline", "--min-capacity", "--time-limit", "1ns", "-f", "json", "-s", "naive", "testdata/tiny.csv")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `"min_capacity_bytes": null`)
	assert.Regexp(t, `simulate: testdata/tiny.csv: (naive: )?min capacity: .*time limit 1ns.*; min_capacity_bytes left out`, stderr)
	if strings.Contains(stdout, `"offline_bytes": null`) {
		assert.Contains(t, stderr, "simulate: testdata/tiny.csv: offline plan: the time limit 1ns ran out while reading the trace; offline_bytes left out")
	}
}
