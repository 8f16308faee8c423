package buddy_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/buddy"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// BenchmarkAllocFree measures an Alloc and the Free of its block.
//
// "hit": the block's buddy is live, so the Alloc takes the block off its
// free list and the Free puts it back, with no split or merge: the O(1)
// path, for four sizes in turn.
//
// "split21": the arena is otherwise empty, so each Alloc of 512 bytes splits
// the 1 GiB arena 21 times and each Free merges it back 21 times: the worst
// case of the default configuration.
func BenchmarkAllocFree(b *testing.B) {
	b.Run("hit", func(b *testing.B) {
		p, err := buddy.New(strategytest.NewDevice(64*GiB), buddy.DefaultConfig())
		require.NoError(b, err)
		sizes := []int64{1, 4097, 100000, 5000000}
		for _, s := range sizes {
			// Of four blocks, two are buddies: keep the lower one live and
			// free the upper one last, so that it heads its free list.
			var blks []gpualloc.Block
			for range 4 {
				blk, err := p.Alloc(s)
				require.NoError(b, err)
				blks = append(blks, blk)
			}
			var upper gpualloc.Block
			for _, lo := range blks {
				for _, hi := range blks {
					if (lo.Addr-strategytest.DeviceBase)%uint64(2*lo.Size) == 0 && hi.Addr == lo.Addr+uint64(lo.Size) {
						upper = hi
					}
				}
			}
			require.NotZero(b, upper.Addr, "no buddies among %v", blks)
			for _, blk := range blks {
				if blk.Addr == upper.Addr+uint64(upper.Size) || blk.Addr == upper.Addr-uint64(upper.Size) || blk == upper {
					continue
				}
				require.NoError(b, p.Free(blk))
			}
			require.NoError(b, p.Free(upper))
		}
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
	})
	b.Run("split21", func(b *testing.B) {
		p, err := buddy.New(strategytest.NewDevice(64*GiB), buddy.DefaultConfig())
		require.NoError(b, err)
		blk, err := p.Alloc(1)
		require.NoError(b, err)
		require.NoError(b, p.Free(blk))
		b.ReportAllocs()
		for b.Loop() {
			blk, err := p.Alloc(1)
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Free(blk); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes live and replaces
// the oldest one each iteration (one Free and one Alloc), so blocks are
// split and merged at every order.
func BenchmarkWorkingSet(b *testing.B) {
	p, err := buddy.New(strategytest.NewDevice(64*GiB), buddy.DefaultConfig())
	require.NoError(b, err)
	sizes := make([]int64, 1024)
	for i := range sizes {
		sizes[i] = int64(1+i*i*37%(8*MiB)) + int64(i%7)*4096
	}
	ring := make([]gpualloc.Block, 256)
	for i := range ring {
		ring[i], err = p.Alloc(sizes[i])
		require.NoError(b, err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		slot := i & 255
		if err := p.Free(ring[slot]); err != nil {
			b.Fatal(err)
		}
		if ring[slot], err = p.Alloc(sizes[i&1023]); err != nil {
			b.Fatal(err)
		}
	}
}

// benchTraces are the traces of BenchmarkReplay, decoded once: 1M events
// of gen's "random" workload and the bundled traces.
var benchTraces = sync.OnceValues(func() (map[string][]traces.Event, error) {
	m := map[string][]traces.Event{}
	var err error
	if m["random1M"], err = generate(gen.Options{Events: 1_000_000, Seed: 1}); err != nil {
		return nil, err
	}
	for _, bt := range traces.Bundled() {
		r, err := bt.Open()
		if err != nil {
			return nil, err
		}
		if m[bt.Name], err = traces.ReadAll(r); err != nil {
			return nil, err
		}
	}
	return m, nil
})

// BenchmarkReplay replays traces held in memory with the default
// configuration.
//
// "pool": the events go straight to the pool, blocks kept in a slice by the
// events' Slot: the strategy's own cost per event. "sim": through
// sim.Replay with no time series: the strategy and the engine, decoding
// excluded.
func BenchmarkReplay(b *testing.B) {
	all, err := benchTraces()
	require.NoError(b, err)
	for _, trace := range []string{"random1M", "training", "dynamic"} {
		events := all[trace]
		b.Run(trace+"/pool", func(b *testing.B) {
			var blocks []gpualloc.Block
			var p *buddy.Pool
			var err error
			b.ReportAllocs()
			for b.Loop() {
				p, err = buddy.New(strategytest.NewDevice(80*GiB), buddy.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				if blocks, err = replay(p, events, blocks); err != nil {
					b.Fatal(err)
				}
			}
			reportEvents(b, len(events))
			b.ReportMetric(float64(p.Stats().PeakReserved), "peak-reserved-B")
		})
		b.Run(trace+"/sim", func(b *testing.B) {
			params, err := gpualloc.Resolve(gpualloc.Spec{Name: "buddy"}, nil)
			require.NoError(b, err)
			r := traces.NewSliceReader(trace, events)
			var res sim.Result
			b.ReportAllocs()
			for b.Loop() {
				r.Reset()
				if res, err = sim.Replay(r, sim.Config{Params: params, SeriesBuckets: -1}); err != nil {
					b.Fatal(err)
				}
			}
			reportEvents(b, len(events))
			b.ReportMetric(float64(res.PeakReservedBytes), "peak-reserved-B")
		})
	}
}

// replay replays events on p, keeping the live blocks in blocks by the
// events' Slot, and returns blocks for the next replay.
func replay(p *buddy.Pool, events []traces.Event, blocks []gpualloc.Block) ([]gpualloc.Block, error) {
	for _, ev := range events {
		if int(ev.Slot) >= len(blocks) {
			blocks = append(blocks, make([]gpualloc.Block, int(ev.Slot)+1-len(blocks))...)
		}
		if ev.Op == traces.OpAlloc {
			b, err := p.Alloc(ev.Size)
			if err != nil {
				return blocks, err
			}
			blocks[ev.Slot] = b
		} else if err := p.Free(blocks[ev.Slot]); err != nil {
			return blocks, err
		}
	}
	return blocks, nil
}

func reportEvents(b *testing.B, perOp int) {
	events := float64(perOp) * float64(b.N)
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
}
