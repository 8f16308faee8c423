package sim_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

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

func throughputReader(b *testing.B) traces.FileReader {
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

// decodeTrace reads a trace of BenchmarkStrategies into memory: a bundled
// trace by name, or "random10M", the generated 10M-event trace.
func decodeTrace(name string) ([]traces.Event, error) {
	if bt, ok := traces.LookupBundled(name); ok {
		r, err := bt.Open()
		if err != nil {
			return nil, err
		}
		return traces.ReadAll(r)
	}
	data, err := throughputTrace()
	if err != nil {
		return nil, err
	}
	r, err := traces.NewReader(bytes.NewReader(data), name, traces.Options{})
	if err != nil {
		return nil, err
	}
	return traces.ReadAll(r)
}

// BenchmarkStrategies measures each registered strategy's replay, decoding
// excluded (the events are held in memory), on the bundled traces and the
// 10M-event random workload: the strategy's and the engine's work alone.
func BenchmarkStrategies(b *testing.B) {
	for _, trace := range []string{"training", "dynamic", "random10M"} {
		// Decoded when a benchmark of the trace first runs, so that
		// -bench selects what is paid for.
		events := sync.OnceValues(func() ([]traces.Event, error) { return decodeTrace(trace) })
		for _, name := range gpualloc.Names() {
			b.Run(trace+"/"+name, func(b *testing.B) {
				events, err := events()
				if err != nil {
					b.Fatal(err)
				}
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

// sweepVariants are the 64 variants of BenchmarkSweep: max_split_size_mb
// from 20 to 1280 MiB in steps of 20.
const sweepVariants = "pytorch:max_split_size_mb=20..1280/20"

// BenchmarkSweep measures a 64-variant sweep of the pytorch strategy over
// the bundled training trace, as simulate runs one: the trace decoded once
// (untimed), then every variant replayed from memory, on as many
// goroutines as GOMAXPROCS (-cpu 1,2 for how it scales with cores). One op
// is the whole sweep; events/s is the aggregate over the variants.
func BenchmarkSweep(b *testing.B) {
	events, err := decodeTrace("training")
	if err != nil {
		b.Fatal(err)
	}
	sel, err := gpualloc.Select(sweepVariants, nil)
	if err != nil {
		b.Fatal(err)
	}
	variants, err := sel.Expand()
	if err != nil {
		b.Fatal(err)
	}
	if len(variants) != 64 {
		b.Fatalf("%d variants", len(variants))
	}
	jobs := make([]sim.Job, len(variants))
	for i, p := range variants {
		jobs[i] = sim.Job{
			Open: func() (traces.Reader, io.Closer, error) {
				return traces.NewSliceReader("training", events), nil, nil
			},
			Config: sim.Config{Params: p, SeriesBuckets: -1},
		}
	}
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		for _, out := range sim.RunAll(context.Background(), jobs, 0) {
			if out.Err != nil {
				b.Fatal(out.Err)
			}
			n += out.Result.Events
		}
	}
	report(b, n)
}

// BenchmarkBundledPyTorch replays the bundled training and dynamic traces
// through the pytorch strategy, decoding (gzip included) in the replay, as
// strategy/pytorch/testdata/pysim.py, the pure-Python simulator of the same
// rules, replays them: the two are compared in BENCHMARKS.md.
func BenchmarkBundledPyTorch(b *testing.B) {
	p, err := gpualloc.Resolve(gpualloc.Spec{Name: "pytorch"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, trace := range []string{"training", "dynamic"} {
		bt, ok := traces.LookupBundled(trace)
		if !ok {
			b.Fatalf("no bundled trace %s", trace)
		}
		b.Run(trace, func(b *testing.B) {
			b.ReportAllocs()
			var n int64
			var res sim.Result
			for b.Loop() {
				r, err := bt.Open()
				if err != nil {
					b.Fatal(err)
				}
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

// BenchmarkReplayOverDecode measures the aim of a replay at most 1.5 times
// the time of decoding alone, on the 10M-event random workload: each
// iteration decodes the trace, then replays it (decoding included), one
// right after the other, and the metric replay/decode is the median of
// their ratios, so that a machine whose load varies over minutes compares
// the two under the same load.
func BenchmarkReplayOverDecode(b *testing.B) {
	if _, err := throughputTrace(); err != nil { // generated once, untimed
		b.Fatal(err)
	}
	for _, name := range []string{"naive", "round", "pytorch"} {
		b.Run(name, func(b *testing.B) {
			p, err := gpualloc.Resolve(gpualloc.Spec{Name: name}, nil)
			if err != nil {
				b.Fatal(err)
			}
			var ratios []float64
			for b.Loop() {
				t0 := time.Now()
				r := throughputReader(b)
				for r.Scan() {
				}
				if err := r.Err(); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := sim.Replay(throughputReader(b), sim.Config{Params: p}); err != nil {
					b.Fatal(err)
				}
				ratios = append(ratios, float64(time.Since(t1))/float64(t1.Sub(t0)))
			}
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "replay/decode")
		})
	}
}
