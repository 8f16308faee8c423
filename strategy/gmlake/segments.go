package gmlake

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/torchsize"
	"github.com/gpualloc/gpualloc/strategy/internal/cachepool"
)

// This file holds the segments: a Malloc of the small pool (or of the
// large pool without virtual memory), or a range of the large pool mapped
// to 2 MiB chunks of physical memory, which sBlocks map too.

// segChunks are what a segment records beyond the skeleton's
// cachepool.Segment: its chunks, mapped in order (nil for a Malloc), and
// the mappings of its chunks into sBlocks.
type segChunks struct {
	chunks []int32
	mapped int
}

// A chunk is 2 MiB of physical memory: one Create, mapped in its segment
// and in the sBlocks that stitch it.
type chunk struct {
	h     uint64
	owner int32   // the pBlock that holds it, kept while its segment has mappings
	used  bool    // in use by a live block, kept while it has mappings
	sb    []int32 // the sBlocks that map it
}

// newSegment makes a segment for a block of rounded bytes (realloc_block)
// and returns its one block, free and not in any pool; 0 when the device
// refuses. With virtual memory a large segment is a reserved range with a
// 2 MiB chunk created and mapped at each of its pages.
func (a *Allocator) newSegment(rounded int64, pi int32, small bool) (int32, error) {
	size := torchsize.AllocationSize(rounded)
	if small || a.vm == nil {
		addr, err := a.b.Malloc(size)
		if err != nil {
			return 0, cachepool.Refused(err)
		}
		a.countMalloc(size)
		return a.cache.AddSegment(addr, size, pi, small), nil
	}
	base, err := a.vm.Reserve(size)
	if err != nil {
		return 0, cachepool.Refused(err)
	}
	cs := make([]int32, 0, size/ChunkSize)
	for i := range size / ChunkSize {
		h, err := a.vm.Create(ChunkSize)
		if err == nil {
			a.countMalloc(ChunkSize)
			if err = a.vm.Map(base+uint64(i)*ChunkSize, h); err == nil {
				a.cache.M.CountMap()
				c := a.newChunk()
				a.chunks[c] = chunk{h: h}
				cs = append(cs, c)
				continue
			}
			if rerr := a.vm.Release(h); rerr == nil {
				a.cache.M.CountDeviceFree(ChunkSize)
			}
		}
		uerr := a.unmapRelease(base, cs)
		uerr = errors.Join(uerr, a.vm.Unreserve(base, size))
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			return 0, uerr
		}
		return 0, errors.Join(err, uerr)
	}
	n := a.cache.AddSegment(base, size, pi, false)
	a.cache.Segs[a.cache.Meta[n].Seg].X.chunks = cs
	return n, nil
}

// unmapRelease unmaps the chunks cs mapped from base and releases them.
func (a *Allocator) unmapRelease(base uint64, cs []int32) error {
	var errs []error
	for i, c := range cs {
		if err := a.vm.Unmap(base+uint64(i)*ChunkSize, ChunkSize); err != nil {
			errs = append(errs, err)
			continue
		}
		a.cache.M.CountUnmap()
		if err := a.vm.Release(a.chunks[c].h); err != nil {
			errs = append(errs, err)
			continue
		}
		a.cache.M.CountDeviceFree(ChunkSize)
		a.recycleChunk(c)
	}
	return errors.Join(errs...)
}

func (a *Allocator) countMalloc(size int64) {
	a.devAlloc++
	a.cache.M.CountDeviceMalloc(size)
}

// releaseCached returns every free whole segment of both pools to the
// device (release_cached_blocks). A segment the device refuses to free
// stays, and the errors are joined in the one returned.
func (a *Allocator) releaseCached() error { return a.cache.ReleaseCached(a.releaseSegment) }

