package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/dataset"
	"github.com/gpualloc/gpualloc/internal/duckdbcheck"
	"github.com/gpualloc/gpualloc/traces"
)

// parquetArgs replay two small traces, one of two devices, through three
// strategies.
var parquetArgs = []string{"-s", "naive", "-s", "round", "-s", "bestfit", "testdata/tiny.csv", "testdata/twodev.csv"}

// TestParquet writes --parquet and holds its rows to the replays: a row
// per event of each replay, in the order of the table, each device's
// events numbered from 0 as the trace orders them, and each device's
// largest live, allocated and reserved bytes its peaks in the JSON; the
// file is the same whatever -j.
func TestParquet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.parquet")
	code, stdout, stderr := run(t, nil, append([]string{"--parquet", path, "-f", "json", "-j", "3"}, parquetArgs...)...)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	rows, err := parquet.ReadFile[dataset.Event](path)
	require.NoError(t, err)

	var results []struct {
		Trace, Strategy    string
		Device             *int32
		Events             int64
		PeakRequestedBytes int64 `json:"peak_requested_bytes"`
		PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
		PeakReservedBytes  int64 `json:"peak_reserved_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &results))

	// The rows, replay by replay, in the order of the table's rows of sums.
	type key struct {
		trace, strategy string
		device          int32
	}
	type peaks struct{ live, alloc, res, events int64 }
	got := map[key]*peaks{}
	var order []string
	next := map[key]int64{}
	for i, r := range rows {
		if n := len(order); n == 0 || order[n-1] != r.Trace+" "+r.Strategy {
			order = append(order, r.Trace+" "+r.Strategy)
		}
		k := key{r.Trace, r.Strategy, r.Device}
		if r.Index != next[k] {
			t.Fatalf("row %d: %s %s device %d: index %d, want %d", i, r.Trace, r.Strategy, r.Device, r.Index, next[k])
		}
		next[k]++
		p := got[k]
		if p == nil {
			p = &peaks{}
			got[k] = p
		}
		p.live, p.alloc, p.res = max(p.live, r.Live), max(p.alloc, r.Allocated), max(p.res, r.Reserved)
		p.events++
		assert.Contains(t, []string{"alloc", "free", "release"}, r.Action, "row %d", i)
		if r.Trace == "testdata/twodev.csv" {
			assert.Equal(t, int64(-1), r.TimeUS, "row %d: twodev.csv records no time", i)
		} else {
			assert.GreaterOrEqual(t, r.TimeUS, int64(0), "row %d: tiny.csv records times", i)
		}
	}
	var want []string
	var total int64
	for _, res := range results {
		if res.Device == nil {
			want = append(want, res.Trace+" "+res.Strategy)
			total += res.Events
			continue
		}
		p := got[key{res.Trace, res.Strategy, *res.Device}]
		if !assert.NotNil(t, p, "%s %s device %d: no row", res.Trace, res.Strategy, *res.Device) {
			continue
		}
		assert.Equal(t, peaks{res.PeakRequestedBytes, res.PeakAllocatedBytes, res.PeakReservedBytes, res.Events}, *p,
			"%s %s device %d: live, allocated, reserved peaks and events", res.Trace, res.Strategy, *res.Device)
	}
	assert.Equal(t, want, order, "the replays' rows in the order of the table")
	assert.Equal(t, total, int64(len(rows)), "a row per event of each replay")

	// tiny.csv, which has one device, has its rows for single devices
	// too: the figures of the row of sums.
	for _, res := range results {
		if res.Device == nil && res.Trace == "testdata/tiny.csv" {
			p := got[key{res.Trace, res.Strategy, 0}]
			require.NotNil(t, p)
			assert.Equal(t, res.PeakReservedBytes, p.res)
		}
	}

	// The rows follow the trace: its actions and sizes, event by event.
	tr, err := traces.Open("testdata/twodev.csv", traces.Options{})
	require.NoError(t, err)
	var evs []traces.Event
	for tr.Scan() {
		evs = append(evs, tr.Event())
	}
	require.NoError(t, tr.Err())
	tr.Close()
	var twodev []dataset.Event
	for _, r := range rows {
		if r.Trace == "testdata/twodev.csv" && r.Strategy == results[len(results)-1].Strategy {
			twodev = append(twodev, r)
		}
	}
	require.Len(t, twodev, len(evs))
	for i, ev := range evs {
		assert.Equal(t, fmt.Sprintf("%s %d %d", ev.Op, ev.Device, ev.Size), fmt.Sprintf("%s %d %d", twodev[i].Action, twodev[i].Device, twodev[i].Size), "event %d", i)
	}

	// One replay at a time: the same file.
	path1 := filepath.Join(dir, "events1.parquet")
	code, _, stderr = run(t, nil, append([]string{"--parquet", path1, "-j", "1"}, parquetArgs...)...)
	require.Equal(t, 0, code, stderr)
	rows1, err := parquet.ReadFile[dataset.Event](path1)
	require.NoError(t, err)
	assert.Equal(t, rows, rows1, "-j 1 and -j 3 write the same rows")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "nothing but the two files: no temporary left")

	// DuckDB reads the same: a row per event, the peaks per strategy.
	r := duckdbcheck.Query(t, fmt.Sprintf("SELECT count(*), max(reserved_bytes) FILTER (trace = 'testdata/tiny.csv' AND strategy = '%s'), count(DISTINCT strategy) FROM read_parquet('%s')", results[0].Strategy, path))
	assert.Equal(t, []any{fmt.Sprint(total), fmt.Sprint(got[key{"testdata/tiny.csv", results[0].Strategy, 0}].res), fmt.Sprint(3)},
		[]any{fmt.Sprint(r.Rows[0][0]), fmt.Sprint(r.Rows[0][1]), fmt.Sprint(r.Rows[0][2])})
}

// TestParquetFailedReplay: a replay that fails leaves no file, and no
// temporary.
func TestParquetFailedReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.parquet")
	tmp := t.TempDir()
	code, _, stderr := run(t, nil, "--parquet", path, "--temp-dir", tmp, "-s", "naive", "testdata/tiny.csv", "testdata/badfree.csv")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "badfree.csv")
	_, err := os.Stat(path)
	assert.True(t, os.IsNotExist(err), "no file after a failed replay (%v)", err)
	for _, d := range []string{dir, tmp} {
		entries, err := os.ReadDir(d)
		require.NoError(t, err)
		assert.Empty(t, entries, "%s holds no temporary", d)
	}
}

// TestParquetUsage: --parquet needs a file it can write, checked before
// any replay.
func TestParquetUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--parquet", "-", "training"}, 2, `--parquet "-": want a file`},
		{[]string{"--parquet", "", "training"}, 2, `--parquet "": want a file`},
		{[]string{"--parquet", filepath.Join(t.TempDir(), "no", "x.parquet"), "training"}, 2, "no directory"},
		{[]string{"--parquet", "testdata/tiny.csv", "testdata/tiny.csv"}, 2, "is an input of the run too"},
	} {
		code, stdout, stderr := run(t, nil, tc.args...)
		assert.Equal(t, tc.code, code, "%v", tc.args)
		assert.Empty(t, stdout, "%v: nothing replayed", tc.args)
		assert.Contains(t, stderr, tc.want, "%v", tc.args)
	}
}

// TestParquetSites: a PyTorch snapshot's rows carry the call sites and the
// addresses it records.
func TestParquetSites(t *testing.T) {
	snap := filepath.Join("..", "..", "shared", "traces", "pytorch", "small_train_step.pickle")
	if _, err := os.Stat(snap); err != nil {
		t.Skipf("%s: the shared snapshots are absent", snap)
	}
	path := filepath.Join(t.TempDir(), "events.parquet")
	code, _, stderr := run(t, nil, "--parquet", path, "-s", "pytorch", snap)
	require.Equal(t, 0, code, stderr)
	rows, err := parquet.ReadFile[dataset.Event](path)
	require.NoError(t, err)
	require.NotEmpty(t, rows)
	sites := map[string]bool{}
	for i, r := range rows {
		if r.Action == "alloc" {
			assert.NotZero(t, r.Address, "row %d: a snapshot's allocation has its address", i)
		}
		assert.NotEqual(t, int64(-1), r.TimeUS, "row %d: a snapshot records times", i)
		sites[r.Site] = true
	}
	assert.Contains(t, sites, "/root/autodl-tmp/assignment2-systems/cs336_systems/trace_peak_memory.py:35 main")
	assert.Greater(t, len(sites), 5)
}
