package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/traces"
)

// TestSweepGolden runs sweeps (ranges, lists and their products in specs
// and in the environment) and their errors against golden files.
func TestSweepGolden(t *testing.T) {
	goldenRuns(t, []goldenCase{
		{"sweep_range", nil, []string{"-s", "round:cutoff=20..24/2", "-s", "pytorch:max_split_size_mb=64|inf", "testdata/tiny.csv"}, 0},
		{"sweep_product", nil, []string{"-f", "csv", "-s", "round:cutoff=20|22,page=4096|8KiB", "testdata/tiny.csv"}, 0},
		{"sweep_env", map[string]string{"GPUALLOC_POOL_TYPE": "round:cutoff=20|34"}, []string{"testdata/tiny.csv"}, 0},
		{"sweep_conf", map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:20|inf,expandable_segments:True|False"}, []string{"-f", "json", "-s", "pytorch", "testdata/tiny.csv"}, 0},
		{"err_sweep_range", nil, []string{"-s", "round:cutoff=24..20", "testdata/tiny.csv"}, 2},
		{"err_sweep_step", nil, []string{"-s", "round:cutoff=20..24/0", "testdata/tiny.csv"}, 2},
		{"err_sweep_env", map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64..x"}, []string{"-s", "pytorch", "testdata/tiny.csv"}, 2},
		{"err_sweep_value", nil, []string{"-s", "round:cutoff=30..40/5", "testdata/tiny.csv"}, 2},
	})
}

// TestSweepFromMemory checks that replays sharing one decoding of each
// trace measure what a replay of its own measures, with -o's report and
// with --lenient's skipped events.
func TestSweepFromMemory(t *testing.T) {
	specs := []string{"round:cutoff=20", "round:cutoff=22", "naive", "pytorch"}
	args := []string{"-f", "csv", "--lenient", "-s", "round:cutoff=20|22", "-s", "naive", "-s", "pytorch", "testdata/tiny.csv", "testdata/badfree.csv"}
	code, together, stderr := run(t, nil, append(args, "-o", t.TempDir())...)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(normalize(together)), "\n")
	require.Len(t, lines, 1+2*len(specs))
	for i, trace := range []string{"testdata/tiny.csv", "testdata/badfree.csv"} {
		for j, s := range specs {
			code, alone, stderr := run(t, nil, "-f", "csv", "--lenient", "-s", s, trace)
			require.Equal(t, 0, code, stderr)
			assert.Equal(t, strings.Split(strings.TrimSpace(normalize(alone)), "\n")[1], lines[1+i*len(specs)+j], "%s %s", trace, s)
		}
	}
	assert.Contains(t, stderr, "testdata/badfree.csv: skipped 1 bad event")
}

// TestSweepTooLongToHold: a trace longer than decodeLimit is not held; its
// replays stream the file each and give what the replays from memory give,
// the report's size counts included.
func TestSweepTooLongToHold(t *testing.T) {
	args := []string{"-f", "csv", "--lenient", "-s", "round:cutoff=20|22", "-s", "pytorch", "testdata/tiny.csv", "testdata/badfree.csv"}
	held, streamed := t.TempDir(), t.TempDir()
	code, fromMemory, stderr := run(t, nil, append(args, "-o", held)...)
	require.Equal(t, 0, code, stderr)
	defer func(limit int) { decodeLimit = limit }(decodeLimit)
	decodeLimit = 2
	code, fromFiles, stderr := run(t, nil, append(args, "-o", streamed)...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, normalize(fromMemory), normalize(fromFiles))
	assert.Contains(t, stderr, "testdata/badfree.csv: skipped 1 bad event")
	for _, fig := range []string{"tiny-trace.png", "badfree-trace.png"} {
		want, err := os.ReadFile(filepath.Join(held, fig))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(streamed, fig))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), "%s differs when the trace is streamed", fig)
	}
}

// TestEventChunks: the events of a decoded trace read back in order
// across chunks, and holding them costs 48 bytes an event and at most one
// chunk more, as the help says.
func TestEventChunks(t *testing.T) {
	n := 5*chunkEvents/2 + 3
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var c eventChunks
	for i := range n {
		c.add(traces.Event{Op: traces.OpAlloc, ID: uint64(i), Size: int64(i) + 1})
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	assert.LessOrEqual(t, allocated, uint64(48*(n+chunkEvents)+4096), "bytes allocated to hold %d events", n)
	assert.Equal(t, n, c.n)
	r := &memoryReader{chunks: c.chunks, i: -1}
	i := 0
	for r.Scan() {
		require.Equal(t, uint64(i), r.Event().ID)
		i++
	}
	assert.Equal(t, n, i)
	assert.False(t, r.Scan(), "the end stays the end")
	empty := &memoryReader{i: -1}
	assert.False(t, empty.Scan())
}

// TestSweepLimitBeforeBuilding: a sweep of more variants than the limit is
// refused before the variants are made, whether the spec or the
// environment gives it.
func TestSweepLimitBeforeBuilding(t *testing.T) {
	huge := "max_split_size_mb:21..4000,roundup_power2_divisions:1..4000,garbage_collection_threshold:0.1|0.2|0.3"
	for _, tc := range []struct {
		env  map[string]string
		args []string
	}{
		{nil, []string{"-s", "pytorch:conf=max_split_size_mb:21..4000|21..4000", "testdata/tiny.csv"}},
		{map[string]string{"PYTORCH_CUDA_ALLOC_CONF": huge}, []string{"-s", "pytorch", "testdata/tiny.csv"}},
		{nil, []string{"-s", "round:cutoff=20..24,page=1..100000", "testdata/tiny.csv"}},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		code, stdout, stderr := run(t, tc.env, tc.args...)
		runtime.ReadMemStats(&after)
		assert.Equal(t, 2, code, stderr)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "more than 4096")
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "%v: bytes allocated before the refusal", tc.args)
	}
}

