package bfc_test

import (
	"testing"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/strategy/bfc"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// BenchmarkAllocFree measures an Alloc served from a free chunk and the
// Free that merges it back, for four sizes in turn.
func BenchmarkAllocFree(b *testing.B) {
	segmenttest.AllocFree(b, strategy.NewPool(b, GiB, bfc.DefaultConfig()))
}

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes (up to 8 MiB) live and
// replaces one each iteration: a Free that merges with whatever neighbours
// are free, and a best-fit Alloc among hundreds of free chunks.
func BenchmarkWorkingSet(b *testing.B) {
	alloctest.WorkingSet(b, strategy.NewPool(b, 64*GiB, bfc.DefaultConfig()), 97)
}

// BenchmarkReplay replays, held in memory so that no decoding is timed, the
// random workload of traces/gen (1M events, sizes up to 64 MiB, up to 1,000
// live) and each bundled trace: "engine" through sim.Replay, "direct" with
// a loop that only calls Alloc and Free, for the strategy's own share.
func BenchmarkReplay(b *testing.B) {
	events := replaytest.RandomEvents(b, gen.Options{Seed: 1, Events: 1_000_000})
	open := strategy.Open(bfc.DefaultConfig())
	b.Run("random", func(b *testing.B) { replaytest.ReplayBoth(b, open, events) })
	replaytest.ReplayBundled(b, open)
}
