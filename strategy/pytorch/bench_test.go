package pytorch_test

import (
	"testing"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
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
	replaytest.ReplayBundled(b, alloctest.Open(pytorch.New, pytorch.DefaultConfig()))
}

// BenchmarkAllocFreeNPU is BenchmarkAllocFree with torch_npu's rules and
// expandable segments: each request padded, large blocks aligned to
// 16 KiB.
func BenchmarkAllocFreeNPU(b *testing.B) {
	a, _ := alloctest.New(b, GiB, pytorch.New, mustConf(b, "expandable_segments:True,device:npu"))
	alloctest.Warm(b, a, alloctest.HitSizes[:])
	alloctest.AllocFree(b, a, alloctest.HitSizes)
}