// TestSweepStreams: the replays of a trace too long to hold read streams
// of it, a window of chunks at a time, and measure what replays from
// memory measure, whether they start together (-j 5) or a few at a time,
// some of them then decoding the file again (-j 2).
func TestSweepStreams(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "r.csv")
	code, _, stderr := run(t, nil, "gen", "--events", "20000", "--max-live", "300", "-o", trace, "random")
	require.Equal(t, 0, code, stderr)
	base := []string{"-f", "csv", "-s", "round:cutoff=20|22", "-s", "naive", "-s", "pytorch", "-s", "bestfit", trace}
	code, held, stderr := run(t, nil, base...)
	require.Equal(t, 0, code, stderr)
	defer func(limit, chunk, window int) { decodeLimit, chunkEvents, streamWindow = limit, chunk, window }(decodeLimit, chunkEvents, streamWindow)
	decodeLimit, chunkEvents, streamWindow = 1000, 64, 3
	for _, j := range []string{"5", "2", "1"} {
		code, streamed, stderr := run(t, nil, append([]string{"-j", j}, base...)...)
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, normalize(held), normalize(streamed), "-j %s", j)
	}
	// A bad event past the held part ends every replay of the stream with
	// the file's error.
	b, err := os.ReadFile(trace)
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	lines[15000] = "free,999999999,0"
	bad := filepath.Join(t.TempDir(), "bad.csv")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644))
	code, _, stderr = run(t, nil, "-j", "3", "-s", "round:cutoff=20|22", "-s", "naive", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, bad+":15001:")
}

// TestSweepRefusedRelease: a sweep over releases with a setting that one
// release does not have (expandable_segments, from 2.1) gives every
// release's row, the refusing one saying why in the table, JSON and CSV,
// and exits 0; only a sweep whose every variant refuses fails, with the
// one line of a run of one strategy that refuses.
func TestSweepRefusedRelease(t *testing.T) {
	env := map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
	args := []string{"-s", "pytorch:version=2.0..2.2", "testdata/tiny.csv"}
	var rows []struct {
		Strategy string `json:"strategy"`
		Events   int64  `json:"events"`
		Refused  string `json:"refused"`
	}
	runJSON(t, env, &rows, append([]string{"-f", "json"}, args...)...)
	require.Len(t, rows, 3)
	assert.Contains(t, rows[0].Strategy, "version=2.0")
	assert.Contains(t, rows[0].Refused, "expandable_segments: not in PyTorch 2.0")
	assert.Zero(t, rows[0].Events)
	for _, r := range rows[1:] {
		assert.Empty(t, r.Refused, r.Strategy)
		assert.Positive(t, r.Events, r.Strategy)
	}

	code, table, stderr := run(t, env, args...)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(table, "\n")
	assert.Contains(t, lines[1], "pytorch:version=2.0")
	assert.True(t, strings.HasSuffix(strings.TrimSpace(lines[1]), "refused"), lines[1])
	assert.Contains(t, table, "pytorch:version=2.0 refused its settings, not replayed: pytorch: expandable_segments: not in PyTorch 2.0")

	code, csv, stderr := run(t, env, append([]string{"-f", "csv"}, args...)...)
	require.Equal(t, 0, code, stderr)
	head := strings.Split(strings.Split(csv, "\n")[0], ",")
	assert.Equal(t, "refused", head[len(head)-1])
	assert.Contains(t, strings.Split(csv, "\n")[1], "expandable_segments: not in PyTorch 2.0")

	// The report draws the releases that ran, and names the one refused.
	dir := t.TempDir()
	code, _, stderr = run(t, env, append([]string{"-o", dir, "--figures", "sweep,peak"}, args...)...)
	require.Equal(t, 0, code, stderr)
	summary, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	assert.Contains(t, string(summary), `"refused": "pytorch: expandable_segments: not in PyTorch 2.0`)
	assert.FileExists(t, filepath.Join(dir, "sweep-pytorch-version.png"))

	// Every variant refuses: bad usage, one line, as for one strategy.
	env = map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:20"}
	for _, spec := range []string{"pytorch:version=2.8..2.9", "pytorch:version=2.9"} {
		code, stdout, stderr := run(t, env, "-s", spec, "testdata/tiny.csv")
		assert.Equal(t, 2, code, spec)
		assert.Empty(t, stdout, spec)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "%s: %s", spec, stderr)
		assert.Contains(t, stderr, "max_split_size_mb", spec)
	}
}
