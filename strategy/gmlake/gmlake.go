package gmlake

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/torchsize"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
	"github.com/gpualloc/gpualloc/strategy/internal/cachepool"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "gmlake"

// An Allocator is GMLake's caching allocator. It implements
// [gpualloc.Allocator], [gpualloc.StreamAllocator],
// [gpualloc.StatsReporter], [gpualloc.Releaser], [gpualloc.Specer] and
// [gpualloc.FreeSpaceReporter]. It is not safe for concurrent use.
type Allocator struct {
	b    gpualloc.Backend
	vm   gpualloc.VirtualMemory // nil: no stitching, large segments from Malloc
	c    Config
	spec string

	// cache holds pBlocks and small blocks, segments, each stream's pools
	// and the live blocks (node > 0, -sBlock < 0): PyTorch's pool
	// skeleton.
	cache cachepool.Cache[ext, segChunks, fusedSet]

	chunks      []chunk // physical chunks of the large segments
	spareChunks []int32

	sb      []sblock       // stitched blocks; sb[0] is unused
	sbNodes []segment.Node // their index nodes (Addr, Size, Requested)
	spareSB []int32

	devAlloc int64 // device allocations so far (Malloc and Create)
	fused    int64 // bytes of stitched blocks made and not collected (total_fuse_size)
}

// ext is what a block records beyond the skeleton's cachepool.Meta.
type ext struct {
	lent bool // a pBlock whose chunks a live sBlock uses
}

// fusedSet is what a stream's pools hold beside free pBlocks and small
// blocks: its reusable sBlocks, ordered by (size, address) over sbNodes.
type fusedSet struct {
	fused segment.Sorted
}

// New returns an allocator that takes its memory from b with configuration
// c. On a b that is a [gpualloc.VirtualMemory] whose granularity divides
// 2 MiB, large segments are made of 2 MiB chunks and stitched; on any other
// b they come from Malloc and nothing is stitched (glake's vmmDefragment=0).
// A setting out of range is an error that names it and wraps a
// [*gpualloc.ParamError].
func New(b gpualloc.Backend, c Config) (*Allocator, error) {
	if b == nil {
		return nil, errors.New(name + ": nil Backend")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	a := &Allocator{b: b, c: c, spec: c.spec(),
		sb: make([]sblock, 1, 8), sbNodes: make([]segment.Node, 1, 8)}
	a.cache.Init(name)
	if vm, ok := b.(gpualloc.VirtualMemory); ok {
		if g := vm.Granularity(); g > 0 && ChunkSize%g == 0 {
			a.vm = vm
		}
	}
	return a, nil
}

// Config returns the allocator's configuration.
func (a *Allocator) Config() Config { return a.c }

// Stitching reports whether the allocator stitches: whether its backend
// has virtual memory.
func (a *Allocator) Stitching() bool { return a.vm != nil }

// Spec returns the allocator's full spec, every setting with its value.
func (a *Allocator) Spec() string { return a.spec }

// Stats returns the allocator's counters.
func (a *Allocator) Stats() gpualloc.Stats { return a.cache.M.Stats() }

// Alloc is AllocStream on stream 0.
func (a *Allocator) Alloc(size int64) (gpualloc.Block, error) { return a.AllocStream(size, 0) }

// AllocStream returns a block for a request of size bytes on stream, as
// GMLake's DeviceCachingAllocator::malloc does; see the package
// documentation for the order of its steps. A failure wraps
// [gpualloc.ErrOutOfMemory]; the allocator stays usable.
func (a *Allocator) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, a.cache.ErrInvalidSize(size)
	}
	rounded := RoundSize(size)
	if rounded == 0 {
		return gpualloc.Block{}, a.cache.ErrTooLarge(size)
	}
	small := rounded <= torchsize.SmallSize
	pi := a.cache.PoolIndex(stream)
	set := a.cache.Set(pi, small)
	before := a.devAlloc
	// get_free_block: the best free block of the pool, else (large pool) a
	// reusable sBlock within the reuse limit.
	if n := set.TakeBest(a.cache.Nodes, rounded); n != 0 {
		return a.handOut(n, rounded, size, stream, before), nil
	}
	if !small {
		if s := a.reuseFused(pi, rounded); s != 0 {
			return a.handOutFused(s, size, stream, before), nil
		}
	}
	// get_fused_fragmented_blocks(0), realloc_block,
	// get_fused_fragmented_blocks(1), release_cached_blocks and
	// realloc_block, get_fused_fragmented_blocks(2).
	for step := 0; ; step++ {
		var n, s int32
		var err error
		switch step {
		case 0, 2, 4:
			if !small {
				s, err = a.stitch(pi, rounded, step/2)
			}
		case 1:
			n, err = a.newSegment(rounded, pi, small)
		case 3:
			if err = a.releaseCached(); err == nil {
				a.cache.M.CountRetry()
				n, err = a.newSegment(rounded, pi, small)
			}
		default:
			a.cache.M.CountOOM()
			return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes (%d rounded): segment of %d bytes: %w",
				name, size, rounded, torchsize.AllocationSize(rounded), gpualloc.ErrOutOfMemory)
		}
		switch {
		case err != nil:
			return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes (%d rounded): %w", name, size, rounded, err)
		case s != 0:
			return a.handOutFused(s, size, stream, before), nil
		case n != 0:
			return a.handOut(n, rounded, size, stream, before), nil
		}
	}
}

