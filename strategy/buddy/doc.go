// Package buddy is a binary buddy allocator over arenas of device memory,
// the scheme of Knowlton (1965, "A fast storage allocator", CACM 8(10)) as
// Knuth describes it (The Art of Computer Programming, vol. 1, §2.5,
// Algorithms R and S).
//
// # Policy
//
// Every request is rounded up to a power of two, and to at least min_block
// (512 bytes by default): 1 byte takes 512, 513 take 1024, 100000 take
// 131072, 5,000,000 take 8 MiB (see [Config.RoundSize]). Memory comes from
// the device in arenas of arena bytes (1 GiB by default, a power of two); a
// request larger than that gets an arena of its own rounded size.
//
// When the device refuses an arena, the pool returns its entirely free
// arenas to the device and asks once more; if the device refuses again, it
// asks for an arena of half the size, then half that, down to the request's
// rounded size (an arena of exactly one block), and takes the first, and so
// the largest, that the device grants. Only when the device refuses even an
// arena of the block's own size does Alloc fail with
// [gpualloc.ErrOutOfMemory]; the pool stays usable after a failure. So a
// device smaller than one arena is used all the same: with 1 GiB arenas, a
// 512 MiB device gives one arena of 512 MiB, and a 768 MiB device one of
// 512 MiB, then one of 256 MiB. Nothing is remembered of a refusal: once the
// device has room again, the next new arena is a full one. A smaller arena
// bounds the blocks merged in it, as every arena does.
//
// Alloc takes the most recently freed (or split off) block of the smallest
// sufficient order (size) and, while it is larger than needed, splits it
// into two halves, the buddies, keeping the lower one and leaving the upper
// one free. Free merges a block with its buddy while the buddy is entirely
// free, so that free blocks are always as large as the buddy system allows;
// an arena whose blocks are all free is one free block again. The buddy of
// the block of size s at offset o is the one at o XOR s, offsets counted
// from the arena's base (a device may align an arena to no more than 512
// bytes, so device addresses are not used for this). Freed memory stays in
// the pool; [Pool.ReleaseAll] returns every entirely free arena to the
// device.
//
// # Compared with the other strategies
//
// Rounding to powers of two wastes up to half of a block (internal
// fragmentation: a request of 2^n + 1 bytes takes 2^(n+1)); on sizes spread
// evenly on a log scale the waste is about 28% of the allocated bytes, so
// the allocated peak, which is exactly the peak of the live requests each
// rounded up to its power of two, is about 1.4 times the requested peak.
// Outside blocks there is no waste beyond the buddy constraint: free space
// is always in the largest blocks that buddies allow, any of which serves
// any request no larger than itself, where MXNet's Naive and Round pools
// keep freed blocks for their own size class only. Two free neighbours that
// are not buddies are not merged, so a large request can still need a new
// arena while an arena holds enough free bytes in pieces. Best-fit
// strategies with splitting and coalescing (the bestfit strategy,
// TensorFlow's BFC, PyTorch's caching allocator) round far less and merge
// any free neighbours, at the price of searching by size; the buddy system
// trades that memory for simple, bounded work.
//
// # Costs
//
// Alloc and Free are O(log(arena/min_block)), arena being the size of the
// largest arena, and allocate nothing in steady state: finding the order to
// take from is one count of trailing zeros in a bit mask of the non-empty
// free lists; taking a block off its list, or a buddy off its list, is O(1)
// (intrusive doubly linked lists); only splitting and merging walk the
// orders, one step each. When a block of the right order is free and its
// buddy is live, Alloc and Free are O(1): three operations in four on the
// bundled traces, more than nine in ten on the random workload. A new arena
// adds one device allocation when the device grants it; a refusal adds a
// pass over the arenas to return the empty ones and at most
// log2(arena/block)+1 more device allocations, one for each size tried.
// [Pool.FreeSpace] is O(1), [Pool.ReleaseAll] O(arenas). Memory: a 40-byte
// record for each block, free, live or split (fewer than two per free or
// live block; records are kept for reuse at their peak number), and nothing
// per byte of arena.
//
// # Registry
//
// The package registers the strategy "buddy" with parameters min_block
// (default 512) and arena (default 1 GiB), both sizes in bytes or with a
// unit: "buddy:min_block=4KiB,arena=256MiB".
package buddy
