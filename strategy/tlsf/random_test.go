package tlsf

import (
	"fmt"
	"testing"

	"github.com/gpualloc/gpualloc/strategy/internal/segment"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
)

// randomConfigs are the configurations of the random tests and the fuzz
// target: small segments on a small device, so that traces run out of
// memory, release segments and retry.
var randomConfigs = []Config{
	{Round: 512, MinBlock: 512, Chunk: 4 * MiB},
	{Round: 512, MinBlock: 512, Chunk: 1},
	{Round: 256, MinBlock: 1024, Chunk: 2 * MiB},
	{Round: 4096, MinBlock: 4096, Chunk: 16 * MiB},
}

func TestRandomOps(t *testing.T) { kit.RandomOps(t, randomConfigs) }

// FuzzOps runs the operations the fuzzer makes up on a pool of one of
// randomConfigs, checking every invariant after every operation.
func FuzzOps(f *testing.F) { kit.Fuzz(f, randomConfigs) }

// TestGoodFitChoice checks on random operations that every Alloc takes a
// block of the first non-empty size class at or after SearchClass of the
// rounded size, and grows only when there is none, as a brute-force search
// of the free blocks before the Alloc finds.
func TestGoodFitChoice(t *testing.T) {
	c := Config{Round: 512, MinBlock: 512, Chunk: 8 * MiB}
	classIndex := func(size int64) int {
		fl, sl := segment.Class(size)
		return fl<<segment.SLBits | sl
	}
	kit.CheckFit(t, c, c.RoundSize, func(free []segmenttest.FreeBlock, rounded int64) ([]uint64, string) {
		fl, sl := segment.SearchClass(rounded)
		from := fl<<segment.SLBits | sl
		want := -1 // the first non-empty class at or after from
		for _, b := range free {
			if k := classIndex(b.Size); k >= from && (want < 0 || k < want) {
				want = k
			}
		}
		var allowed []uint64
		for _, b := range free {
			if classIndex(b.Size) == want {
				allowed = append(allowed, b.Addr)
			}
		}
		return allowed, fmt.Sprintf("a block of class %d, the first non-empty at or after %d", want, from)
	})
}
