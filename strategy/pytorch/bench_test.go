package pytorch_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
)

// BenchmarkAllocFree measures an Alloc served from the cache and the Free
// that merges it back, for four sizes in turn.
func BenchmarkAllocFree(b *testing.B) {
	a, err := pytorch.New(strategytest.NewDevice(GiB), pytorch.DefaultConfig())
	require.NoError(b, err)
	sizes := []int64{1, 4097, 100000, 5000000}
	for _, s := range sizes { // the segments stay cached
		blk, err := a.Alloc(s)
		require.NoError(b, err)
		require.NoError(b, a.Free(blk))
	}
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

// BenchmarkReplay replays each bundled trace, held in memory, through
// sim.Replay.
func BenchmarkReplay(b *testing.B) {
	open := func(be gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(be, pytorch.DefaultConfig()) }
	for _, bd := range traces.Bundled() {
		r, err := bd.Open()
		require.NoError(b, err)
		events, err := traces.ReadAll(r)
		require.NoError(b, err)
		b.Run(bd.Name, func(b *testing.B) {
			sr := traces.NewSliceReader(bd.Name, events)
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				sr.Reset()
				res, err := sim.Replay(sr, sim.Config{Open: open, SeriesBuckets: -1})
				if err != nil {
					b.Fatal(err)
				}
				n += res.Events
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
