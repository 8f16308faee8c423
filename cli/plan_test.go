package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/traces"
)

// TestPlanGolden runs simulate plan and checks its output, and its one
// line of error where it fails, against golden files.
func TestPlanGolden(t *testing.T) {
	goldenRuns(t, []goldenCase{
		{"plan_json", nil, []string{"plan", "-f", "json", "testdata/minimalloc.csv", "testdata/tiny.csv", "testdata/twodev.csv", "testdata/rmm.log"}, 0},
		{"convert_minimalloc", nil, []string{"convert", "--to", "minimalloc", "testdata/tiny.csv", "-"}, 0},
		{"convert_minimalloc_keeps_ids", nil, []string{"convert", "-t", "minimalloc", "testdata/minimalloc.csv", "-"}, 0},
		{"err_plan_capacity", nil, []string{"plan", "--capacity", "3MiB", "testdata/tiny.csv"}, 1},
		{"err_plan_capacity_device", nil, []string{"plan", "--capacity", "2MiB", "testdata/twodev.csv"}, 1},
		{"err_plan_no_trace", nil, []string{"plan"}, 2},
		{"err_plan_bad_capacity", nil, []string{"plan", "--capacity", "0", "testdata/tiny.csv"}, 2},
		{"err_plan_bad_time_limit", nil, []string{"plan", "--time-limit", "0s", "testdata/tiny.csv"}, 2},
		{"err_plan_out_two", nil, []string{"plan", "-o", "x.csv", "testdata/tiny.csv", "testdata/minimalloc.csv"}, 2},
		{"err_plan_out_devices", nil, []string{"plan", "-o", "x.csv", "testdata/twodev.csv"}, 1},
		{"err_plan_bad_trace", nil, []string{"plan", "testdata/badfree.csv"}, 1},
		{"err_plan_huge_sizes", nil, []string{"plan", "testdata/plan_huge_sizes.csv"}, 1},
		{"err_convert_to", nil, []string{"convert", "-t", "xla", "testdata/tiny.csv", "-"}, 2},
		{"err_convert_minimalloc_gz", nil, []string{"convert", "-t", "minimalloc", "testdata/tiny.csv", "out.csv.gz"}, 2},
		{"plan_bundled_by_name", nil, []string{"plan", "-f", "json", "--no-search", "transformer-cpu"}, 0},
		{"err_convert_minimalloc_devices", nil, []string{"convert", "-t", "minimalloc", "testdata/twodev.csv", "-"}, 1},
	})
}

func TestPlanTable(t *testing.T) {
	code, stdout, stderr := run(t, nil, "plan", "testdata/minimalloc.csv", "testdata/twodev.csv")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 4)
	assert.Regexp(t, `^TRACE +DEVICE +BUFFERS +PEAK LIVE +LOWER BOUND +OFFLINE +GAP +OPTIMAL +METHOD +TIME$`, lines[0])
	assert.Regexp(t, `^testdata/minimalloc.csv +0 +5 +3.00 MiB +3.00 MiB +3.00 MiB +\+0.00% +yes +\S+/\S+ +\d+ ms$`, lines[1])
	assert.Regexp(t, `^testdata/twodev.csv +1 `, lines[3])
}

// TestPlanProvesBoundAbovePeak plans a problem whose optimum (7 bytes) is
// above its peak of live bytes (6, see plan's staggered test problem):
// lower_bound_bytes rises to the optimum above peak_requested_bytes, the
// plan is optimal with no gap, and the table shows both figures.
func TestPlanProvesBoundAbovePeak(t *testing.T) {
	in := writeText(t, t.TempDir(), "staggered.csv", "id,lower,upper,size\n"+
		"L0,0,3,2\nL1,1,4,1\nL2,2,5,2\nS0,0,1,4\nS1,1,2,3\nS2,2,3,1\nS3,3,4,3\nS4,4,5,4\n")
	var rows []planRow
	runJSON(t, nil, &rows, "plan", "-f", "json", in)
	require.Len(t, rows, 1)
	r := rows[0]
	assert.Equal(t, [3]int64{6, 7, 7}, [3]int64{r.PeakRequestedBytes, r.LowerBoundBytes, r.OfflineBytes}, "peak requested, lower bound, offline")
	assert.Zero(t, r.Gap)
	assert.True(t, r.Optimal)

	code, stdout, stderr := run(t, nil, "plan", in)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2)
	assert.Regexp(t, `^.*staggered.csv +8 +6 B +7 B +7 B +\+0.00% +yes +\S+ +\d+ ms$`, lines[1])
}

