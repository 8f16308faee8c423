// Package bestfit is a best-fit allocator with splitting and coalescing
// inside device segments: the family of TensorFlow's BFC allocator, RMM's
// pool_memory_resource, Paddle's auto-growth allocator and CuPy's memory
// pool, with parameters to approximate each.
//
// # Policy
//
// A request of size bytes is rounded up to a multiple of round (512 bytes by
// default) and to at least min_block (512): see [Config.RoundSize]. The pool
// keeps its free blocks ordered by (size, address) and serves a request from
// the smallest free block that fits, the one at the lowest address among
// those of its size. If that block is larger than the request and the rest
// is at least split_threshold bytes (512), the rest stays free as a block of
// its own; otherwise the whole block is handed out, and its Size is larger
// than the rounded request. With the default threshold every rest is split
// off, so every block's Size is exactly max(512, size rounded up to 512).
//
// Memory comes from the device in segments. When no free block fits, the
// pool takes a new segment as the growth policy says: grow=exact takes just
// the block needed; grow=chunk (the default) at least chunk bytes (20 MiB,
// PyTorch's large segment); grow=double doubles the segment size from chunk,
// by TensorFlow's rule (see [GrowDouble]). initial, if not 0, is a segment
// taken when the pool is made. A freed block merges with the free blocks
// just before and after it in its segment, never with a block of another
// segment, even one adjacent in the address space: segments go back to the
// device whole. Free never returns memory to the device. If the device is
// out of memory, the pool returns its entirely free segments to the device
// and asks again; if the device still refuses a segment larger than the
// block needed, it asks for just the block; if that fails, the request fails
// with [gpualloc.ErrOutOfMemory] and the pool stays usable.
// ReleaseAll returns every entirely free segment.
//
// # Costs
//
// Free blocks are indexed by (size, address): grouped into size classes, 32
// per power of two, each class a treap (a randomized balanced search tree),
// with bitmaps of the non-empty classes (see the internal package segment's
// Sorted). Best fit searches the request's class, then takes the smallest
// block of the next non-empty class, found in two bit scans. Alloc is
// O(log k) expected for the k free blocks of a class: O(log n) at worst for
// n free blocks, and close to O(1) when sizes spread over many classes.
// Free is O(1) to find the block (its Handle indexes a table of live
// blocks) and its neighbours (each block links to them), then O(log k) to
// take free neighbours out of the index and insert the merged block. Blocks
// are records in one slice, linked by int32 indexes and reused once freed:
// in steady state neither Alloc nor Free allocates. A device call happens
// only when the pool grows or releases; releasing is O(segments).
// FreeSpace keeps the total as blocks change and finds the largest
// block, the rightmost of the highest non-empty class, in O(log k). Memory:
// a 48-byte record per block, free or live, a 16-byte table entry per live
// block, and 8 KiB of class roots.
//
// # Provenance and presets
//
// TensorFlow's BFCAllocator (tensorflow/core/common_runtime/bfc_allocator.cc)
// rounds to 256 bytes (kMinAllocationSize), keeps free chunks in power-of-two
// bins ordered by (size, address) and takes the best fit, coalesces within a
// region, and with allow_growth takes regions that start at 2 MiB and double
// (BFCAllocator::Extend); with garbage collection on, it frees free regions
// and retries when the device is out of memory. It splits a chunk only when
// the chunk is at least twice the request or the rest at least 128 MiB, a
// rule split_threshold does not reproduce:
//
//	bestfit:round=256,min_block=256,split_threshold=256,grow=double,chunk=2MiB
//
// RMM's pool_memory_resource aligns to 256 bytes, takes the best fit from a
// free list that coalesces blocks of the same upstream allocation, takes an
// initial pool of initial_pool_size bytes and grows by max(request, current
// pool size), doubling the pool, backing off by halves down to the request
// when upstream refuses. Its free blocks go back upstream only on release,
// and it keeps free lists per stream, which this pool does not. With S the
// initial pool size:
//
//	bestfit:round=256,min_block=256,split_threshold=256,grow=double,chunk=S,initial=S
//
// Paddle's AutoGrowthBestFitAllocator aligns to 256 bytes, keeps free blocks
// in a map ordered by (size, address) and takes the lower bound of the
// request (best fit), and with FLAGS_auto_growth_chunk_size_in_mb=0, its
// default, grows by chunks of exactly the aligned request; when the device
// refuses, it frees its idle chunks and retries:
//
//	bestfit:round=256,min_block=256,split_threshold=256,grow=exact
//
// CuPy's MemoryPool (cupy/cuda/memory.pyx) rounds to 512 bytes, keeps free
// chunks in bins by size and takes the first bin with a chunk that fits,
// splits and merges chunks within one device allocation, grows by
// allocations of exactly the rounded request, and frees all its free blocks
// and retries when the device is out of memory:
//
//	bestfit:grow=exact
//
// # Registry
//
// The package registers the strategy "bestfit" with parameters round,
// min_block, split_threshold, grow, chunk and initial.
package bestfit
