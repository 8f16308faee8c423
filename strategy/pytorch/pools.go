package pytorch

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/internal/cachepool"
)

// Private pools.
//
// A private pool (a CUDA graph's, a torch.cuda.MemPool's: PyTorch's
// PrivatePool in c10/cuda/CUDACachingAllocator.cpp, named by its
// MempoolId_t, here a snapshot.PoolID) has its own small and large pools of
// each stream, beside the default ones: a request in it (AllocPool) is
// served from its free blocks by the same rules, the segments allocated for
// it serve it alone, and a block freed goes back to it. Its cached segments
// stay while it lives: release_cached_blocks (empty_cache, and the last
// step of the out-of-memory path) frees the cached segments of the default
// pools and of the released private pools only (graph_pools_freeable), and
// garbage collection looks at the default large pool alone. ReleasePool
// releases it (releasePool, its use count at 0). Its segments are
// expandable segments, with expandable_segments on, from PyTorch 2.5 only
// (pytorch/pytorch#128068; before, alloc_block gives a private pool
// cudaMalloc segments): see [Version].

// A privatePool is what the allocator knows of a private pool.
type privatePool struct {
	id       snapshot.PoolID
	released bool // releasePool: its cached segments may go back to the device
}

// poolOf returns the index in a.pools of the private pool id, made on first
// use; 0, the default pools, for the zero id. O(private pools).
func (a *Allocator) poolOf(id snapshot.PoolID) int32 {
	if !id.Private() {
		return 0
	}
	if p := a.findPool(id); p > 0 {
		return p
	}
	if len(a.pools) == 0 {
		a.pools = append(a.pools, privatePool{}) // index 0: the default pools
	}
	a.pools = append(a.pools, privatePool{id: id})
	return int32(len(a.pools) - 1)
}

// findPool returns the index in a.pools of the private pool id, -1 for
// one never used. O(private pools).
func (a *Allocator) findPool(id snapshot.PoolID) int32 {
	for i := 1; i < len(a.pools); i++ {
		if a.pools[i].id == id {
			return int32(i)
		}
	}
	return -1
}

// poolIndex returns the index in a.cache.Streams of the small and large
// pools of stream in private pool pool (0: the default pools), made on
// first use, in O(streams).
func (a *Allocator) poolIndex(stream uint64, pool int32) int32 {
	for i, p := range a.cache.Streams {
		if p.Stream == stream && p.X.pool == pool {
			return int32(i)
		}
	}
	a.cache.Streams = append(a.cache.Streams, &cachepool.Stream[unmappedLists]{Stream: stream, X: unmappedLists{pool: pool}})
	return int32(len(a.cache.Streams) - 1)
}

// private reports whether the pools at index pi of a.cache.Streams are a
// private pool's.
func (a *Allocator) private(pi int32) bool { return a.cache.Streams[pi].X.pool != 0 }

// releasable reports whether the cached segments of the pools at index pi
// may go back to the device in a release of the cache: those of the
// default pools and of released private pools (release_cached_blocks).
func (a *Allocator) releasable(pi int32) bool {
	p := a.cache.Streams[pi].X.pool
	return p == 0 || a.pools[p].released
}

// expandable reports whether a request in the pools at index pi gets an
// expandable segment: with expandable_segments on, in the default pools,
// and from PyTorch 2.5 in private pools (#128068).
func (a *Allocator) expandable(pi int32) bool {
	return a.c.ExpandableSegments && (!a.private(pi) || a.c.Version.atLeast(2, 5))
}

// AllocPool returns a block for a request of size bytes on stream in the
// private pool id (the zero id: the default pools, as AllocStream), as
// PyTorch's malloc does while a CUDA graph captures into the pool or a
// torch.cuda.MemPool is in use: the rules of AllocStream, on the pool's
// own free blocks and segments. A released pool that is asked again is in
// use again. It costs what AllocStream costs, plus O(private pools) to
// find the pool.
func (a *Allocator) AllocPool(size int64, stream uint64, id snapshot.PoolID) (gpualloc.Block, error) {
	p := a.poolOf(id)
	if p != 0 {
		a.pools[p].released = false
	}
	return a.alloc(size, stream, p)
}

// ReleasePool releases the private pool id, as PyTorch's releasePool does
// when the last graph or MemPool that uses it goes: its blocks still live
// stay live, and its cached segments, and those that its blocks freed
// later leave, go back to the device at every release of the cache
// (ReleaseAll, or the out-of-memory path). It then releases the cache of
// that pool at once, as the release of the cache that frees a released
// pool's segments does (release_cached_blocks), and returns the error of
// a device free that failed. A pool never used holds nothing: nil.
func (a *Allocator) ReleasePool(id snapshot.PoolID) error {
	p := a.findPool(id)
	if p < 0 {
		return nil
	}
	a.pools[p].released = true
	err := a.cache.ReleaseCached(func(n int32) error {
		if a.cache.Streams[a.cache.Meta[n].Pool].X.pool != p {
			return nil
		}
		return a.releaseBlock(n)
	})
	if err == nil {
		err = a.releaseExpandableOf(func(pi int32) bool { return a.cache.Streams[pi].X.pool == p })
	}
	if err != nil {
		return fmt.Errorf("%s: release of private pool %v: %w", name, id, err)
	}
	return nil
}
