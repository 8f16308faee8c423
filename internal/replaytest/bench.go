package replaytest

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// ReplayBoth is the body of a strategy's BenchmarkReplay: events held in
// memory replayed on pools open opens, "engine" through sim.Replay
// ([ReplaySim]) and "direct" with a loop that only calls Alloc and Free
// ([ReplayPool]), for the strategy's own share.
func ReplayBoth(b *testing.B, open strategytest.OpenFunc, events []traces.Event) {
	b.Run("engine", func(b *testing.B) { ReplaySim(b, sim.Config{Open: open}, "random", events) })
	b.Run("direct", func(b *testing.B) { ReplayPool(b, open, events) })
}

// ReplayRandom is [ReplayBoth] of the random workload of traces/gen (1M
// events, sizes up to 64 MiB, up to 1,000 live), generated once, before the
// benchmarks.
func ReplayRandom(b *testing.B, open strategytest.OpenFunc) {
	ReplayBoth(b, open, RandomEvents(b, gen.Options{Seed: 1, Events: 1_000_000}))
}

// Replay replays events on a, keeping the live blocks in blocks by the
// events' Slot, and returns blocks for the next replay.
func Replay(a gpualloc.Allocator, events []traces.Event, blocks []gpualloc.Block) ([]gpualloc.Block, error) {
	for _, ev := range events {
		if int(ev.Slot) >= len(blocks) {
			blocks = append(blocks, make([]gpualloc.Block, int(ev.Slot)+1-len(blocks))...)
		}
		if ev.Op == traces.OpAlloc {
			b, err := a.Alloc(ev.Size)
			if err != nil {
				return blocks, err
			}
			blocks[ev.Slot] = b
		} else if err := a.Free(blocks[ev.Slot]); err != nil {
			return blocks, err
		}
	}
	return blocks, nil
}

// ReplayPool is the body of a benchmark of a strategy's own cost per event:
// each iteration opens a pool on a fresh virtual device of 80 GiB, untimed,
// and sends it the events with [Replay], nothing else. It reports events/s,
// ns/event and the pool's peak of reserved bytes.
func ReplayPool(b *testing.B, open strategytest.OpenFunc, events []traces.Event) {
	var blocks []gpualloc.Block
	var a gpualloc.Allocator
	var err error
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if a, err = open(strategytest.NewDevice(virtual.DefaultCapacity)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if blocks, err = Replay(a, events, blocks); err != nil {
			b.Fatal(err)
		}
	}
	reportEvents(b, len(events))
	if s, ok := a.(gpualloc.StatsReporter); ok {
		b.ReportMetric(float64(s.Stats().PeakReserved), "peak-reserved-B")
	}
}

// ReplaySim is the body of a benchmark of a replay through [sim.Replay],
// with no time series, of events held in memory, so that no decoding is
// timed: the strategy's cost and the engine's. c names the strategy (Open
// or Params). It reports events/s, ns/event and the peak of reserved bytes.
func ReplaySim(b *testing.B, c sim.Config, name string, events []traces.Event) {
	c.SeriesBuckets = -1
	r := traces.NewSliceReader(name, events)
	var res sim.Result
	var err error
	b.ReportAllocs()
	for b.Loop() {
		r.Reset()
		if res, err = sim.Replay(r, c); err != nil {
			b.Fatal(err)
		}
	}
	reportEvents(b, len(events))
	b.ReportMetric(float64(res.PeakReservedBytes), "peak-reserved-B")
}

// ReplayBundled runs a [ReplaySim] benchmark of each bundled trace, named
// after it, on pools open opens; each trace is decoded once, before its
// benchmark.
func ReplayBundled(b *testing.B, open strategytest.OpenFunc) {
	for _, bd := range traces.Bundled() {
		events := BundledEvents(b, bd.Name)
		b.Run(bd.Name, func(b *testing.B) { ReplaySim(b, sim.Config{Open: open}, bd.Name, events) })
	}
}

func reportEvents(b *testing.B, perOp int) {
	events := float64(perOp) * float64(b.N)
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
}
