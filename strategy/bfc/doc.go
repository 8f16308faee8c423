// Package bfc is TensorFlow's BFC ("best-fit with coalescing") allocator,
// the GPU allocator of TensorFlow and of XLA (and so of JAX), rule for
// rule, so that a replay shows what TensorFlow or JAX would hold from the
// device for the same requests.
//
// # Policy
//
// Each rule below names the function of TensorFlow's BFCAllocator it
// comes from (tensorflow/core/common_runtime/bfc_allocator.cc and .h, since
// moved to xla/tsl/framework/bfc_allocator.cc and .h) and quotes it.
//
// Rounding (AllocateRawInternal, RoundedBytes): a request of num_bytes is
// rounded up to a multiple of kMinAllocationSize, 256 bytes:
// "kMinAllocationSize * ((bytes + kMinAllocationSize - 1) /
// kMinAllocationSize)". A request of 0 bytes is refused; every chunk is at
// least 256 bytes. See [RoundedBytes].
//
// Bins (BinNumForSize, the constructor): kNumBins = 21 bins; a free chunk
// of n bytes is in bin "std::min(kNumBins - 1, Log2FloorNonZero(v))" with
// v = max(n, 256) >> kMinAllocationBits: bin b holds chunks of 256 << b
// bytes up to twice that, bin 20 every chunk of 256 MiB or more. Each bin
// keeps its chunks ordered by size, then address (Bin::ChunkComparator:
// "Sort first by size and then use pointer address as a tie breaker").
// See [BinNumForSize].
//
// Fit (FindChunkPtr): from the request's bin upward, each bin's chunks in
// that order, the first chunk with "chunk->size >= rounded_bytes" is
// taken. That is the smallest free chunk of at least the rounded size, the
// one at the lowest address among those of its size: best fit.
//
// Split (FindChunkPtr, SplitChunk): the chunk is split if "chunk->size >=
// rounded_bytes * 2 || static_cast<int64_t>(chunk->size) - rounded_bytes >=
// max_internal_fragmentation_bytes", where max_internal_fragmentation_bytes
// is fragmentation_fraction times the memory limit if fragmentation_fraction
// is positive, else 128 MiB (the constructor; "kMaxInternalFragmentation =
// 128 << 20" in releases before the option). The front of the chunk, of
// exactly the rounded size, is handed out and the rest stays free. Otherwise
// the whole chunk is handed out: a request of 1,100,000 bytes served from a
// free chunk of 2 MiB takes all 2 MiB, and a block's Size may be up to
// twice the rounded request (or 128 MiB more).
//
// Coalescing (DeallocateRawInternal, TryToCoalesce, Merge): a freed chunk
// merges with the next chunk of its region if that is free, then with the
// previous one if that is free. Chunks never merge across regions: the
// regions of TensorFlow's GPU sub-allocator (DeviceMemAllocator,
// cuMemAlloc) are not coalesced (SupportsCoalescing is false), even when
// two happen to be adjacent in memory.
//
// Regions (the constructor, Extend): memory comes from the device in
// regions, one device allocation each, never more in all than the memory
// limit: memory_limit bytes if given, else memory_fraction of the device's
// total memory, truncated ("total_memory * memory_fraction" in XLA's
// CreateBFCAllocator, xla/pjrt/gpu/gpu_helpers.cc). The next region's size,
// curr_region_allocation_bytes_, starts at "RoundedBytes(std::min(
// total_memory, size_t{2 << 20}))" with allow_growth, else at
// RoundedBytes(total_memory), the whole limit. When no free chunk fits,
// Extend:
//
//   - fails at once if the request is larger than the bytes left under the
//     limit, "(available_bytes / kMinAllocationSize) * kMinAllocationSize";
//   - doubles the region size while the request is larger ("while
//     (rounded_bytes > curr_region_allocation_bytes_)");
//   - asks the device for "std::min(curr_region_allocation_bytes_,
//     available_bytes)";
//   - if the device refuses, asks for "RoundedBytes(bytes *
//     kBackpedalFactor)" with kBackpedalFactor a float 0.9, again and again,
//     and fails once that is smaller than the request;
//   - after a region for which it did not have to double the size, doubles
//     it for the next ("if (!increased_allocation)").
//
// So with allow_growth the regions are 2 MiB, 4 MiB, 8 MiB and so on, a
// large request raising the size to the power-of-two multiple of 2 MiB
// that holds it; without it, the first request takes one region of the
// whole limit. As BFCAllocator does, a pool takes nothing from the device
// before its first Alloc.
//
// Garbage collection (AllocateRawInternal, DeallocateFreeRegions,
// DeallocateRegions): when Extend fails and garbage_collection is on, the
// regions that hold no chunk in use are returned to the device, if there
// are any and the request fits in "memory_limit_ -
// total_region_allocated_bytes_ + total_free_bytes" (the "rough
// estimation"), and Extend is tried again; if it fails too, the request
// fails with [gpualloc.ErrOutOfMemory]. [Pool.ReleaseAll] returns the same
// regions on demand.
//
// # Parameters and the environment
//
// allow_growth is TensorFlow's GPUOptions.allow_growth, which
// TF_FORCE_GPU_ALLOW_GROWTH overrides when it is exactly "true" or "false"
// (GPUBFCAllocator's GetAllowGrowthValue); preallocate is its opposite,
// JAX's name (XLA_PYTHON_CLIENT_PREALLOCATE, read by jaxlib as false for
// "false", "False" or "0"; XLA's CreateBFCAllocator sets "opts.allow_growth
// = !preallocate"). memory_fraction is TensorFlow's
// per_process_gpu_memory_fraction and XLA's memory_fraction
// (XLA_CLIENT_MEM_FRACTION, formerly XLA_PYTHON_CLIENT_MEM_FRACTION;
// GpuAllocatorConfig's default 0.75). garbage_collection is
// BFCAllocator::Options::garbage_collection, which TensorFlow's GPU
// allocator sets from TF_ENABLE_GPU_GARBAGE_COLLECTION (default true) and
// XLA leaves false. fragmentation_fraction is
// BFCAllocator::Options::fragmentation_fraction (TensorFlow's
// GPUOptions.experimental.internal_fragmentation_fraction). A spec's
// parameter beats its variable; a value TensorFlow or JAX would ignore or
// guess at is an error here, and so are allow_growth and preallocate that
// contradict each other.
//
// The defaults suit a simulator, not a framework: allow_growth on, so that
// peak reserved memory measures the trace rather than the device, the
// whole device as the limit, garbage collection on. TensorFlow by default
// preallocates a limit of the device's free memory less a reserve for the
// system; JAX preallocates 75% of the device without garbage collection:
// bfc:preallocate=true,memory_fraction=0.75,garbage_collection=false.
//
// # Costs
//
// Chunks are records in one slice, linked by int32 indexes to their
// neighbours in their region, and reused once merged away, as
// BFCAllocator's ChunkHandles are; live chunks are found from their
// [gpualloc.Block] Handle in O(1). The free chunks are kept by (size,
// address) in the best-fit index the other strategies built on segments
// use: size classes of 32 per power of two, finer than TensorFlow's bins,
// each a treap (a randomized balanced search tree where TensorFlow uses a
// std::set), with bitmaps of the non-empty classes. It finds the chunk
// FindChunkPtr finds: Alloc searches the request's class in O(log k)
// expected for its k chunks (TensorFlow steps through the bin's smaller
// chunks one by one, O(k)), then finds the next non-empty class in two bit
// scans and takes its smallest chunk in O(log k): O(log n) for n free
// chunks. Free is O(1) to find the chunk and its neighbours, and O(log k)
// per insert and removal in the index. A region is taken or returned in
// O(regions). [Pool.FreeSpace] is O(1) for the total and O(log k) for the
// largest chunk. In steady state neither Alloc nor Free allocates. Memory: a 48-byte record per chunk, free or in use, a 16-byte
// table entry per live block, 24 bytes per region.
//
// # Provenance, versions and what is left out
//
// The rules are those of the BFCAllocator in xla/tsl/framework, which
// TensorFlow 2.x and JAX both use, as read in its source. Earlier releases
// differ: TensorFlow 1.x started growth at 1 MiB ("size_t{1048576}"); some
// TensorFlow 2.x releases backed off only at the first refusal in the
// allocator's life ("started_backpedal_"), where the current source backs
// off at every refusal, as here; fragmentation_fraction came after the fixed
// 128 MiB bound.
//
// Where TensorFlow would loop, this pool stops: below 2560 bytes, 90% of a
// size rounded up to 256 is the size itself, so a device that keeps
// refusing a region under about 2.3 KiB would be asked for it forever;
// here the request fails. The region size saturates at the largest int64
// where TensorFlow's size_t would wrap after 64 doublings.
//
// Not modelled: the retry helper that sleeps up to 10 seconds waiting for
// another thread to free memory (a replay has no other thread, so the
// retry fails as the first try did); timestamped chunks (freed_by_count,
// timestamped_allocator); regions that the sub-allocator coalesces (the
// virtual-memory sub-allocator's SupportsCoalescing); alignment beyond 256
// bytes and spatial partitioning, recent additions to XLA's copy that
// change nothing for requests aligned to 256 bytes with partitioning off,
// its default; TensorFlow's own default limit (free memory less
// MinSystemMemory's reserve), which depends on the device, and XLA's
// gpu_system_memory_size. Streams: a BFC allocator serves one device for
// every stream, as here.
package bfc
