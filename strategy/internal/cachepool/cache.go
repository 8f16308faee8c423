package cachepool

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// A Meta is what a block records beside its segment.Node: its pools and
// its segment, and X, what the strategy adds.
type Meta[B any] struct {
	Pool  int32 // index in Cache.Streams
	Seg   int32 // index in Cache.Segs, or in a table of the strategy's own
	Small bool  // of the small pool
	X     B
}

// A Segment is one device allocation, tiled by blocks, and X, what the
// strategy adds. A zero Size marks an unused slot of Cache.Segs.
type Segment[S any] struct {
	Addr  uint64
	Size  int64
	First int32 // the block at Addr; it stays that block while the segment lives
	Small bool  // of the small pool
	X     S
}

// A Stream is a stream's two pools of free blocks, each ordered by (size,
// address): PyTorch's small and large BlockPool, whose blocks are ordered by
// (stream, size, address), cut by stream, which finds the same blocks. X is
// what the strategy adds.
type Stream[P any] struct {
	Stream       uint64
	Small, Large segment.Sorted
	X            P
}

// Set returns the small or the large pool.
func (s *Stream[P]) Set(small bool) *segment.Sorted {
	if small {
		return &s.Small
	}
	return &s.Large
}

// A Cache is the skeleton's state: blocks, segments, each stream's pools
// and the live blocks, with B, S and P what the strategy adds to a block,
// a segment and a stream's pools. The zero Cache is not ready: call
// [Cache.Init]. A Cache is not safe for concurrent use.
type Cache[B, S, P any] struct {
	// Book's Nodes holds every block, and its Live table the node of each
	// live block by Handle (where a strategy may also record what it hands
	// out by other means). Nodes may be replaced by any call that adds a
	// block (NewNode, AddSegment, Split, Take): reload it after one.
	segment.Book
	// Meta[n] is what block n records beside Nodes[n].
	Meta  []Meta[B]
	spare []int32 // unused indexes of Nodes

	// Segs are the segments, Meta[n].Seg indexing them.
	Segs      []Segment[S]
	spareSegs []int32

	// Streams are the pools of each stream, in the order of first use,
	// Meta[n].Pool indexing them.
	Streams []*Stream[P]

	// FreeBytes are the bytes of free blocks, kept by the skeleton for
	// the blocks it frees, hands out, adds and drops, and by the
	// strategy for any it makes or takes otherwise.
	FreeBytes int64
}

// Init makes c an empty cache of the strategy name.
func (c *Cache[B, S, P]) Init(name string) {
	*c = Cache[B, S, P]{Book: segment.Book{Nodes: make([]segment.Node, 1, 64), Name: name}, Meta: make([]Meta[B], 1, 64)}
}

// PoolIndex returns the index in Streams of stream's pools, made on first
// use, in O(streams).
func (c *Cache[B, S, P]) PoolIndex(stream uint64) int32 {
	for i, p := range c.Streams {
		if p.Stream == stream {
			return int32(i)
		}
	}
	c.Streams = append(c.Streams, &Stream[P]{Stream: stream})
	return int32(len(c.Streams) - 1)
}

// Set returns the small or the large pool of Streams[pi].
func (c *Cache[B, S, P]) Set(pi int32, small bool) *segment.Sorted { return c.Streams[pi].Set(small) }

// ErrInvalidSize returns the error of an Alloc of size < 1 bytes.
func (c *Cache[B, S, P]) ErrInvalidSize(size int64) error {
	return fmt.Errorf("%s: alloc of %d bytes: %w", c.Name, size, gpualloc.ErrInvalidSize)
}

// ErrTooLarge returns the error of an Alloc of size bytes whose rounded
// size, or its segment's, overflows, and counts it as out of memory.
func (c *Cache[B, S, P]) ErrTooLarge(size int64) error {
	c.M.CountOOM()
	return fmt.Errorf("%s: alloc of %d bytes: rounded size overflows: %w", c.Name, size, gpualloc.ErrOutOfMemory)
}

// Refused returns nil for err when it is the device refusing memory
// ([gpualloc.ErrOutOfMemory]), which the caching allocators answer by
// freeing cached segments and trying again, and err itself otherwise: the
// error a device allocation gives back to the caller.
func Refused(err error) error {
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		return nil
	}
	return err
}

// AddSegment records a segment of size bytes at addr, held from the device
// for pool pi's small or large pool, and returns its one block: free,
// counted in FreeBytes, in no pool. The segment is Segs[Meta[n].Seg],
// whose X is zero for the caller to set.
func (c *Cache[B, S, P]) AddSegment(addr uint64, size int64, pi int32, small bool) int32 {
	c.FreeBytes += size
	n := c.NewNode()
	c.Nodes[n] = segment.Node{Addr: addr, Size: size, Free: true}
	s := Segment[S]{Addr: addr, Size: size, First: n, Small: small}
	si := blocktable.Slot(&c.Segs, &c.spareSegs)
	c.Segs[si] = s
	c.Meta[n] = Meta[B]{Pool: pi, Seg: si, Small: small}
	return n
}

