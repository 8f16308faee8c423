package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

// benchEvents is the length of the benchmark trace: a balanced base of 100k
// events (up to 1000 live allocations, all freed at the end) replayed 100
// times.
const benchEvents = 10_000_000

func benchTrace() *sliceReader {
	r := randomTrace(rand.New(rand.NewPCG(1, 2)), benchEvents/100, traceShape{maxSize: 1 << 20, maxLive: 1000, balanced: true}).reader()
	r.reps = benchEvents / len(r.events)
	return r
}

// repeatReader hands out the events of a sliceReader's base trace a whole
// pass at a time, reps times, in place (a traces.BatchReader): the way the
// engine reads events held in memory. Times start again with each pass.
type repeatReader struct {
	*sliceReader
	done int
}

func (r *repeatReader) Batch() []traces.Event {
	if r.done == r.reps {
		return nil
	}
	r.done++
	return r.events
}

// BenchmarkReplay measures the engine's own cost per event: "nop" replays
// into an allocator that does nothing, on a backend that keeps no records,
// from events in memory read in place; "nop-scan" the same through the
// Reader interface, an event at a time, which the engine reads ahead on a
// goroutine of its own; "exact" sends every event to the virtual device
// through the counting wrapper. One op is a replay of the whole 10M-event
// trace.
func BenchmarkReplay(b *testing.B) {
	base := benchTrace()
	for _, bc := range []struct {
		name string
		scan bool
		cfg  Config
	}{
		{"nop", false, Config{Open: openNop, NewBackend: newNullBackend}},
		{"nop-scan", true, Config{Open: openNop, NewBackend: newNullBackend}},
		{"exact", false, Config{Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) { return &exactAlloc{b: b}, nil }}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var events int64
			for b.Loop() {
				sr := *base
				var r traces.Reader = &repeatReader{sliceReader: &sr}
				if bc.scan {
					r = &sr
				}
				res, err := Replay(r, bc.cfg)
				if err != nil {
					b.Fatal(err)
				}
				events += res.Events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
		})
	}
}
