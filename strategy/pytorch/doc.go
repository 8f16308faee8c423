// Package pytorch is PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp), rule for rule, registered as
// "pytorch".
//
// Policy. A request is rounded ([Config.RoundSize]) and served from the
// small pool (rounded size up to 1 MiB) or the large pool of its stream;
// a block keeps the stream of its segment. Free blocks are ordered by
// (size, address) and the smallest that fits is taken, unless a request
// below max_split_size would get a block of at least max_split_size, or a
// request of at least max_split_size a block max_non_split_rounding larger.
// The front of the block is handed out; the rest is split off when at least
// 512 bytes remain (small pool) or, in the large pool, when the request is
// below max_split_size and more than 1 MiB remains. Without a fitting
// block a segment is allocated: 2 MiB for the small pool, 20 MiB for
// requests under 10 MiB, else the request rounded up to 2 MiB. Before that,
// with a memory fraction and a garbage_collection_threshold, cached large
// segments at least as old as the mean are freed until reserved memory is
// under the threshold; if the device (or the fraction) refuses, the
// oversize cached blocks are released (with a max split size) and the
// allocation retried, then every cached segment, and a last retry; then
// the request fails with [gpualloc.ErrOutOfMemory]. Free merges a block
// with its free neighbours in its segment; segments never merge, and
// memory goes back to the device only on release ([Allocator.ReleaseAll]
// is torch.cuda.empty_cache).
//
// Costs. Alloc and Free take O(log n) for the n free blocks of a pool
// (a segment.Sorted per stream and pool) and allocate nothing once the
// tables have grown; a release scans the segments.
//
// Settings come from [Config], from PYTORCH_CUDA_ALLOC_CONF (or, when it
// is unset, PYTORCH_ALLOC_CONF, which only releases from 2.10 read: see
// [EnvConf]) in PyTorch's syntax ([ParseConf]), or from a spec such as
// "pytorch:max_split_size_mb=128,roundup_power2_divisions=256:1;512:2;>:8".
// Since a spec separates parameters with commas, a list of
// roundup_power2_divisions in a spec separates its entries with ';' (and
// may leave out the brackets). The conf parameter, whose default comes from
// those variables, is read first; the other parameters override it.
//
// Expandable segments (expandable_segments): each stream's small and large
// pool grows one virtual address range, reserved once at 1 1/8 times the
// device's memory (in whole pages), in pages of 2 MiB (small) or 20 MiB
// (large). A miss maps pages at the lowest address that fits (extending the
// free block before them); blocks split when 512 bytes or more remain, in
// both pools; release unmaps the pages that lie wholly in free blocks, and
// gives up a range left with nothing mapped. On a backend that is a
// [gpualloc.VirtualMemory] (the simulator's device, a GPU through CUDA's
// virtual memory management), the range is one Reserve and each page one
// Create and one Map, unmapped with one Unmap and one Release, as
// PyTorch's cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemUnmap and
// cuMemRelease: block addresses are the device's. On any other
// [gpualloc.Backend] each mapped page is one Malloc of the page size and
// unmapping it the Free of that allocation, and block addresses are
// virtual addresses of the allocator's own ranges, not backend addresses.
// Either way reserved memory, device allocations and frees and
// out-of-memory follow the backend, and the decisions are the same.
// MemoryStats count one device allocation per mapping (not per page), as
// PyTorch does, and no inactive split bytes for expandable blocks.
//
// Recorded state: [Allocator.Restore] holds a segment of a PyTorch memory
// snapshot as if the allocator had allocated it, without a backend call
// (package fidelity's replays), and [Allocator.RestoreExpandable] holds the
// mapped ranges of expandable segments on memory it takes from its
// backend (package sim's replays of a snapshot from the state its trace
// starts from). A snapshot's recorded allocator settings configure the
// strategy when its spec and the environment give none (see
// traces.Start.Conf).
//
// Releases and devices: [Config.Version] (the version parameter, or
// version:X.Y in the conf) selects the rules of a PyTorch release, 2.0 to
// 2.11 (see [Version]; the newest by default), and [Config.Device] (device,
// or device:npu) torch_npu's caching allocator for Ascend NPUs, which pads
// each request by 32 bytes and aligns large blocks of expandable segments
// to 16 KiB (see [NPU]). A snapshot that torch_npu wrote (see
// snapshot.Snapshot.TorchNPU) records device:npu in its conf, and settings
// that differ between its devices as "deviceN.key:value", which apply to
// the allocator of device N alone: its backend says its index (a
// [DeviceIndexer], as the simulator's devices are).
//
// Private pools (a CUDA graph's, a torch.cuda.MemPool's): [Allocator.AllocPool]
// serves a request in one, from its own small and large pools of each
// stream and its own segments, which serve it alone; [Allocator.ReleasePool]
// releases it. A live pool keeps its cached segments through a release of
// the cache and the out-of-memory path, and garbage collection passes them
// over; a released one gives them back at every release. A segment of a
// recorded state restores into the pool it names (snapshot.Segment.Pool).
// Expandable segments serve private pools from 2.5 only (see [Version]).
//
// Not implemented: stream events (record_stream), graph capture itself
// (a private pool is served as it is asked for, whether or not a capture is
// under way) and the out-of-memory callbacks.
package pytorch
