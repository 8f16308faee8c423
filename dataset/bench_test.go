package dataset_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gpualloc/gpualloc/dataset"
)

// BenchmarkEventWriter writes an events file of 3M rows (a long trace
// replayed under one strategy) to disk per op, and reports rows/s, heap
// allocations per row, the file's bytes per row, and the heap in use
// after the last row (which must not grow with the rows: one row group
// at a time).
//
//	go test -run '^$' -bench EventWriter -benchmem ./dataset/
func BenchmarkEventWriter(b *testing.B) {
	for _, rows := range []int{300_000, 3_000_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) { benchmarkEventWriter(b, rows) })
	}
}

func benchmarkEventWriter(b *testing.B, rows int) {
	src := events(4096)
	dir := b.TempDir()
	path := filepath.Join(dir, "events.parquet")
	var size int64
	var heap, mallocs uint64
	var ms runtime.MemStats
	b.ReportAllocs()
	for b.Loop() {
		runtime.ReadMemStats(&ms)
		mallocs -= ms.Mallocs
		w, err := dataset.CreateEvents(path)
		if err != nil {
			b.Fatal(err)
		}
		for i := range rows {
			e := src[i%len(src)]
			e.Index = int64(i)
			e.TimeUS = int64(i) * 7
			e.Address += uint64(i/len(src)) << 20
			if err := w.Write(&e); err != nil {
				b.Fatal(err)
			}
		}
		runtime.ReadMemStats(&ms)
		heap = ms.HeapInuse
		mallocs += ms.Mallocs
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		size = fi.Size()
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(mallocs)/float64(b.N)/float64(rows), "allocs/row")
	b.ReportMetric(float64(size)/float64(rows), "file-B/row")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
}