// TestPlanGapAgainstBound checks the table's gap: against the proven bound,
// not the peak, with both shown.
func TestPlanGapAgainstBound(t *testing.T) {
	var buf bytes.Buffer
	e := &env{stdout: &buf}
	require.NoError(t, writePlanRows(e, "table", []planRow{{Trace: "x", Buffers: 3, PeakRequestedBytes: 100 << 20,
		LowerBoundBytes: 104 << 20, OfflineBytes: 105 << 20, Gap: gapOf(105<<20, 104<<20), Method: "lns"}}))
	assert.Regexp(t, `\nx +3 +100 MiB +104 MiB +105 MiB +\+0.96% +no +lns +0 ms\n$`, buf.String())
}

// planOut runs simulate plan -o on trace and returns the placement it
// wrote, checked against problem.
func planOut(t *testing.T, trace string, problem plan.Problem, capacity int64, args ...string) []plan.Placement {
	t.Helper()
	out := filepath.Join(t.TempDir(), "placement.csv")
	code, stdout, stderr := run(t, nil, append(append([]string{"plan", "-o", out}, args...), trace)...)
	require.Equal(t, 0, code, stderr)
	require.NotEmpty(t, stdout)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	placed, err := plan.ReadPlacements(f, out)
	require.NoError(t, err)
	require.NoError(t, plan.Check(problem, placed, capacity))
	return placed
}

func TestPlanWritesMiniMallocSolution(t *testing.T) {
	// MiniMalloc's own conventions: the header's end is inclusive, and the
	// solution gives upper = end + 1, as MiniMalloc's ToCsv writes it.
	dir := t.TempDir()
	in := filepath.Join(dir, "problem.csv")
	require.NoError(t, os.WriteFile(in, []byte("buffer,start,end,size\nx,0,1,4\ny,1,2,4\nz,0,0,2\n"), 0o644))
	problem := plan.Problem{Buffers: []plan.Buffer{{ID: "x", Lower: 0, Upper: 2, Size: 4}, {ID: "y", Lower: 1, Upper: 3, Size: 4}, {ID: "z", Lower: 0, Upper: 1, Size: 2}}}
	placed := planOut(t, in, problem, 10, "--capacity", "10")
	var ids []string
	for _, q := range placed {
		ids = append(ids, q.ID)
	}
	assert.Equal(t, []string{"x", "y", "z"}, ids, "rows in the order of the input")

	// The tiny MiniMalloc problem of the golden tests, in its own format.
	mm := readProblem(t, "testdata/minimalloc.csv")
	placed = planOut(t, "testdata/minimalloc.csv", mm, 3<<20)
	raw, err := os.ReadFile("testdata/minimalloc.csv")
	require.NoError(t, err)
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n")[1:] {
		assert.True(t, strings.HasPrefix(line, placed[i].ID+","), "row %d keeps id and times: %q", i, line)
	}
}

// readProblem reads the MiniMalloc problem at path.
func readProblem(t *testing.T, path string) plan.Problem {
	t.Helper()
	r, err := traces.Open(path, traces.Options{})
	require.NoError(t, err)
	defer r.Close()
	p, ok := plan.FromMiniMalloc(r)
	require.True(t, ok, path)
	return p
}

// traceProblems reads the trace at path into its devices' problems.
func traceProblems(t *testing.T, path string) []plan.DeviceProblem {
	t.Helper()
	r, err := traces.Open(path, traces.Options{})
	require.NoError(t, err)
	probs, err := plan.FromTrace(r)
	r.Close()
	require.NoError(t, err)
	return probs
}

