package bestfit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
)

func newPool(b *testing.B, capacity int64) *bestfit.Pool {
	p, err := bestfit.New(strategytest.NewDevice(capacity), bestfit.DefaultConfig())
	require.NoError(b, err)
	return p
}

// BenchmarkAllocFree measures an Alloc served from a free block and the
// Free that merges it back, for four sizes in turn.
func BenchmarkAllocFree(b *testing.B) {
	p := newPool(b, GiB)
	sizes := []int64{1, 4097, 100000, 5000000}
	keep, err := p.Alloc(1) // the segment stays
	require.NoError(b, err)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		blk, err := p.Alloc(sizes[i&3])
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, p.Free(keep))
}

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes (up to 8 MiB) live and
// replaces one each iteration: a Free that merges with whatever neighbours
// are free, and a best-fit Alloc among hundreds of free blocks.
func BenchmarkWorkingSet(b *testing.B) {
	p := newPool(b, 64*GiB)
	sizes := make([]int64, 1024)
	for i := range sizes {
		sizes[i] = int64(1+i*i*37%(8*MiB)) + int64(i%7)*4096
	}
	ring := make([]gpualloc.Block, 256)
	var err error
	for i := range ring {
		ring[i], err = p.Alloc(sizes[i])
		require.NoError(b, err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		slot := i * 97 & 255
		if err := p.Free(ring[slot]); err != nil {
			b.Fatal(err)
		}
		if ring[slot], err = p.Alloc(sizes[i&1023]); err != nil {
			b.Fatal(err)
		}
	}
	largest, total := p.FreeSpace()
	b.ReportMetric(float64(total), "free-B")
	b.ReportMetric(float64(largest), "largest-free-B")
}

// replayEvents is the length of the trace of BenchmarkReplay.
const replayEvents = 1_000_000

func replayTrace(b *testing.B) []traces.Event {
	events, err := traces.ReadAll(reader(b, "random", genTrace(b, 1, replayEvents)))
	require.NoError(b, err)
	return events
}

// BenchmarkReplay replays the random workload of traces/gen (1M events,
// sizes up to 64 MiB, up to 1,000 live), held in memory so that no decoding
// is timed: "engine" through sim.Replay, "direct" with a loop that only
// calls Alloc and Free, for the strategy's own share.
func BenchmarkReplay(b *testing.B) {
	events := replayTrace(b)
	open := func(be gpualloc.Backend) (gpualloc.Allocator, error) { return bestfit.New(be, bestfit.DefaultConfig()) }
	b.Run("engine", func(b *testing.B) {
		r := traces.NewSliceReader("random", events)
		b.ReportAllocs()
		var n int64
		for b.Loop() {
			r.Reset()
			res, err := sim.Replay(r, sim.Config{Open: open, SeriesBuckets: -1})
			if err != nil {
				b.Fatal(err)
			}
			n += res.Events
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
	})
	b.Run("direct", func(b *testing.B) {
		blocks := make([]gpualloc.Block, 0, 1024)
		b.ReportAllocs()
		var n int64
		for b.Loop() {
			b.StopTimer()
			dev, err := sim.NewDevice(0, sim.DefaultCapacity)
			if err != nil {
				b.Fatal(err)
			}
			a, err := open(dev)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			for _, ev := range events {
				if ev.Op == traces.OpAlloc {
					blk, err := a.Alloc(ev.Size)
					if err != nil {
						b.Fatal(err)
					}
					for int(ev.Slot) >= len(blocks) {
						blocks = append(blocks, gpualloc.Block{})
					}
					blocks[ev.Slot] = blk
				} else if err := a.Free(blocks[ev.Slot]); err != nil {
					b.Fatal(err)
				}
			}
			n += int64(len(events))
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
	})
}
