package pytorch

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/pytorch/snapshot"
)

// Restore makes the allocator hold segment s of a PyTorch snapshot (such as
// one of [snapshot.Snapshot.InitialState]) as if it had allocated it from
// its backend (the backend is NOT called; Free of the segment later calls
// backend.Free(addr, size) as usual). It returns the live blocks, in
// address order, for the caller to free later.
//
// The blocks of s must be in address order, each starting where the one
// before ends, and cover it; a block is live when [snapshot.Block.Live].
// The segment belongs to the small pool of stream s.Stream if it is 2 MiB
// or smaller, else to the large pool, as PyTorch's segment sizes imply
// (s.SegmentType and s.Device are not read); its free blocks enter the pool
// as if just freed. In [gpualloc.Stats] the segment counts as a
// device allocation and each live block as an allocation served from the
// cache, so that the counters add up; in [MemoryStats] it adds to the byte
// counts but not to NumDeviceAlloc. A live block with RequestedSize below
// 1 is taken to have asked for its whole Size. Restoring an expandable
// segment is not supported yet (an error).
func (a *Allocator) Restore(s snapshot.Segment) ([]gpualloc.Block, error) {
	fail := func(format string, args ...any) ([]gpualloc.Block, error) {
		return nil, fmt.Errorf("%s: restore of segment %#x (%d bytes): %s", name, s.Address, s.TotalSize, fmt.Sprintf(format, args...))
	}
	if s.IsExpandable {
		return fail("expandable segments are not supported")
	}
	if s.TotalSize < 1 || len(s.Blocks) == 0 {
		return fail("empty segment")
	}
	var sum int64
	for i, b := range s.Blocks {
		if b.Size < 1 || b.Size%minBlockSize != 0 {
			return fail("block %d has size %d, not a positive multiple of %d", i, b.Size, minBlockSize)
		}
		if b.Address != s.Address+uint64(sum) {
			return fail("block %d is at %#x, not at %#x", i, b.Address, s.Address+uint64(sum))
		}
		if b.Live() && b.RequestedSize > b.Size {
			return fail("block %d requested %d bytes, more than its %d", i, b.RequestedSize, b.Size)
		}
		sum += b.Size
	}
	if sum != s.TotalSize {
		return fail("blocks cover %d bytes", sum)
	}
	end := s.Address + uint64(s.TotalSize)
	for i := range a.segs {
		o := &a.segs[i]
		if o.size != 0 && s.Address < o.addr+uint64(o.size) && o.addr < end {
			return nil, errors.New(name + ": restore: " + fmt.Sprintf("segment %#x (%d bytes) overlaps segment %#x (%d bytes)", s.Address, s.TotalSize, o.addr, o.size))
		}
	}
	small := s.TotalSize <= smallBuffer
	pi := a.poolIndex(s.Stream)
	set := a.pools[pi].set(small)
	k := kind(small)
	a.m.CountDeviceMalloc(s.TotalSize)
	first := a.addSegment(s.Address, s.TotalSize, pi, small)
	split := len(s.Blocks) > 1
	var live []gpualloc.Block
	addr, n := s.Address, first
	for i, b := range s.Blocks {
		if i > 0 {
			prev := n
			n = a.newNode()
			a.nodes[prev].Next = n
			a.nodes[n].Prev = prev
			a.meta[n] = a.meta[first]
		}
		nd := &a.nodes[n]
		nd.Addr, nd.Size, nd.Free = addr, b.Size, true
		a.meta[n].gcBase = a.gcCount[k]
		addr += uint64(b.Size)
	}
	// Hand out the live blocks, index the free ones.
	i := 0
	for n := first; n != 0; n = a.nodes[n].Next {
		b := s.Blocks[i]
		i++
		nd := &a.nodes[n]
		if !b.Live() {
			set.Insert(a.nodes, n)
			if split {
				a.ms.InactiveSplitBytes.add(nd.Size)
			}
			continue
		}
		req := b.RequestedSize
		if req < 1 {
			req = b.Size
		}
		nd.Free = false
		nd.Requested = req
		a.free -= nd.Size
		h := a.live.Put(nd.Addr, n)
		a.m.CountAlloc(req, nd.Size, true)
		a.ms.AllocatedBytes.add(nd.Size)
		a.ms.ActiveBytes.add(nd.Size)
		a.ms.RequestedBytes.add(req)
		live = append(live, gpualloc.Block{Addr: nd.Addr, Size: nd.Size, Requested: req, Stream: s.Stream, Handle: h})
	}
	return live, nil
}
