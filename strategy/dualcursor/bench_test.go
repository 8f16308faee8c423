package dualcursor_test

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/dualcursor"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// BenchmarkAllocFree measures an Alloc served from a freed range and the
// Free that gives it back, for four sizes in turn, with a block of 1 byte
// kept live so that the device block stays.
func BenchmarkAllocFree(b *testing.B) { strategy.BenchAllocFree(b) }

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes (up to 8 MiB) live and
// replaces one each iteration: a Free that merges with its free neighbours
// or moves a cursor back, and a best-fit Alloc among the freed ranges.
func BenchmarkWorkingSet(b *testing.B) { strategy.BenchWorkingSet(b) }

// BenchmarkReplay replays traces held in memory, so that no decoding is
// timed: the random workload of traces/gen (1M events, no categories) and
// the bundled training and dynamic traces (with categories). "engine" goes
// through sim.Replay, which calls AllocCategory; "direct" is a loop that
// only calls AllocCategory and Free, for the strategy's own share.
func BenchmarkReplay(b *testing.B) {
	sets := []struct {
		name   string
		events []traces.Event
	}{
		{"random", replaytest.RandomEvents(b, gen.Options{Seed: 1, Events: 1_000_000})},
		{"training", replaytest.BundledEvents(b, "training")},
		{"dynamic", replaytest.BundledEvents(b, "dynamic")},
	}
	open := strategy.Open(dualcursor.DefaultConfig())
	for _, set := range sets {
		b.Run(set.name+"/engine", func(b *testing.B) { replaytest.ReplaySim(b, sim.Config{Open: open}, set.name, set.events) })
		b.Run(set.name+"/direct", func(b *testing.B) { replayDirect(b, set.events) })
	}
}

// replayDirect replays events on fresh pools of the default configuration,
// calling AllocCategory with each event's category, and reports events/s.
func replayDirect(b *testing.B, events []traces.Event) {
	var blocks []gpualloc.Block
	var p *dualcursor.Pool
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		p = strategy.NewPool(b, virtual.DefaultCapacity, dualcursor.DefaultConfig())
		b.StartTimer()
		for _, ev := range events {
			if int(ev.Slot) >= len(blocks) {
				blocks = append(blocks, make([]gpualloc.Block, int(ev.Slot)+1-len(blocks))...)
			}
			if ev.Op == traces.OpAlloc {
				blk, err := p.AllocCategory(ev.Size, ev.Stream, ev.Category)
				if err != nil {
					b.Fatal(err)
				}
				blocks[ev.Slot] = blk
			} else if err := p.Free(blocks[ev.Slot]); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := float64(len(events)) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
	b.ReportMetric(float64(p.Stats().PeakReserved), "peak-reserved-B")
}
