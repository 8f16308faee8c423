package pytorch_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

var graph = snapshot.PoolID{1, 0}

func allocPool(t *testing.T, a *pytorch.Allocator, size int64, pool snapshot.PoolID) gpualloc.Block {
	t.Helper()
	b, err := a.AllocPool(size, 0, pool)
	require.NoError(t, err)
	return b
}

// TestPrivatePoolSegments: a private pool's segment serves that pool
// alone: the default pools' request takes a segment of its own beside the
// pool's cached one, and the pool's next request reuses its own. A release
// of the cache (empty_cache) keeps the live pool's cached segment;
// ReleasePool gives it back, and the release that follows the free of the
// pool's last block gives back the segment that held it.
func TestPrivatePoolSegments(t *testing.T) {
	a, dev := newAlloc(t, "", GiB)
	p := allocPool(t, a, 5*MiB, graph)
	require.NoError(t, a.Free(p))
	d := alloc(t, a, 5*MiB, 0)
	assert.Equal(t, int64(2), dev.Stats().Mallocs, "the default pools' own segment")
	assert.NotEqual(t, p.Addr, d.Addr)
	q := allocPool(t, a, 8*MiB, graph)
	assert.Equal(t, p.Addr, q.Addr, "the pool's cached segment")
	assert.Equal(t, int64(2), dev.Stats().Mallocs)
	other := allocPool(t, a, MiB/2, snapshot.PoolID{2, 0})
	assert.Equal(t, int64(3), dev.Stats().Mallocs, "another pool's small segment")
	require.NoError(t, a.Free(other))

	require.NoError(t, a.Free(d))
	require.NoError(t, a.ReleaseAll())
	assert.Equal(t, int64(22*MiB), dev.Stats().Used, "both private pools keep their segments")
	require.NoError(t, a.ReleasePool(graph))
	assert.Equal(t, int64(22*MiB), dev.Stats().Used, "a block of the pool is live")
	require.NoError(t, a.Free(q))
	require.NoError(t, a.ReleaseAll())
	assert.Equal(t, int64(2*MiB), dev.Stats().Used, "the released pool's segment goes")
	require.NoError(t, a.ReleasePool(snapshot.PoolID{2, 0}))
	assert.Equal(t, int64(0), dev.Stats().Used)
	require.NoError(t, a.ReleasePool(snapshot.PoolID{3, 0}), "a pool never used holds nothing")
	checkDevice(t, a, dev)
}

// TestPrivatePoolOOM: the out-of-memory path releases the default pools'
// cached segments, not a live private pool's (release_cached_blocks), so
// that a request that fits once the pool is released fails while it
// lives.
func TestPrivatePoolOOM(t *testing.T) {
	a, dev := newAlloc(t, "", 100*MiB)
	p := allocPool(t, a, 60*MiB, graph)
	require.NoError(t, a.Free(p))
	_, err := a.Alloc(60 * MiB)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	require.NoError(t, a.ReleasePool(graph))
	alloc(t, a, 60*MiB, 0)
	checkDevice(t, a, dev)
}

// TestPrivatePoolGarbageCollection: garbage collection frees the default
// large pool's old cached segments, never a private pool's.
func TestPrivatePoolGarbageCollection(t *testing.T) {
	a, dev := newAlloc(t, "garbage_collection_threshold:0.5,memory_fraction:1", 200*MiB)
	p := allocPool(t, a, 80*MiB, graph)
	require.NoError(t, a.Free(p))
	alloc(t, a, 30*MiB, 1)
	alloc(t, a, 30*MiB, 1) // reserved 110 MiB > 100 MiB, but nothing the collection may free
	assert.Equal(t, int64(140*MiB), dev.Stats().Used)
	a2, dev2 := newAlloc(t, "garbage_collection_threshold:0.5,memory_fraction:1", 200*MiB)
	cache(t, a2, 80*MiB)
	alloc(t, a2, 30*MiB, 1)
	alloc(t, a2, 30*MiB, 1) // reserved 110 MiB: the default pool's 80 MiB goes
	assert.Equal(t, int64(60*MiB), dev2.Stats().Used)
}

// TestVersionPrivatePoolExpandable: with expandable_segments on, a private
// pool's request maps pages of an expandable segment from PyTorch 2.5
// (pytorch/pytorch#128068); 2.4 gives it a segment of its own from
// cudaMalloc, while the default pools' request maps pages in both.
func TestVersionPrivatePoolExpandable(t *testing.T) {
	for _, tt := range []struct {
		version          string
		mallocs, creates int64
	}{{"2.4", 1, 1}, {"2.5", 0, 3}, {"2.11", 0, 3}} {
		c := mustConf(t, es)
		var err error
		c.Version, err = pytorch.ParseVersion(tt.version)
		require.NoError(t, err)
		dev := strategytest.NewDevice(GiB)
		a, err := pytorch.New(dev, c)
		require.NoError(t, err)
		p := allocPool(t, a, 30*MiB, graph) // 2 pages of 20 MiB, or a 30 MiB segment
		alloc(t, a, 15*MiB, 0)              // 1 page
		ds := dev.Stats()
		assert.Equal(t, tt.mallocs, ds.Mallocs, "PyTorch %s", tt.version)
		assert.Equal(t, tt.creates, ds.Creates, "PyTorch %s", tt.version)
		require.NoError(t, a.Free(p))
		// A new request of the pool reuses the pool's memory in both.
		q := allocPool(t, a, 30*MiB, graph)
		assert.Equal(t, p.Addr, q.Addr, "PyTorch %s", tt.version)
		checkDevice(t, a, dev)
	}
}

// TestRestorePrivatePool: a segment of a private pool restored from a
// recorded state serves that pool alone.
func TestRestorePrivatePool(t *testing.T) {
	a, dev := newAlloc(t, "", GiB)
	addr, err := dev.Malloc(20 * MiB)
	require.NoError(t, err)
	live, err := a.Restore(snapshot.Segment{Address: addr, TotalSize: 20 * MiB, SegmentType: "large", Pool: graph, Blocks: []snapshot.Block{
		{Address: addr, Size: 4 * MiB, RequestedSize: 4 * MiB, State: snapshot.ActiveAllocated},
		{Address: addr + 4*MiB, Size: 16 * MiB, State: snapshot.Inactive},
	}})
	require.NoError(t, err)
	require.Len(t, live, 1)
	d := alloc(t, a, 8*MiB, 0)
	assert.NotEqual(t, addr+4*MiB, d.Addr, "not from the private pool's free 16 MiB")
	p := allocPool(t, a, 8*MiB, graph)
	assert.Equal(t, addr+4*MiB, p.Addr)
}
