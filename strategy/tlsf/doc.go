// Package tlsf is a two-level segregated fit allocator over device segments:
// TLSF, from M. Masmano, I. Ripoll, A. Crespo and J. Real, "TLSF: a New
// Dynamic Memory Allocator for Real-Time Systems", ECRTS 2004. Alloc and Free
// take O(1) time, whatever the number of free blocks.
//
// # Policy
//
// A request of size bytes is rounded up to a multiple of round (512 bytes by
// default) and to at least min_block (512), as in package bestfit: see
// [Config.RoundSize]. Free blocks sit on segregated lists: a size s lies in
// first-level list fl = floor(log2 s), and the range [2^fl, 2^(fl+1)) is cut
// into 32 second-level lists of 2^(fl-5) bytes each. A bitmap of non-empty
// first-level lists and one of non-empty second-level lists per first level
// locate a list with a block in two bit scans.
//
// A request searches from the list after the one its size falls in (unless
// the size starts a list), so that the first block of the first non-empty
// list found always fits: a good fit, within 1/32 of the best, without
// searching a list. That block is split, the rest going back on the list
// of its size, so that every block's Size is exactly the rounded request.
// The price of good fit is that a free block in the request's own list that
// would fit is not found; the pool may then grow when a best-fit pool would
// not.
//
// Memory comes from the device in segments of at least chunk bytes (20 MiB,
// bestfit's default and PyTorch's large segment, so that the two strategies
// differ only in their index). A request larger than a chunk gets a segment
// of its own, rounded up to the start of the next list (at most 1/32 more),
// so that once free the segment serves the same request again. A freed block
// merges with the free blocks just before and after it in its segment,
// never with a block of another segment. Free never returns memory to the
// device. If the device is out of memory, the pool returns its entirely free
// segments to the device and asks again; if the device still refuses a
// segment larger than the block needed, it asks for just the block; if that
// fails, the request fails with [gpualloc.ErrOutOfMemory] and the pool
// stays usable. ReleaseAll returns every entirely free segment.
//
// # Costs
//
// Alloc is O(1): two bit scans to find a list, an unlink from its head, an
// insert of the rest of the split at the head of its list. Free is O(1):
// the block is found from its Handle through a table of live blocks, its
// neighbours through its own links, and merging with them is at most two
// unlinks and one insert. Blocks are records in one slice, linked by int32
// indexes and reused once freed: in steady state neither Alloc nor Free
// allocates. The index is two bitmaps and 64×32 list heads (8 KiB). A
// device call happens only when the pool grows or releases; releasing is
// O(segments). FreeSpace keeps the total as blocks change and finds
// the largest block in the highest non-empty list by scanning that list:
// O(k) for the k blocks it holds, which are within 1/32 of each other in
// size.
//
// # Registry
//
// The package registers the strategy "tlsf" with parameters round,
// min_block and chunk.
package tlsf
