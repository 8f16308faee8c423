package buddy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/buddy"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
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
		for _, s := range alloctest.HitSizes {
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
					if (lo.Addr-virtual.Base)%uint64(2*lo.Size) == 0 && hi.Addr == lo.Addr+uint64(lo.Size) {
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
		alloctest.AllocFree(b, p, alloctest.HitSizes)
	})
	b.Run("split21", func(b *testing.B) {
		p, err := buddy.New(strategytest.NewDevice(64*GiB), buddy.DefaultConfig())
		require.NoError(b, err)
		alloctest.Warm(b, p, []int64{1})
		alloctest.AllocFree(b, p, [4]int64{1, 1, 1, 1})
	})
}

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes live and replaces
// the oldest one each iteration (one Free and one Alloc), so blocks are
// split and merged at every order.
func BenchmarkWorkingSet(b *testing.B) {
	p, err := buddy.New(strategytest.NewDevice(64*GiB), buddy.DefaultConfig())
	require.NoError(b, err)
	alloctest.WorkingSet(b, p, 1)
}

// BenchmarkReplay replays traces held in memory with the default
// configuration.
//
// "pool": the events go straight to the pool, blocks kept in a slice by the
// events' Slot: the strategy's own cost per event. "sim": through
// sim.Replay with no time series: the strategy and the engine, decoding
// excluded.
func BenchmarkReplay(b *testing.B) {
	all := map[string][]traces.Event{
		"random1M": replaytest.RandomEvents(b, gen.Options{Seed: 1, Events: 1_000_000}),
		"training": replaytest.BundledEvents(b, "training"),
		"dynamic":  replaytest.BundledEvents(b, "dynamic"),
	}
	params, err := gpualloc.Resolve(gpualloc.Spec{Name: "buddy"}, nil)
	require.NoError(b, err)
	for _, trace := range []string{"random1M", "training", "dynamic"} {
		events := all[trace]
		b.Run(trace+"/pool", func(b *testing.B) { replaytest.ReplayPool(b, strategy.Open(buddy.DefaultConfig()), events) })
		b.Run(trace+"/sim", func(b *testing.B) { replaytest.ReplaySim(b, sim.Config{Params: params}, trace, events) })
	}
}
