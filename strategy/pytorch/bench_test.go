package pytorch_test

import (
	"testing"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/traces"
)

// BenchmarkAllocFree measures an Alloc served from the cache and the Free
// that merges it back, for four sizes in turn.
func BenchmarkAllocFree(b *testing.B) {
	a, _ := alloctest.New(b, GiB, pytorch.New, pytorch.DefaultConfig())
	alloctest.Warm(b, a, alloctest.HitSizes[:]) // the segments stay cached
	alloctest.AllocFree(b, a, alloctest.HitSizes)
}

// BenchmarkReplay replays each bundled trace, held in memory, through
// sim.Replay.
func BenchmarkReplay(b *testing.B) {
	open := alloctest.Open(pytorch.New, pytorch.DefaultConfig())
	for _, bd := range traces.Bundled() {
		events := replaytest.BundledEvents(b, bd.Name)
		b.Run(bd.Name, func(b *testing.B) { replaytest.ReplaySim(b, sim.Config{Open: open}, bd.Name, events) })
	}
}