// handOut hands out the free block n, out of its pool, for a request of
// requested bytes rounded to rounded: the rest is split off as a free block
// when at least 512 bytes (small pool) or 2 MiB (large pool, kGranularity)
// remain (should_split).
func (a *Allocator) handOut(n int32, rounded, requested int64, stream uint64, before int64) gpualloc.Block {
	small := a.cache.Meta[n].Small
	rest := a.cache.Nodes[n].Size - rounded
	split := (small && rest >= torchsize.MinBlockSize) || (!small && rest >= ChunkSize)
	addr, size, handle, r := a.cache.Take(n, rounded, requested, split, a.devAlloc == before)
	mapped := a.hasMappings(n) // else setOwner and markChunks do nothing
	if r != 0 {
		if mapped {
			a.setOwner(r)
		}
		a.cache.Set(a.cache.Meta[n].Pool, small).Insert(a.cache.Nodes, r)
	}
	if mapped {
		a.markChunks(n, true)
	}
	return gpualloc.Block{Addr: addr, Size: size, Requested: requested, Stream: stream, Handle: handle}
}

// split cuts block n at size bytes and returns the new block after it,
// with n's meta, free and in no pool.
func (a *Allocator) split(n int32, size int64) int32 {
	r := a.cache.Split(n, size)
	a.setOwner(r)
	return r
}

// Free returns a live block. A pBlock or small block goes back to its
// pool, merged with the free blocks just before and after it in its
// segment; an sBlock's chunks are freed, the pBlocks that held them go back
// to their pool once all their chunks are free, and the sBlock itself
// becomes reusable if all its chunks are free (else it waits, fragmented,
// for them or for collection). No memory goes back to the device. A block
// that is not live, or whose Size or Requested differ from what Alloc
// returned, gives an error wrapping [gpualloc.ErrInvalidFree] and changes
// nothing.
func (a *Allocator) Free(b gpualloc.Block) error {
	if p := a.cache.Live.Get(b.Handle, b.Addr); p != nil && *p < 0 {
		o := -*p
		size, req := int64(a.sb[o].used)*ChunkSize, a.sbNodes[o].Requested
		if size != b.Size || req != b.Requested {
			return blocktable.Mismatch(name, b, size, req)
		}
		a.cache.Live.Delete(b.Handle)
		a.cache.M.CountFree(req, size)
		return a.freeFused(o)
	}
	n, err := a.cache.Release(b)
	if err != nil {
		return err
	}
	mapped := a.hasMappings(n) // else markChunks and setOwner do nothing
	if mapped {
		a.markChunks(n, false)
	}
	n, _ = a.cache.FreeBlock(n) // a block handed out is not lent
	if mapped {
		a.setOwner(n)
	}
	return nil
}

// release makes block n free, merged with its free neighbours, in its pool
// (free_block).
func (a *Allocator) release(n int32) {
	a.cache.Meta[n].X.lent = false
	n, _ = a.cache.FreeBlock(n)
	a.setOwner(n)
}

// ReleaseAll returns every free whole segment to the device and collects
// every sBlock that is not live, as GMLake's emptyCache does. Live blocks
// and the segments that hold them stay.
func (a *Allocator) ReleaseAll() error {
	err := a.releaseCached()
	if a.vm != nil {
		err = errors.Join(err, a.collect())
	}
	if err != nil {
		return fmt.Errorf("%s: release: %w", name, err)
	}
	return nil
}

// FreeSpace returns the largest free block (a free pBlock, small block or
// reusable sBlock) and the bytes of free pBlocks and small blocks; an
// sBlock's bytes are those of its pBlocks.
func (a *Allocator) FreeSpace() (largest, total int64) {
	largest, total = a.cache.FreeSpace()
	for _, p := range a.cache.Streams {
		if o := p.X.fused.Max(a.sbNodes); o != 0 {
			largest = max(largest, a.sbNodes[o].Size)
		}
	}
	return largest, total
}
