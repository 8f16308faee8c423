// Package round is MXNet's Round GPU memory pool ("Round" in
// MXNET_GPU_MEM_POOL_TYPE), rule for rule as in MXNet's
// src/storage/pooled_storage_manager.h (GPUPooledRoundedStorageManager).
//
// # Policy
//
// Requests fall into buckets. Up to 2^cutoff bytes (16 MiB at the default
// cutoff of 24) a request is rounded up to a power of two, and to at least
// the page (4096 bytes); beyond, to a multiple of 2^cutoff. At cutoff 24:
// 1 to 4096 bytes take 4096, 100000 take 131072, 5,000,000 take 8 MiB,
// 16 MiB take 16 MiB, 16 MiB + 1 take 32 MiB, 40 MiB take 48 MiB (see
// [Config.Bucket], [Config.BucketSize] and [Config.RoundSize]). Coarser
// rounding than the Naive pool's wastes memory inside blocks but lets a
// cached block serve any request of its bucket, which suits workloads whose
// sizes vary from step to step (RNNs with variable-length inputs).
//
// Freed blocks are never returned to the device: each goes on the free list
// of its bucket, and a request is served from its bucket's list, most
// recently freed first. A miss allocates from the device; if that allocation
// would leave less than reserve percent (5) of the device free, the pool
// first releases its whole cache, and if the device still refuses, it
// releases the cache and tries once more before failing with
// [gpualloc.ErrOutOfMemory]. The pool stays usable after a failure.
// ReleaseAll empties the cache, as MXNet's empty_cache does.
//
// MXNet keeps its buckets in an array that ends at 16 GiB and indexes past it
// for larger requests; this package keeps rounding linearly above 16 GiB.
//
// # Costs
//
// Alloc and Free are O(1) (a bucket computed with bit operations, a hash
// lookup of its free list, a slice push or pop, one map update for the live
// block) and allocate nothing in steady state; a miss adds one MemInfo call
// and one device allocation. Releasing the cache is O(cached blocks +
// buckets cached since the last release). Memory: one free list per bucket
// handed out and one map entry per live block, where MXNet keeps an array of
// 2^(34-cutoff) + cutoff free lists (1048 at cutoff 24, 16404 at cutoff 20).
//
// # Registry
//
// The package registers the strategy "round" with parameters page, cutoff
// and reserve, whose defaults come from MXNet's environment variables
// MXNET_GPU_MEM_POOL_PAGE_SIZE (or MXNET_GPU_POOL_PAGE_SIZE),
// MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF and MXNET_GPU_MEM_POOL_RESERVE.
package round
