package bestfit

import (
	"fmt"
	"testing"

	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
)

// randomConfigs are the configurations of the random tests and the fuzz
// target: small segments on a small device, so that traces run out of
// memory, release segments and retry.
var randomConfigs = []Config{
	{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowChunk, Chunk: 4 * MiB},
	{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowExact, Chunk: 1},
	{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: GrowDouble, Chunk: 256 * KiB},
	{Round: 256, MinBlock: 1024, SplitThreshold: 64 * KiB, Grow: GrowChunk, Chunk: 2 * MiB, Initial: 8 * MiB},
	{Round: 4096, MinBlock: 4096, SplitThreshold: 0, Grow: GrowDouble, Chunk: 1 * MiB, Initial: 1},
}

func TestRandomOps(t *testing.T) { kit.RandomOps(t, randomConfigs) }

// FuzzOps runs the operations the fuzzer makes up on a pool of one of
// randomConfigs, checking every invariant after every operation.
func FuzzOps(f *testing.F) { kit.Fuzz(f, randomConfigs) }

// TestBestFitChoice checks on random operations that every Alloc served
// from the free blocks takes the best fit: the smallest free block of at
// least the rounded size, the lowest address among those of its size, as a
// brute-force search of the layout before the Alloc finds it.
func TestBestFitChoice(t *testing.T) {
	c := Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowChunk, Chunk: 8 * MiB}
	kit.CheckFit(t, c, c.RoundSize, func(free []segmenttest.FreeBlock, rounded int64) ([]uint64, string) {
		var best segmenttest.FreeBlock // by brute force
		for _, b := range free {
			if b.Size >= rounded && (best.Size == 0 || b.Size < best.Size || b.Size == best.Size && b.Addr < best.Addr) {
				best = b
			}
		}
		if best.Size == 0 {
			return nil, ""
		}
		return []uint64{best.Addr}, fmt.Sprintf("the best fit, %d bytes at %#x", best.Size, best.Addr)
	})
}