// DropSegment forgets the segment whose one block is n, free, whole and in
// its pool, once the strategy has given it back to the device (the end of
// release_block): n leaves its pool and FreeBytes.
func (c *Cache[B, S, P]) DropSegment(n int32) {
	mt := c.Meta[n]
	size := c.Segs[mt.Seg].Size
	c.Set(mt.Pool, mt.Small).Remove(c.Nodes, n)
	c.Recycle(n)
	c.Segs[mt.Seg] = Segment[S]{}
	c.spareSegs = append(c.spareSegs, mt.Seg)
	c.FreeBytes -= size
}

// Split cuts the free block n, out of its pool, at size bytes and returns
// the new block of the rest, after n in its segment, with n's Meta: free
// and in no pool, as [Cache.Take] splits.
func (c *Cache[B, S, P]) Split(n int32, size int64) int32 {
	r := c.NewNode()
	segment.SplitAt(c.Nodes, n, r, size)
	c.Meta[r] = c.Meta[n]
	return r
}

// Take hands out the free block n, out of its pool, for a request of
// requested bytes, first splitting it at rounded bytes if split
// (alloc_found_block): the rest is a new free block after n in its
// segment, with n's Meta, which Take returns for the caller to put in its
// pool (else 0). n becomes live, leaves FreeBytes and counts as an
// allocation, served from the cache if hit. Take returns the block's
// address, size and Handle: scalars, as a struct result would be copied
// at every level of the hot path.
func (c *Cache[B, S, P]) Take(n int32, rounded, requested int64, split, hit bool) (addr uint64, size int64, handle uint64, rest int32) {
	if split {
		rest = c.Split(n, rounded)
	}
	addr, size, handle = c.Hand(n, requested, hit)
	c.FreeBytes -= size
	return addr, size, handle, rest
}

// FreeBlock makes block n free (free_block): counted in FreeBytes, merged
// with the free blocks just before and after it in its segment
// (try_merge_blocks), which leave their pool first, and put in its pool. A
// live block comes here once Book's Release has taken it back. It returns the block that
// holds n's bytes then, and the bytes of the neighbours merged into it;
// the records of those neighbours, n's among them when it merges into the
// block before it, are recycled.
func (c *Cache[B, S, P]) FreeBlock(n int32) (int32, int64) {
	nodes := c.Nodes
	nd := &nodes[n]
	nd.Free = true
	c.FreeBytes += nd.Size
	set := c.Set(c.Meta[n].Pool, c.Meta[n].Small)
	var subsumed int64
	if prev := nd.Prev; prev != 0 && nodes[prev].Free {
		set.Remove(nodes, prev)
		subsumed += nodes[prev].Size
		c.MergeNext(prev)
		n = prev
	}
	if next := nodes[n].Next; next != 0 && nodes[next].Free {
		set.Remove(nodes, next)
		subsumed += nodes[next].Size
		c.MergeNext(n)
	}
	set.Insert(nodes, n)
	return n, subsumed
}

// MergeNext merges into block n the block after it in its segment, which
// must be out of any pool and list, and recycles that block's record.
func (c *Cache[B, S, P]) MergeNext(n int32) { c.Recycle(segment.MergeNext(c.Nodes, n)) }

// Whole reports whether block n is free and a whole segment: a cached
// segment.
func (c *Cache[B, S, P]) Whole(n int32) bool {
	nd := &c.Nodes[n]
	return nd.Free && nd.Prev == 0 && nd.Next == 0
}

// ReleaseCached calls release with the one block of every cached segment,
// in the order of Segs, for the strategy to give it back to the device
// and drop it (release_cached_blocks). A segment whose release fails
// stays, and the errors are joined in the one returned.
func (c *Cache[B, S, P]) ReleaseCached(release func(n int32) error) error {
	var errs []error
	for i := range c.Segs {
		s := &c.Segs[i]
		if s.Size != 0 && c.Whole(s.First) {
			if err := release(s.First); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// FreeSpace returns the largest free block of every stream's pools and
// FreeBytes: the total in O(1), the largest in O(log n) per pool.
func (c *Cache[B, S, P]) FreeSpace() (largest, total int64) {
	for _, p := range c.Streams {
		if n := p.Small.Max(c.Nodes); n != 0 {
			largest = max(largest, c.Nodes[n].Size)
		}
		if n := p.Large.Max(c.Nodes); n != 0 {
			largest = max(largest, c.Nodes[n].Size)
		}
	}
	return largest, c.FreeBytes
}

// NewNode returns the index of a new block, its node and Meta zero,
// reusing a recycled record if there is one.
func (c *Cache[B, S, P]) NewNode() int32 {
	n := segment.NewNode(&c.Nodes, &c.spare)
	if int(n) == len(c.Meta) {
		c.Meta = append(c.Meta, Meta[B]{})
	}
	return n
}

// Recycle zeroes block n, no longer used, and keeps its record for reuse.
func (c *Cache[B, S, P]) Recycle(n int32) {
	c.Meta[n] = Meta[B]{}
	segment.RecycleNode(c.Nodes, &c.spare, n)
}
