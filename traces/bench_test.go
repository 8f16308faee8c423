package traces_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// benchEvents is the length of the generated traces of the benchmarks.
const benchEvents = 10_000_000

// benchTrace is a generated trace, kept across benchmarks.
type benchTrace struct {
	once sync.Once
	data []byte
}

var (
	randomCSV, randomGz, randomHex, randomTok benchTrace
)

// randomTrace returns the text of the random workload of benchEvents events.
func randomTrace(b *testing.B) []byte {
	randomCSV.once.Do(func() {
		var buf bytes.Buffer
		w := traces.NewWriter(&buf, gen.Columns()...)
		require.NoError(b, gen.Generate(w, "random", gen.Options{Events: benchEvents, Seed: 1}))
		require.NoError(b, w.Close())
		randomCSV.data = buf.Bytes()
	})
	return randomCSV.data
}

// rewrite returns the random trace with its ids changed by f.
func rewrite(b *testing.B, t *benchTrace, f func(uint64) uint64) []byte {
	t.once.Do(func() {
		r, err := traces.NewReader(bytes.NewReader(randomTrace(b)), "random", traces.Options{})
		require.NoError(b, err)
		var buf bytes.Buffer
		w := traces.NewWriter(&buf, gen.Columns()...)
		for r.Scan() {
			ev := r.Event()
			ev.ID = f(ev.ID)
			require.NoError(b, w.Write(ev))
		}
		require.NoError(b, r.Err())
		require.NoError(b, w.Close())
		t.data = buf.Bytes()
	})
	return t.data
}

func compressed(b *testing.B) []byte {
	randomGz.once.Do(func() {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, err := zw.Write(randomTrace(b))
		require.NoError(b, err)
		require.NoError(b, zw.Close())
		randomGz.data = buf.Bytes()
	})
	return randomGz.data
}

// benchRead reads the trace in data b.N times, reporting events per second
// and, with SetBytes, the bytes of input per second.
func benchRead(b *testing.B, data []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	var events int64
	for range b.N {
		r, err := traces.NewReader(bytes.NewReader(data), "bench", traces.Options{})
		if err != nil {
			b.Fatal(err)
		}
		for r.Scan() {
			events++
		}
		if err := r.Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// BenchmarkRead measures decoding: the random workload of 10M events with
// decimal, hexadecimal and interned ids, plain and compressed, and the
// bundled traces.
func BenchmarkRead(b *testing.B) {
	b.Run("random/decimal", func(b *testing.B) { benchRead(b, randomTrace(b)) })
	b.Run("random/hex", func(b *testing.B) {
		benchRead(b, rewrite(b, &randomHex, func(id uint64) uint64 { return id<<12 | 1<<62 }))
	})
	b.Run("random/token", func(b *testing.B) {
		benchRead(b, rewrite(b, &randomTok, func(id uint64) uint64 { return id | 1<<63 }))
	})
	b.Run("random/gzip", func(b *testing.B) { benchRead(b, compressed(b)) })
	for _, bt := range traces.Bundled() {
		b.Run("bundled/"+bt.Name, func(b *testing.B) {
			r, err := bt.Open()
			require.NoError(b, err)
			var buf bytes.Buffer
			w := traces.NewWriter(&buf, r.Columns()...)
			for r.Scan() {
				require.NoError(b, w.Write(r.Event()))
			}
			require.NoError(b, r.Err())
			require.NoError(b, w.Close())
			benchRead(b, buf.Bytes())
		})
	}
}

// BenchmarkWrite measures encoding the random workload of 10M events.
func BenchmarkWrite(b *testing.B) {
	r, err := traces.NewReader(bytes.NewReader(randomTrace(b)), "random", traces.Options{})
	require.NoError(b, err)
	evs := make([]traces.Event, 0, benchEvents)
	for r.Scan() {
		evs = append(evs, r.Event())
	}
	require.NoError(b, r.Err())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w := traces.NewWriter(io.Discard, gen.Columns()...)
		for _, ev := range evs {
			if err := w.Write(ev); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*float64(len(evs))/b.Elapsed().Seconds(), "events/s")
}