func TestPlanNativeTraceAndConvertAgree(t *testing.T) {
	probs := traceProblems(t, "testdata/tiny.csv")
	require.Len(t, probs, 1)
	placed := planOut(t, "testdata/tiny.csv", probs[0].Problem, 0)
	assert.Equal(t, "1", placed[0].ID)

	// The trace converted to MiniMalloc CSV is the same problem.
	mm := filepath.Join(t.TempDir(), "tiny.mm.csv")
	code, _, stderr := run(t, nil, "convert", "--to", "minimalloc", "testdata/tiny.csv", mm)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, probs[0].Problem, readProblem(t, mm))
	_, a, _ := run(t, nil, "plan", "-f", "csv", "testdata/tiny.csv")
	_, b, _ := run(t, nil, "plan", "-f", "csv", mm)
	field := func(csv string, col int) string {
		return strings.Split(strings.Split(csv, "\n")[1], ",")[col]
	}
	assert.Equal(t, field(a, 4), field(b, 4), "offline_bytes")
}

func TestPlanTightInstance(t *testing.T) {
	p := plan.Tight(60, 1<<20, 1<<10, rand.New(rand.NewPCG(7, 60)))
	in := filepath.Join(t.TempDir(), "tight.csv")
	f, err := os.Create(in)
	require.NoError(t, err)
	require.NoError(t, plan.WriteProblem(f, p))
	require.NoError(t, f.Close())
	planOut(t, in, p, 1<<20, "--capacity", "1MiB", "--time-limit", "20s")
}

func TestPlanHelp(t *testing.T) {
	code, stdout, _ := run(t, nil, "plan", "-h")
	require.Equal(t, 0, code)
	for _, s := range []string{"usage: simulate plan [flags] TRACE...", "--capacity SIZE", "--time-limit", "-o, --out FILE", "MiniMalloc"} {
		assert.Contains(t, stdout, s)
	}
	_, stdout, _ = run(t, nil, "convert", "-h")
	assert.Contains(t, stdout, "--to minimalloc")
}

// TestPlanSharedSnapshots plans the shared real PyTorch snapshots and checks
// each placement written against the snapshot's allocations.
func TestPlanSharedSnapshots(t *testing.T) {
	for _, file := range pk.SharedSnapshots(t, sharedSnapshotDir) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			probs := traceProblems(t, file)
			if len(probs) != 1 {
				t.Skipf("%d devices: a placement file holds one", len(probs))
			}
			placed := planOut(t, file, probs[0].Problem, 0)
			var top int64
			for _, q := range placed {
				top = max(top, q.Offset+q.Size)
			}
			assert.Equal(t, plan.LowerBound(probs[0].Buffers), top, "the snapshots are planned at their lower bound")
		})
	}
}

// TestPlanTimeLimitCoversReading checks that --time-limit bounds the
// reading of a trace: a trace that never ends (a pipe nobody writes)
// gives one line naming the limit, exit 1, soon after the limit, and
// --progress always shows the reading meanwhile.
func TestPlanTimeLimitCoversReading(t *testing.T) {
	defer func(every, after time.Duration) { planProgressEvery, planProgressAfter = every, after }(planProgressEvery, planProgressAfter)
	planProgressEvery, planProgressAfter = 5*time.Millisecond, 0
	pr, pw := io.Pipe()
	defer pw.Close()
	var out, errb bytes.Buffer
	c := Command{Stdin: pr, Stdout: &out, Stderr: &errb, LookupEnv: func(string) (string, bool) { return "", false }}
	start := time.Now()
	code := c.Run(context.Background(), []string{"plan", "--time-limit", "200ms", "--progress", "always", "-"})
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, 1, code)
	assert.Empty(t, out.String())
	assert.Contains(t, errb.String(), "plan: -: reading, ")
	assert.Contains(t, errb.String(), "simulate: -: the time limit 200ms ran out while reading the trace, before any plan (a plan needs every allocation): give a longer --time-limit\n")
}

// TestPlanProgress checks the progress lines of a plan: the phases and the
// best placement, with its gap over the bound.
func TestPlanProgress(t *testing.T) {
	defer func(every, after time.Duration) { planProgressEvery, planProgressAfter = every, after }(planProgressEvery, planProgressAfter)
	planProgressEvery, planProgressAfter = time.Millisecond, 0
	var buf bytes.Buffer
	p := newPlanProgress(&buf, "x.csv")
	p.device(1, true)(plan.Progress{Phase: "search", Height: 3 << 20, Proven: 2 << 20, Method: "size/bestfit"})
	time.Sleep(50 * time.Millisecond)
	p.stop()
	assert.Regexp(t, `^plan: x.csv: device 1: search, best 3.00 MiB by size/bestfit, \+50.00% over the bound 2.00 MiB, \d+ ms\n`, buf.String())
	// Without a writer it shows nothing and needs no stop.
	newPlanProgress(nil, "x.csv").device(0, false)(plan.Progress{Phase: "heuristics"})
}

