package cachepool

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

type cache = Cache[struct{ age int64 }, int, struct{}]

// segmentOf adds a segment of 4 KiB at addr to the small pool of stream 0,
// cut into four live blocks of 1 KiB, and returns them.
func segmentOf(t *testing.T, c *cache, addr uint64) [4]gpualloc.Block {
	t.Helper()
	pi := c.PoolIndex(0)
	n := c.AddSegment(addr, 4096, pi, true)
	c.Segs[c.Meta[n].Seg].X = 7
	var live [4]gpualloc.Block
	for i := range live {
		a, size, h, r := c.Take(n, 1024, 1000, i < 3, false)
		live[i] = gpualloc.Block{Addr: a, Size: size, Requested: 1000, Handle: h}
		n = r
	}
	return live
}

// TestFreeBlockMerges frees blocks of a segment in an order that merges
// with the block before, the block after and both, and checks the free
// bytes, the pool and what FreeBlock reports.
func TestFreeBlockMerges(t *testing.T) {
	var c cache
	c.Init("test")
	live := segmentOf(t, &c, 1<<20)
	assert.Equal(t, int64(0), c.FreeBytes)
	free := func(i int) (int32, int64) {
		n, err := c.Release(live[i])
		require.NoError(t, err)
		return c.FreeBlock(n)
	}
	n, subsumed := free(1)
	assert.Equal(t, int64(0), subsumed)
	assert.Equal(t, uint64(1<<20+1024), c.Nodes[n].Addr)
	n, subsumed = free(2) // merges into 1
	assert.Equal(t, int64(1024), subsumed)
	assert.Equal(t, int64(2048), c.Nodes[n].Size)
	n, subsumed = free(0) // 1 and 2 merge into it
	assert.Equal(t, int64(2048), subsumed)
	assert.Equal(t, int64(3072), c.Nodes[n].Size)
	assert.False(t, c.Whole(n))
	n, subsumed = free(3)
	assert.Equal(t, int64(3072), subsumed)
	assert.True(t, c.Whole(n))
	assert.Equal(t, int64(4096), c.FreeBytes)
	assert.Equal(t, 1, c.Set(0, true).Len())
	largest, total := c.FreeSpace()
	assert.Equal(t, [2]int64{4096, 4096}, [2]int64{largest, total})

	_, err := c.Release(live[3])
	assert.ErrorIs(t, err, gpualloc.ErrInvalidFree)
}

// TestReleaseCached releases the cached segments in the order of Segs,
// keeps a segment whose release fails, and reuses the slots dropped.
func TestReleaseCached(t *testing.T) {
	var c cache
	c.Init("test")
	var segs [3][4]gpualloc.Block
	for i := range segs {
		segs[i] = segmentOf(t, &c, uint64(i+1)<<20)
	}
	for _, i := range []int{0, 2, 1} {
		for _, b := range segs[i] {
			if i == 1 && b == segs[1][3] {
				continue // segment 1 stays in use
			}
			n, err := c.Release(b)
			require.NoError(t, err)
			c.FreeBlock(n)
		}
	}
	var got []uint64
	busy := errors.New("busy")
	err := c.ReleaseCached(func(n int32) error {
		got = append(got, c.Nodes[n].Addr)
		if c.Nodes[n].Addr == 3<<20 {
			return busy
		}
		c.DropSegment(n)
		return nil
	})
	assert.ErrorIs(t, err, busy)
	assert.Equal(t, []uint64{1 << 20, 3 << 20}, got)
	assert.Equal(t, int64(4096+3072), c.FreeBytes)
	n := c.AddSegment(5<<20, 4096, 0, false)
	assert.Equal(t, int32(0), c.Meta[n].Seg, "the slot dropped is reused")
	assert.Equal(t, 0, c.Segs[0].X, "a reused slot is zeroed")
}

func TestRefused(t *testing.T) {
	oom := fmt.Errorf("device 0: malloc of 4096 bytes: %w", gpualloc.ErrOutOfMemory)
	assert.NoError(t, Refused(oom), "the device refusing memory is no error to return")
	other := errors.New("driver gone")
	assert.Same(t, other, Refused(other))
	assert.NoError(t, Refused(nil))
}
