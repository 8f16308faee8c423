package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/viewercheck"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// TestSnapshotExport writes the snapshots of replays of two traces with two
// strategies and replays each file again with its strategy: the figures are
// the original replay's (the traces have no failed allocation, which a
// snapshot records as an oom entry and not as an alloc).
func TestSnapshotExport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snaps")
	specs := []string{"pytorch:max_split_size_mb=20", "bestfit"}
	inputs := []string{"testdata/tiny.csv", "testdata/twodev.csv"}
	args := []string{"--snapshot", dir, "-f", "json"}
	for _, s := range specs {
		args = append(args, "-s", s)
	}
	code, stdout, stderr := run(t, nil, append(args, inputs...)...)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	var rows, results []sim.Result
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	for _, r := range rows {
		if r.Device == nil { // a replay's row, not one of its devices'
			results = append(results, r)
		}
	}

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names strings.Builder
	for _, e := range entries {
		names.WriteString(e.Name() + "\n")
	}
	golden(t, "snapshot.files", names.String())
	require.Len(t, entries, len(results))

	for _, want := range results {
		p := resolve(t, want.Strategy.Spec)
		path := filepath.Join(dir, snapshotName(want.Trace, p))
		data, err := os.ReadFile(path)
		require.NoError(t, err, "no snapshot of %s with %s", want.Trace, want.Strategy)
		require.NoError(t, viewercheck.Check(data, viewercheck.Options{Complete: true}), path)
		r, err := traces.Open(path, traces.Options{})
		require.NoError(t, err, "no snapshot of %s with %s", want.Trace, want.Strategy)
		got, err := sim.Replay(r, sim.Config{Params: p, Trace: want.Trace, SeriesBuckets: -1})
		require.NoError(t, err)
		assert.Equal(t, want.Strategy.Spec, got.Strategy.Spec)
		// want is read back from JSON, which holds the strategy's spec
		// without its parameters' defaults.
		got.Strategy = want.Strategy
		got.ElapsedNS, got.EventsPerSec, got.Devices = want.ElapsedNS, want.EventsPerSec, nil
		// A snapshot is a window of a run, whatever it was made from.
		assert.True(t, got.MidRun)
		got.MidRun = want.MidRun
		// and an export says the release whose snapshots it writes.
		assert.NotEmpty(t, got.Release)
		got.Release, got.ReleaseWhy = want.Release, want.ReleaseWhy
		assert.Equal(t, want, got, "replay of %s", path)
	}
}

// resolve returns the strategy of spec with its parameters' defaults.
func resolve(t *testing.T, spec string) *gpualloc.Params {
	t.Helper()
	s, err := gpualloc.ParseSpec(spec)
	require.NoError(t, err)
	p, err := gpualloc.Resolve(s, nil)
	require.NoError(t, err)
	return p
}

// exportSnapshots runs the command with --snapshot into a directory of its
// own and returns the snapshots it wrote there, which must be n.
func exportSnapshots(t *testing.T, n int, args ...string) []string {
	t.Helper()
	dir := t.TempDir()
	code, _, stderr := run(t, nil, append([]string{"--snapshot", dir}, args...)...)
	require.Equal(t, 0, code, stderr)
	files, err := filepath.Glob(filepath.Join(dir, "*.pickle"))
	require.NoError(t, err)
	require.Len(t, files, n)
	return files
}

func TestSnapshotEntries(t *testing.T) {
	files := exportSnapshots(t, 2, "--snapshot-entries", "5", "-s", "naive", "testdata/tiny.csv", "testdata/twodev.csv")
	full := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, viewercheck.Check(data, viewercheck.Options{}), f)
		s, err := snapshot.Read(bytes.NewReader(data), f)
		require.NoError(t, err)
		for dev := range s.NumTraces() {
			n := s.Trace(dev).Len()
			assert.LessOrEqual(t, n, 5, "%s device %d", f, dev)
			if n == 5 {
				full++
			}
		}
	}
	assert.Positive(t, full, "a device with more than 5 entries keeps 5")
}

func TestSnapshotNames(t *testing.T) {
	name := func(trace, spec string) string { return snapshotName(trace, resolve(t, spec)) }
	assert.Equal(t, "training.round.0123abcd.pickle"[:15], name("training", "round")[:15])
	assert.Regexp(t, `^tiny\.pytorch\.roundup_power2_divisions-_1_4_2_8_\.[0-9a-f]{8}\.pickle$`,
		name("dir/tiny.csv.gz", "pytorch:roundup_power2_divisions=[1:4;2:8]"))
	assert.Regexp(t, `^_hidden\.naive\.page-8KiB\.[0-9a-f]{8}\.pickle$`, name(".hidden", "naive:page=8KiB"))
	// Same readable part, different replays: different names.
	assert.NotEqual(t, name("a/t.csv", "naive"), name("b/t.csv", "naive"))
	assert.NotEqual(t, name("t", "round:cutoff=20"), name("t", "round:cutoff=21"))
	long := name("t", "pytorch:max_split_size_mb=400,max_non_split_rounding_mb=300,roundup_power2_divisions=1:4;2:8;4:16;8:16;16:32;32:32;64:64;128:64;256:128;512:128;1024:256,garbage_collection_threshold=0.5,memory_fraction=0.9,expandable_segments=true")
	assert.LessOrEqual(t, len(long), 200)
}

func TestSnapshotErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"err_snapshot_entries", []string{"--snapshot", t.TempDir(), "--snapshot-entries", "0", "testdata/tiny.csv"}, 2},
		{"err_snapshot_entries_alone", []string{"--snapshot-entries", "10", "testdata/tiny.csv"}, 2},
		{"err_snapshot_dir", []string{"--snapshot", "testdata/tiny.csv", "testdata/tiny.csv"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, nil, tc.args...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Empty(t, stdout)
			golden(t, tc.name+".stderr", stderr)
		})
	}
}

// TestReadmeSnapshotNames keeps the example of snapshot names in docs/pytorch-viewer.md true.
func TestReadmeSnapshotNames(t *testing.T) {
	readme, err := os.ReadFile("../docs/pytorch-viewer.md")
	require.NoError(t, err)
	for _, spec := range []string{"bestfit", "pytorch:max_split_size_mb=128"} {
		assert.Contains(t, string(readme), "`"+snapshotName("training", resolve(t, spec))+"`", spec)
	}
}
