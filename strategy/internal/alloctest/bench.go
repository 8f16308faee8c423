package alloctest

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
)

// The benchmark bodies call the pool through gpualloc.Allocator: one
// indirect call per Alloc and per Free, the same for every strategy.

// HitSizes are the request sizes of [AllocFree]'s benchmarks.
var HitSizes = [4]int64{1, 4097, 100000, 5000000}

// Warm allocates and frees a block of each of sizes, so that a pool that
// caches has a free block of each afterwards.
func Warm(b testing.TB, a gpualloc.Allocator, sizes []int64) {
	b.Helper()
	for _, s := range sizes {
		blk, err := a.Alloc(s)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

// AllocFree is the body of a BenchmarkAllocFree: an Alloc of each of sizes
// in turn and the Free of its block, as many times as b asks.
func AllocFree(b *testing.B, a gpualloc.Allocator, sizes [4]int64) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		blk, err := a.Alloc(sizes[i&3])
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

// WorkingSet is the body of a BenchmarkWorkingSet: it keeps 256 blocks of
// mixed sizes, up to about 8 MiB, live, and replaces one each iteration (a
// Free and an Alloc), taking the ring's slots stride apart (1: the oldest
// block; an odd stride visits every slot, in a scattered order). For a
// [gpualloc.FreeSpaceReporter] it reports the free bytes at the end and
// the largest free block.
func WorkingSet(b *testing.B, a gpualloc.Allocator, stride int) {
	var sizes [1024]int64
	for i := range sizes {
		sizes[i] = int64(1+i*i*37%(8<<20)) + int64(i%7)*4096
	}
	var ring [256]gpualloc.Block
	var err error
	for i := range ring {
		if ring[i], err = a.Alloc(sizes[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		slot := i * stride & 255
		if err := a.Free(ring[slot]); err != nil {
			b.Fatal(err)
		}
		if ring[slot], err = a.Alloc(sizes[i&1023]); err != nil {
			b.Fatal(err)
		}
	}
	if fs, ok := a.(gpualloc.FreeSpaceReporter); ok {
		largest, total := fs.FreeSpace()
		b.ReportMetric(float64(total), "free-B")
		b.ReportMetric(float64(largest), "largest-free-B")
	}
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

func reportEvents(b *testing.B, perOp int) {
	events := float64(perOp) * float64(b.N)
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
}
