package sim_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	_ "github.com/gpualloc/gpualloc/strategy/all"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// throughputEvents is the length of the generated trace of the throughput
// benchmarks.
const throughputEvents = 10_000_000

var throughputTrace = sync.OnceValues(func() ([]byte, error) {
	var buf bytes.Buffer
	w := traces.NewWriter(&buf, gen.Columns()...)
	if err := gen.Generate(w, "random", gen.Options{Events: throughputEvents, Seed: 1}); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
})

func throughputReader(b *testing.B) *traces.CSVReader {
	data, err := throughputTrace()
	if err != nil {
		b.Fatal(err)
	}
	r, err := traces.NewReader(bytes.NewReader(data), "random", traces.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkThroughput measures, on the 10M-event random workload in native
// CSV, decoding alone ("decode") and a whole replay per strategy, decoding
// included. One op is one pass over the trace; events/s is the figure to
// compare, and a replay's ns/event minus decode's is the strategy's and the
// engine's share.
func BenchmarkThroughput(b *testing.B) {
	if _, err := throughputTrace(); err != nil { // generated once, untimed
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		var events int64
		for b.Loop() {
			r := throughputReader(b)
			for r.Scan() {
				events++
			}
			if err := r.Err(); err != nil {
				b.Fatal(err)
			}
		}
		report(b, events)
	})
	for _, name := range []string{"naive", "round", "unpooled"} {
		b.Run("replay="+name, func(b *testing.B) {
			p, err := gpualloc.Resolve(gpualloc.Spec{Name: name}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var events int64
			var res sim.Result
			for b.Loop() {
				res, err = sim.Replay(throughputReader(b), sim.Config{Params: p})
				if err != nil {
					b.Fatal(err)
				}
				events += res.Events
			}
			report(b, events)
			b.ReportMetric(float64(res.PeakReservedBytes), "peak-reserved-B")
			b.ReportMetric(res.Fragmentation, "fragmentation")
		})
	}
}

func report(b *testing.B, events int64) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// decodedTraces are the traces of BenchmarkStrategies, decoded once.
var decodedTraces = sync.OnceValues(func() (map[string][]traces.Event, error) {
	m := map[string][]traces.Event{}
	for _, bt := range traces.Bundled() {
		r, err := bt.Open()
		if err != nil {
			return nil, err
		}
		if m[bt.Name], err = traces.ReadAll(r); err != nil {
			return nil, err
		}
	}
	data, err := throughputTrace()
	if err != nil {
		return nil, err
	}
	r, err := traces.NewReader(bytes.NewReader(data), "random", traces.Options{})
	if err != nil {
		return nil, err
	}
	m["random10M"], err = traces.ReadAll(r)
	return m, err
})

// BenchmarkStrategies measures each registered strategy's replay, decoding
// excluded (the events are held in memory), on the bundled traces and the
// 10M-event random workload: the strategy's and the engine's work alone.
func BenchmarkStrategies(b *testing.B) {
	all, err := decodedTraces()
	if err != nil {
		b.Fatal(err)
	}
	for _, trace := range []string{"training", "dynamic", "random10M"} {
		events := all[trace]
		for _, name := range gpualloc.Names() {
			b.Run(trace+"/"+name, func(b *testing.B) {
				p, err := gpualloc.Resolve(gpualloc.Spec{Name: name}, nil)
				if err != nil {
					b.Fatal(err)
				}
				r := traces.NewSliceReader(trace, events)
				b.ReportAllocs()
				var n int64
				var res sim.Result
				for b.Loop() {
					r.Reset()
					if res, err = sim.Replay(r, sim.Config{Params: p, SeriesBuckets: -1}); err != nil {
						b.Fatal(err)
					}
					n += res.Events
				}
				report(b, n)
				b.ReportMetric(float64(res.PeakReservedBytes), "peak-reserved-B")
			})
		}
	}
}