// releaseSegment returns to the device the segment of the free block n, a
// whole segment in its pool (release_block). The sBlocks that map its
// chunks are collected, or, if live (the chunk lies past their block),
// lose the chunk and are collected when freed.
func (a *Allocator) releaseSegment(n int32) error {
	s := &a.cache.Segs[a.cache.Meta[n].Seg]
	var errs []error
	if s.X.chunks == nil {
		if err := a.b.Free(s.Addr, s.Size); err != nil {
			return err
		}
		a.cache.M.CountDeviceFree(s.Size)
	} else {
		for _, c := range s.X.chunks {
			for len(a.chunks[c].sb) > 0 {
				o := a.chunks[c].sb[0]
				if !a.sb[o].live {
					if err := a.collectOne(o); err != nil {
						return err
					}
					continue
				}
				if err := a.dropChunk(o, c); err != nil {
					return err
				}
			}
		}
		if err := a.unmapRelease(s.Addr, s.X.chunks); err != nil {
			return err
		}
		if err := a.vm.Unreserve(s.Addr, s.Size); err != nil {
			errs = append(errs, err)
		}
	}
	a.cache.DropSegment(n)
	return errors.Join(errs...)
}

// chunkRange returns the chunks of pBlock n: indexes into its segment's.
func (a *Allocator) chunkRange(n int32) (s *cachepool.Segment[segChunks], first, last int) {
	s = &a.cache.Segs[a.cache.Meta[n].Seg]
	first = int((a.cache.Nodes[n].Addr - s.Addr) / ChunkSize)
	return s, first, first + int(a.cache.Nodes[n].Size/ChunkSize)
}

// hasMappings reports whether block n is a pBlock whose segment has
// mappings into sBlocks: whether its chunks' owner and use are kept.
func (a *Allocator) hasMappings(n int32) bool {
	mt := &a.cache.Meta[n]
	return !mt.Small && a.cache.Segs[mt.Seg].X.mapped != 0
}

// mappedChunks returns the chunks of block n if hasMappings, else nil.
func (a *Allocator) mappedChunks(n int32) []int32 {
	if !a.hasMappings(n) {
		return nil
	}
	s, first, last := a.chunkRange(n)
	return s.X.chunks[first:last]
}

// setOwner records n as the owner of its chunks, while its segment has
// mappings into sBlocks.
func (a *Allocator) setOwner(n int32) {
	for _, c := range a.mappedChunks(n) {
		a.chunks[c].owner = n
	}
}

// markChunks marks the chunks of pBlock n used or free, while its segment
// has mappings, and updates the sBlocks that map them.
func (a *Allocator) markChunks(n int32, used bool) {
	for _, c := range a.mappedChunks(n) {
		a.markChunk(c, used, 0)
	}
}

// chunksFree reports whether every chunk of pBlock p is free.
func (a *Allocator) chunksFree(p int32) bool {
	s, first, last := a.chunkRange(p)
	for _, c := range s.X.chunks[first:last] {
		if a.chunks[c].used {
			return false
		}
	}
	return true
}

// dropChunk unmaps chunk c from the live sBlock o, which maps it past its
// block, and dooms o.
func (a *Allocator) dropChunk(o, c int32) error {
	s := &a.sb[o]
	for i, x := range s.chunks {
		if x != c {
			continue
		}
		if err := a.vm.Unmap(a.sbNodes[o].Addr+uint64(i)*ChunkSize, ChunkSize); err != nil {
			return err
		}
		a.cache.M.CountUnmap()
		a.unlinkChunk(c, o)
		s.chunks[i] = -1
		s.freeN--
		s.doomed = true
		return nil
	}
	return fmt.Errorf("%s: internal error: chunk %d not in sBlock %d", name, c, o)
}

func (a *Allocator) newChunk() int32 {
	if k := len(a.spareChunks); k > 0 {
		c := a.spareChunks[k-1]
		a.spareChunks = a.spareChunks[:k-1]
		return c
	}
	a.chunks = append(a.chunks, chunk{})
	return int32(len(a.chunks) - 1)
}

func (a *Allocator) recycleChunk(c int32) {
	a.chunks[c] = chunk{}
	a.spareChunks = append(a.spareChunks, c)
}
