package bestfit_test

import (
	"testing"

	"github.com/gpualloc/gpualloc/internal/replaytest"
)

// BenchmarkAllocFree measures an Alloc served from a free block and the
// Free that merges it back, for four sizes in turn.
func BenchmarkAllocFree(b *testing.B) { strategy.BenchAllocFree(b) }

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes (up to 8 MiB) live and
// replaces one each iteration: a Free that merges with whatever neighbours
// are free, and a best-fit Alloc among hundreds of free blocks.
func BenchmarkWorkingSet(b *testing.B) { strategy.BenchWorkingSet(b) }

// BenchmarkReplay replays the random workload of traces/gen (1M events,
// sizes up to 64 MiB, up to 1,000 live), held in memory so that no decoding
// is timed: "engine" through sim.Replay, "direct" with a loop that only
// calls Alloc and Free, for the strategy's own share.
func BenchmarkReplay(b *testing.B) { replaytest.ReplayRandom(b, strategy.Open(strategy.Default)) }
