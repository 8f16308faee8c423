package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
