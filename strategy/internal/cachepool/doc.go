// Package cachepool is the pool skeleton of PyTorch's CUDA caching
// allocator (c10/cuda/CUDACachingAllocator.cpp), which strategy/pytorch and
// strategy/gmlake (PyTorch's allocator with GMLake's stitching) are both
// built on, so that a rule the two share lives in one place:
//
//   - each stream has a small and a large pool of free blocks, ordered by
//     (size, address): PyTorch's BlockPool, whose one set ordered by
//     (stream, size, address) is here cut by stream, which finds the same
//     blocks ([Cache.PoolIndex], [Stream.Set]);
//   - a segment is one device allocation tiled by blocks that know their
//     neighbours, so that a freed block merges with the free blocks just
//     before and after it in its segment, never across segments
//     (free_block and try_merge_blocks: [Cache.FreeBlock]);
//   - a free block is split at the request, the rest a new free block, and
//     handed out through a table of live blocks (alloc_found_block:
//     [Cache.Take]; segment.Book's Release takes it back);
//   - a cached segment is a free block that is a whole segment
//     ([Cache.Whole]); release_cached_blocks hands each to the strategy to
//     give back ([Cache.ReleaseCached]), after which the skeleton forgets
//     it ([Cache.DropSegment]).
//
// What differs stays with each strategy: how a request is rounded, which
// free block it gets and whether the block is split (get_free_block and
// should_split: PyTorch's max_split_size rules, GMLake's 2 MiB chunks), how
// a segment is taken from the device and given back, its statistics, and
// what a block, a segment and a stream's pools record beyond the skeleton:
// the type parameters B, S and P of [Cache], kept beside the skeleton's own
// fields (PyTorch's garbage-collection ages and expandable segments,
// GMLake's chunks and stitched blocks).
//
// Costs. A [Cache] is plain data that the strategy's hot paths reach by
// direct calls, never through an interface: finding a stream's pools is
// O(streams), splitting, handing out and taking back a block O(1), freeing
// a block O(log n) for the n free blocks of its pool (a segment.Sorted),
// releasing the cache O(segments). Blocks live in one slice, referred to by
// int32 indexes, and records are reused, so nothing is allocated once the
// tables have grown to their peak.
package cachepool
