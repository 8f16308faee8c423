package bestfit_test

import (
	"testing"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// BenchmarkAllocFree measures an Alloc served from a free block and the
// Free that merges it back, for four sizes in turn.
func BenchmarkAllocFree(b *testing.B) {
	segmenttest.AllocFree(b, strategy.NewPool(b, GiB, bestfit.DefaultConfig()))
}

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes (up to 8 MiB) live and
// replaces one each iteration: a Free that merges with whatever neighbours
// are free, and a best-fit Alloc among hundreds of free blocks.
func BenchmarkWorkingSet(b *testing.B) {
	alloctest.WorkingSet(b, strategy.NewPool(b, 64*GiB, bestfit.DefaultConfig()), 97)
}

// BenchmarkReplay replays the random workload of traces/gen (1M events,
// sizes up to 64 MiB, up to 1,000 live), held in memory so that no decoding
// is timed: "engine" through sim.Replay, "direct" with a loop that only
// calls Alloc and Free, for the strategy's own share.
func BenchmarkReplay(b *testing.B) {
	events := replaytest.RandomEvents(b, gen.Options{Seed: 1, Events: 1_000_000})
	replaytest.ReplayBoth(b, strategy.Open(bestfit.DefaultConfig()), events)
}
