package snapshot_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

func itoa(n int) string { return strconv.Itoa(n) }

func mustOpen(t testing.TB, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// pythonPath returns python3's path, skipping the test without it.
func pythonPath(t testing.TB) string {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	return py
}

func runPython(t testing.TB, py, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command(py, append([]string{"-c", script}, args...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// envInt returns the integer in environment variable k, or def.
func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
		return n
	}
	return def
}

// bigOptions are those of the benchmarks' snapshot: a device with
// GPUALLOC_SNAPSHOT_EVENTS entries (200,000 unless set) in
// GPUALLOC_SNAPSHOT_SEGMENTS segments (64 unless set), each entry with 40
// to 90 frames of 2,000 stacks drawn from 300 frame dicts, as a training
// loop's snapshot has.
func bigOptions() genOptions {
	return genOptions{Devices: 1, Events: envInt("GPUALLOC_SNAPSHOT_EVENTS", 200_000), Slots: envInt("GPUALLOC_SNAPSHOT_SEGMENTS", 64),
		Frames: 300, Stacks: 2000, Seed: 1}
}

// TestGenerateSnapshotFile writes the benchmarks' snapshot to the file that
// GPUALLOC_GEN_SNAPSHOT names, for timing the commands on it; it skips
// when the variable is not set.
func TestGenerateSnapshotFile(t *testing.T) {
	path := os.Getenv("GPUALLOC_GEN_SNAPSHOT")
	if path == "" {
		t.Skip("GPUALLOC_GEN_SNAPSHOT names no file to write")
	}
	f, err := os.Create(path)
	require.NoError(t, err)
	n, err := genSnapshot(f, bigOptions())
	require.NoError(t, err)
	require.NoError(t, f.Close())
	t.Logf("%s: %d bytes, %d events", path, n, bigOptions().Events)
}

// BenchmarkReadFrames reads a generated snapshot with frames (see
// bigOptions), with its stacks and without (ReadOptions.NoStacks, as a
// replay, inspect and fidelity read), and, where python3 is installed,
// times CPython's pickle.load of the same file in the same run: python-s
// is its time, python-MiB its peak resident memory, and x-python how many
// times faster the read is.
func BenchmarkReadFrames(b *testing.B) {
	o := bigOptions()
	path := filepath.Join(b.TempDir(), "big.pickle")
	f, err := os.Create(path)
	require.NoError(b, err)
	size, err := genSnapshot(f, o)
	require.NoError(b, err)
	require.NoError(b, f.Close())
	data, err := os.ReadFile(path)
	require.NoError(b, err)
	var pyS, pyMiB float64
	if py, err := exec.LookPath("python3"); err == nil {
		out, err := exec.Command(py, "-c", `import pickle,resource,sys,time
t=time.perf_counter(); pickle.load(open(sys.argv[1],'rb')); t=time.perf_counter()-t
print(t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)`, path).Output()
		require.NoError(b, err)
		fs := strings.Fields(string(out))
		pyS, _ = strconv.ParseFloat(fs[0], 64)
		pyMiB, _ = strconv.ParseFloat(fs[1], 64)
	}
	for _, tc := range []struct {
		name string
		o    snapshot.ReadOptions
	}{{"stacks", snapshot.ReadOptions{}}, {"nostacks", snapshot.ReadOptions{NoStacks: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			var heap uint64
			start := time.Now()
			for b.Loop() {
				s, err := snapshot.ReadWith(bytes.NewReader(data), path, tc.o)
				if err != nil {
					b.Fatal(err)
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heap = max(heap, ms.HeapAlloc)
				runtime.KeepAlive(s)
			}
			per := time.Since(start).Seconds() / float64(b.N)
			b.ReportMetric(float64(o.Events)/per, "events/s")
			b.ReportMetric(float64(size)/per/1e6, "MB/s")
			b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
			if pyS > 0 {
				b.ReportMetric(pyS, "python-s")
				b.ReportMetric(pyMiB, "python-MiB")
				b.ReportMetric(pyS/per, "x-python")
			}
		})
	}
}

// BenchmarkReadSegments reads a snapshot of about 100,000 segments, each of
// one block (see segmentsOptions): decoding time grows linearly with
// segments.
func BenchmarkReadSegments(b *testing.B) {
	var buf bytes.Buffer
	_, err := genSnapshot(&buf, segmentsOptions())
	require.NoError(b, err)
	data := buf.Bytes()
	var segs int
	start := time.Now()
	for b.Loop() {
		s, err := snapshot.Read(bytes.NewReader(data), "segs.pickle")
		if err != nil {
			b.Fatal(err)
		}
		segs = len(s.Segments)
	}
	per := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(float64(segs)/per, "segments/s")
}

// BenchmarkReadShared reads each real snapshot of the shared fixtures
// with Read and with the decoder it replaced (og-rek's object tree).
func BenchmarkReadShared(b *testing.B) {
	files, _ := filepath.Glob(filepath.Join(sharedDir, "*.pickle"))
	if len(files) == 0 {
		b.Skip("the shared PyTorch snapshots are not checked out beside the repository")
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		require.NoError(b, err)
		for _, dec := range []struct {
			name string
			read func(r *bytes.Reader, name string) (*snapshot.Snapshot, error)
		}{
			{"stream", func(r *bytes.Reader, name string) (*snapshot.Snapshot, error) { return snapshot.Read(r, name) }},
			{"ogrek", func(r *bytes.Reader, name string) (*snapshot.Snapshot, error) { return snapshot.ReadOgrek(r, name) }},
			// As a replay reads, and as it read before the compact traces.
			{"compact", func(r *bytes.Reader, name string) (*snapshot.Snapshot, error) {
				return snapshot.ReadWith(r, name, snapshot.ReadOptions{NoStacks: true})
			}},
			{"nostacks", func(r *bytes.Reader, name string) (*snapshot.Snapshot, error) {
				return snapshot.ReadWith(r, name, snapshot.ReadOptions{NoStacks: true})
			}},
		} {
			b.Run(filepath.Base(path)+"/"+dec.name, func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if _, err := dec.read(bytes.NewReader(data), path); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkInitialStateSegments rebuilds the start state of a snapshot of
// about 100,000 segments (GPUALLOC_SNAPSHOT_SEGMENTS/10 when set), made by
// a trace of 2.1 entries per segment (see segmentsOptions): the rebuild
// grows near-linearly with segments.
func BenchmarkInitialStateSegments(b *testing.B) {
	var buf bytes.Buffer
	_, err := genSnapshot(&buf, segmentsOptions())
	require.NoError(b, err)
	s, err := snapshot.Read(bytes.NewReader(buf.Bytes()), "segs.pickle")
	require.NoError(b, err)
	start := time.Now()
	for b.Loop() {
		if _, err := s.InitialState(0); err != nil {
			b.Fatal(err)
		}
	}
	per := time.Since(start).Seconds() / float64(b.N)
	b.ReportMetric(float64(len(s.Segments)), "segments")
	b.ReportMetric(float64(len(s.Segments))/per, "segments/s")
}

// segmentsOptions are those of a snapshot of about a tenth of
// GPUALLOC_SNAPSHOT_SEGMENTS (1,000,000 unless set) segments, each of one
// block: 2.1 entries per slot's tenth (100,872 segments of 210,000 entries
// by default, 90 MB), as TestGenerateSnapshotFile writes with those
// variables.
func segmentsOptions() genOptions {
	slots := envInt("GPUALLOC_SNAPSHOT_SEGMENTS", 1_000_000)
	return genOptions{Devices: 1, Events: slots / 10 * 21 / 10, Slots: slots, Frames: 300, Stacks: 2000, Seed: 1}
}