func TestFormatDurations(t *testing.T) {
	ms := time.Millisecond
	assert.Equal(t, []string{"34 ms", "999 ms"}, formatDurations([]time.Duration{34*ms + 300*time.Microsecond, 999 * ms}))
	assert.Equal(t, []string{"0.03 s", "1.05 s"}, formatDurations([]time.Duration{34 * ms, 1052539 * time.Microsecond}))
	assert.Equal(t, []string{"0.0 s", "34.3 s"}, formatDurations([]time.Duration{34 * ms, 34300 * ms}))
	assert.Equal(t, []string{"0.0 min", "3.0 min"}, formatDurations([]time.Duration{34 * ms, 182215 * ms}))
}

// TestPlanRecordedDeviceSize: plan, --offline, tune and a replay of a
// trace that records its device's memory (a snapshot that simulate
// --snapshot wrote on 24 MiB; a CSV trace whose device_memory comment
// says 4 MiB, where 7.63 MiB are live at once) give the device the same
// size, and a plan that the device does not hold says so.
func TestPlanRecordedDeviceSize(t *testing.T) {
	tiny, err := os.ReadFile("testdata/tiny.csv")
	require.NoError(t, err)
	small := filepath.Join(t.TempDir(), "small.csv")
	require.NoError(t, os.WriteFile(small, append([]byte("# device_memory 0 4194304\n"), tiny...), 0o644))
	for _, tc := range []struct {
		trace string
		size  int64
		over  bool
	}{
		{exportSnapshots(t, 1, "-s", "pytorch", "--capacity", "24MiB", "testdata/tiny.csv")[0], 24 << 20, false},
		{small, 4 << 20, true},
	} {
		snap := tc.trace
		var rows []planRow
		code, stdout, stderr := run(t, nil, "plan", "-f", "json", snap)
		require.Equal(t, 0, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
		require.Len(t, rows, 1)
		assert.Equal(t, tc.size, rows[0].CapacityBytes, "plan, %s", snap)
		note := fmt.Sprintf("simulate: %s: device 0: the offline plan needs %s, more than the device's %s\n",
			snap, gpualloc.FormatSize(rows[0].OfflineBytes), gpualloc.FormatSize(tc.size))
		if tc.over {
			assert.Equal(t, note, stderr, "plan, %s", snap)
		} else {
			assert.Empty(t, stderr, "plan, %s", snap)
		}

		var res []struct {
			CapacityBytes int64  `json:"capacity_bytes"`
			OfflineBytes  *int64 `json:"offline_bytes"`
		}
		code, stdout, stderr = run(t, nil, "-s", "pytorch", "-f", "json", "--offline", snap)
		require.Equal(t, 0, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &res))
		require.Len(t, res, 1)
		assert.Equal(t, tc.size, res[0].CapacityBytes, "replay, %s", snap)
		require.NotNil(t, res[0].OfflineBytes)
		assert.Equal(t, rows[0].OfflineBytes, *res[0].OfflineBytes, "--offline against plan, %s", snap)
		if tc.over {
			assert.Contains(t, stderr, note, "--offline, %s", snap)
		} else {
			assert.NotContains(t, stderr, "offline plan needs", "--offline, %s", snap)
		}

		var tuned tuneResult
		code, stdout, stderr = run(t, nil, "tune", "-f", "json", snap)
		if code == 0 {
			require.NoError(t, json.Unmarshal([]byte(stdout), &tuned))
			assert.Equal(t, tc.size, tuned.CapacityBytes, "tune, %s", snap)
		} else {
			// Every setting runs out of memory: the error names the size.
			assert.Contains(t, stderr, "on a device of "+gpualloc.FormatSize(tc.size), "tune, %s", snap)
		}

		// --capacity overrides the recorded size in plan, as in a replay.
		code, stdout, stderr = run(t, nil, "plan", "-f", "json", "--capacity", "32MiB", snap)
		require.Equal(t, 0, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
		assert.Equal(t, int64(32<<20), rows[0].CapacityBytes)
	}
}
