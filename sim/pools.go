package sim

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// Private pools during the trace.
//
// With Config.PrivatePools, a strategy that is a PoolAllocator (the
// pytorch strategy) serves the private pools itself: the start state's segments of private pools are
// restored into their pools as the others are (see restoreState), the
// trace's allocations in private pools (traces.Start.Private) ask it for
// a block of their pool (traces.Start.PrivatePools), and each
// segment_free of a pool's segment that the trace records
// (traces.Start.PoolSegments) releases the pool (PoolAllocator's
// ReleasePool; again, should the pool have served blocks since): PyTorch
// frees a private pool's segments only once the pool is released. The trace's segment_alloc of a private pool's
// segment is the strategy's to make again, or not.
//
// Otherwise the engine holds the segments of private pools
// itself (see holdPrivate): those of the start state, and those that the
// trace allocates or frees, which the trace's traces.Start (the reader of
// a PyTorch snapshot's) names in PoolSegments. Before the event at which
// such an action happens, the engine takes the segment's memory from the
// device (a device allocation of the replay, counted as any other) or
// gives it back; the strategy never sees that memory, so no default-pool
// request is served from it, and the allocations of private pools are
// served from it, never by the strategy, while the device holds a private
// segment.

// A PoolAllocator is an allocator that can serve private pools (a CUDA
// graph's, a torch.cuda.MemPool's) itself, each from its own free blocks
// and segments, as PyTorch's caching allocator does: AllocPool serves a
// request in pool, and ReleasePool releases the pool, whose cached
// segments then go back to the device (at once, and at later releases of
// the cache for the blocks still live). A pool never used holds nothing
// to release. The block that AllocPool returns is freed by the
// allocator's Free. The engine has it serve a trace's private pools when
// Config.PrivatePools says so: a replay that holds them as recorded keeps
// the recorded figures whatever the rules.
type PoolAllocator interface {
	AllocPool(size int64, stream uint64, pool snapshot.PoolID) (gpualloc.Block, error)
	ReleasePool(pool snapshot.PoolID) error
}

// A heldSeg is a private pool's segment that the engine holds: where the
// device put it, and its bytes.
type heldSeg struct {
	addr uint64
	size int64
}

// poolSegments takes or gives back the private pools' segments whose
// actions come before event n.
func (e *engine) poolSegments(n int64) error {
	p := e.plan
	for p.nextSeg < len(p.poolSegs) && p.poolSegs[p.nextSeg].Event <= n {
		ps := p.poolSegs[p.nextSeg]
		p.nextSeg++
		d, err := e.device(int32(ps.Device))
		if err != nil {
			return err
		}
		if d.pooled != nil {
			if !ps.Free {
				continue // the strategy allocates the pool's segments
			}
			if err := d.pooled.ReleasePool(ps.Pool); err != nil {
				return fmt.Errorf("device %d: segment_free of the segment at %#x of private pool %v: %w", ps.Device, ps.Addr, ps.Pool, err)
			}
			continue
		}
		if ps.Free {
			hs, ok := d.pools[ps.Addr]
			if !ok {
				continue // a segment the engine does not hold: nothing to give back
			}
			if err := d.given.Free(hs.addr, hs.size); err != nil {
				return fmt.Errorf("device %d: segment_free of the segment at %#x of private pool %v: %w", ps.Device, ps.Addr, ps.Pool, err)
			}
			delete(d.pools, ps.Addr)
			d.heldSegs--
			continue
		}
		addr, err := d.given.Malloc(ps.Size)
		if err != nil {
			return fmt.Errorf("device %d: segment_alloc of %d bytes at %#x for private pool %v: %w", ps.Device, ps.Size, ps.Addr, ps.Pool, err)
		}
		d.holdSeg(ps.Addr, addr, ps.Size)
	}
	return nil
}

// holdSeg notes a private pool's segment, recorded at rec, that the
// engine holds at addr.
func (d *device) holdSeg(rec, addr uint64, size int64) {
	if d.pools == nil {
		d.pools = map[uint64]heldSeg{}
	}
	d.pools[rec] = heldSeg{addr, size}
	d.heldSegs++
}
