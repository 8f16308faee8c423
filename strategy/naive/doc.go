// Package naive is MXNet's default GPU memory pool ("Naive" in
// MXNET_GPU_MEM_POOL_TYPE), rule for rule as in MXNet's
// src/storage/pooled_storage_manager.h (GPUPooledStorageManager).
//
// # Policy
//
// Every request is rounded up to a multiple of the page (4096 bytes by
// default), and a request that then exceeds large_round (2 MiB) is rounded up
// again to a multiple of large_round: 1 byte takes 4096, 100000 bytes take
// 102400, 2 MiB + 1 take 4 MiB, 5,000,000 bytes take 6,291,456 (see
// [Config.RoundSize]). Freed blocks are never returned to the device: each
// goes on a free list for its exact rounded size, and a request is served
// from the list of exactly its rounded size, most recently freed first. A
// miss allocates from the device; if that allocation would leave less than
// reserve percent (5) of the device free, the pool first releases its whole
// cache, and if the device still refuses, it releases the cache and tries
// once more before failing with [gpualloc.ErrOutOfMemory]. The pool stays
// usable after a failure. ReleaseAll empties the cache, as MXNet's
// empty_cache does.
//
// Exact-size matching wastes memory when sizes vary (a cached 8 KiB block
// does not serve a 4 KiB request), which is what MXNet's Round pool,
// [github.com/gpualloc/gpualloc/strategy/round], addresses.
//
// # Costs
//
// Alloc and Free are O(1) (a hash lookup of the free list or of the live
// block, one map update, a slice push or pop) and allocate nothing in steady
// state; a miss adds one MemInfo call and one device allocation. Releasing
// the cache is O(cached blocks + distinct sizes cached since the last
// release). Memory: one map entry per live block and one free list per
// distinct rounded size handed out.
//
// # Registry
//
// The package registers the strategy "naive" with parameters page,
// large_round and reserve, whose defaults come from MXNet's environment
// variables MXNET_GPU_MEM_POOL_PAGE_SIZE (or MXNET_GPU_POOL_PAGE_SIZE),
// MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE and MXNET_GPU_MEM_POOL_RESERVE.
package naive
