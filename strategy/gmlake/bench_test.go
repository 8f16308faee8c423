package gmlake_test

import (
	"testing"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/strategy/gmlake"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
)

// strategy is gmlake to the shared benchmarks.
var strategy = alloctest.Strategy[gmlake.Config, *gmlake.Allocator]{Name: "gmlake", New: gmlake.New, Default: gmlake.DefaultConfig()}

// BenchmarkAllocFree measures an Alloc served from a free block and the
// Free that merges it back, for four sizes in turn.
func BenchmarkAllocFree(b *testing.B) { strategy.BenchAllocFree(b) }

// BenchmarkReplay replays each bundled trace, held in memory, through
// sim.Replay on the virtual device (which has virtual memory), with
// glake's defaults and with every large request stitched (frag_limit=0).
func BenchmarkReplay(b *testing.B) {
	stitchAll := strategy.With(func(c *gmlake.Config) { c.FragLimit = 0 })
	for name, c := range map[string]gmlake.Config{"default": strategy.Default, "frag_limit=0": stitchAll} {
		b.Run(name, func(b *testing.B) { replaytest.ReplayBundled(b, strategy.Open(c)) })
	}
}
