// Package gmlake is GMLake's caching allocator (Guo et al., "GMLake:
// Efficient and Transparent GPU Memory Defragmentation for Large-scale DNN
// Training with Virtual Memory Stitching", ASPLOS'24), registered as
// "gmlake": PyTorch's caching allocator whose large pool is built of 2 MiB
// physical chunks mapped into virtual ranges, and which, when no free block
// is large enough, stitches the chunks of several free blocks into one new
// range instead of allocating.
//
// # Policy
//
// Rounding: a request is rounded up to 512 bytes; if that is more than
// 1 MiB (the large pool), up to 2 MiB ([RoundSize]). The small pool (up to
// 1 MiB) is PyTorch's, rule for rule: 2 MiB segments from Malloc, best fit
// on (size, address), the rest split off when at least 512 bytes remain,
// merged on free. Each stream has its own pools.
//
// The large pool holds primitive blocks (pBlocks): a segment is a reserved
// range with a 2 MiB chunk of physical memory created and mapped at each of
// its pages, 20 MiB for requests under 10 MiB, else the request; a pBlock
// is a run of a segment's chunks, split at the request (when 2 MiB or more
// remain) and merged with its free neighbours on free, as PyTorch's blocks
// are. A stitched block (sBlock) is a range of its own to which the chunks
// of several pBlocks are mapped, in order. A large request is served by the
// first of:
//
//  1. the best-fitting free pBlock of its stream (smallest, then lowest
//     address);
//  2. the smallest free sBlock of its stream that fits and is at most
//     reuse_limit (10) times the request: its first chunks serve it, and
//     the pBlocks that hold them are split at chunk boundaries into runs in
//     use and runs that stay free. An sBlock is free when it is not live
//     and all its chunks are free: a chunk handed out through another block
//     makes it wait;
//  3. stitching, if the request is at least frag_limit (512 MiB) and
//     defrag_level is 0: if the stream has at least two free pBlocks and
//     its largest, taken from the largest down, add up to the request, the
//     last one taken is split so that they add up exactly (when 2 MiB or
//     more would be left over), a range is reserved and their chunks are
//     mapped into it: no physical memory is created. When the sBlocks made
//     and not collected exceed auto_gc (1000 GiB), the sBlocks that are not
//     live are collected (unmapped and their ranges freed);
//  4. a new segment (each chunk one Create and one Map of the device);
//  5. if the device refuses: stitching as in 3 with defrag_level up to 1;
//     every free whole segment released (and the sBlocks mapping its chunks
//     collected, or, if live, unmapped from those chunks) and a new segment
//     again; stitching with defrag_level up to 2; else the request fails
//     with [gpualloc.ErrOutOfMemory].
//
// So a request below frag_limit is served exactly as PyTorch would serve it,
// but for the 2 MiB rounding and the sBlocks of step 2 (which it may reuse).
// Freeing an sBlock frees its chunks; each pBlock whose chunks are all free
// goes back to its pool, merged. Memory goes back to the device only on
// release ([Allocator.ReleaseAll], GMLake's emptyCache, also collects every
// sBlock that is not live). Reserved memory is physical memory: sBlocks add
// address space and mappings, not bytes.
//
// On a backend that is not a [gpualloc.VirtualMemory] (or whose granularity
// does not divide 2 MiB), large segments come from Malloc and nothing is
// stitched: glake with vmmDefragment=0, which is PyTorch with large requests
// rounded to 2 MiB.
//
// # Costs
//
// A hit on a pBlock costs what PyTorch's does, O(log n), plus, in a segment
// whose chunks are mapped into sBlocks, O(chunks of the block times the
// sBlocks mapping each). A stitch is O(blocks taken + chunks) and makes one
// Reserve and one Map per chunk; a new large segment one Create and one Map
// per 2 MiB. Freeing a large block is O(log n), plus O(chunks) in a segment
// with mappings. A release scans the segments and sBlocks.
//
// # Provenance
//
// The rules follow GMLake/src/CUDACachingAllocator.cpp in
// intelligent-machine-learning/glake (GMLake built on PyTorch 2.0's
// allocator): round_size (2 MiB rounding of large requests, kGranularity),
// should_split (2 MiB in the large pool), get_free_block (a pBlock first;
// then free_fused_blocks, refused beyond size*reuseLimit, with only the
// first size/kGranularity chunks put in use), get_fused_fragmented_blocks
// (large pool only, size >= fragLimit, at least two free blocks, taken from
// the largest down, the last one split when 2 MiB or more are left over; run
// at times 0, 1 and 2 of malloc, skipped below defragLevel), realloc_block
// (a VmmSegment of size/kGranularity chunks), update_block (freeing an
// sBlock's chunks, the pBlocks whose chunks are all free back to the pool;
// free and fragmented sBlocks), release_block and
// garbage_collect_fused_blocks (autoGC, in GB). The defaults (vmmDefragment
// 1, fragLimit 512 MiB, reuseLimit 10, defragLevel 0, autoGC 1000) are those
// of that file and of GMLake/docs/GMLake-tutorial.md; glake's README
// suggests fragLimit=1073741824 in its quick start, and its tutorial uses
// 256 MiB for a small model.
//
// Not modelled: CUDA stream events (a block is reusable as soon as it is
// freed), record_stream, CUDA graphs, PyTorch settings other than their
// defaults (max_split_size, roundup_power2_divisions, garbage collection,
// memory fraction), and glake's reAlloc option (stitch free blocks with a
// new segment for the rest; off by default). Collection runs at once where
// glake waits for the sBlock's last event.
package gmlake
