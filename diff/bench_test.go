package diff

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// openTrace reads the trace file at path as simulate diff does: its
// events and, for a snapshot, its stacks, in one read.
func openTrace(tb testing.TB, path string) *explain.Trace {
	tb.Helper()
	r, err := traces.Open(path, traces.Options{Stacks: true})
	if err != nil {
		tb.Fatal(err)
	}
	evs, err := traces.ReadAll(r)
	if err != nil {
		tb.Fatal(err)
	}
	r.Close()
	t := &explain.Trace{Name: filepath.Base(path), Format: r.Format(), Events: evs, Start: traces.StartOf(r), Memory: r.(sim.CapacityReporter)}
	if s, ok := r.(interface{ Snapshot() *snapshot.Snapshot }); ok {
		t.Snapshot = s.Snapshot()
	}
	return t
}

// BenchmarkRanks summarises 64 ranks of a job, generated snapshots of
// 20,000 trace entries each, read one at a time as simulate diff reads
// them: the target is under 30 s on 2 cores (go test -bench
// Ranks -cpu 2 ./diff/), with memory bounded by one snapshot and the
// site tables. It reports the largest heap in use after a rank
// (heap-MiB) beside that after the first (first-heap-MiB): the two
// should be close, since no rank's events are kept.
func BenchmarkRanks(b *testing.B) {
	const ranks, entries = 64, 20000
	dir := b.TempDir()
	var paths []string
	var size int64
	for k := range ranks {
		var skew int64
		if k == 37 {
			skew = 64 << 20
		}
		data := genSnapshot(k%8, rankOps(0, entries, skew), "")
		p := filepath.Join(dir, fmt.Sprintf("rank%02d.pickle", k))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		size += int64(len(data))
		paths = append(paths, p)
	}
	b.ResetTimer()
	var heap, first uint64
	for b.Loop() {
		runs := make([]*Run, len(paths))
		for k, p := range paths {
			r, err := Measure(context.Background(), openTrace(b, p), Options{})
			if err != nil {
				b.Fatal(err)
			}
			runs[k] = r
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heap = max(heap, ms.HeapInuse)
			if k == 0 {
				first = max(first, ms.HeapInuse)
			}
		}
		s, err := Summarise(runs)
		if err != nil {
			b.Fatal(err)
		}
		if s[0].Divergent != "rank37.pickle" {
			b.Fatalf("divergent %q, want rank37.pickle", s[0].Divergent)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N), "s/job")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(first)/(1<<20), "first-heap-MiB")
	b.ReportMetric(float64(size)/ranks/(1<<20), "MiB/snapshot")
}
