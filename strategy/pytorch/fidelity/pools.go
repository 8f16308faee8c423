package fidelity

import (
	"github.com/gpualloc/gpualloc/snapshot"
)

// Private pools.
//
// A CUDA graph's or a torch.cuda.MemPool's segments (snapshot.PoolID) are
// no decision of the default pools that the model replays: PyTorch never
// serves a request of the default pools from them. The replay holds them
// apart, as a replay of the snapshot does (package sim, from what package
// traces' reader tells of them): the device holds their memory, the
// allocations that lie in them take the recorded address without the
// model, and their segment_alloc and segment_free entries take and give
// back device memory. Which entries those are is told as the reader tells
// it (see pools).

// A pools says which entries of a device's trace are private pools': the
// alloc entries whose address lies in a private pool's segment (of the
// snapshot's segments or of the state the trace starts from), and the
// segment_alloc and segment_free entries of such segments. Both replays
// of the device read it.
type pools struct {
	allocs map[int]bool // by entry index in the replayed trace
	segs   map[int]bool
	// addrs are the addresses of the private pools' segments: a state
	// that a Tracker rebuilds names the pool only of those that the
	// snapshot shows.
	addrs map[uint64]bool
}

// private reports whether sg, a segment of a state of the device, is a
// private pool's.
func (p *pools) private(sg *snapshot.Segment) bool {
	return p != nil && (sg.Pool.Private() || p.addrs[sg.Address])
}

// poolsOf returns the private pools' entries of trace t of device dev of
// s, which starts from st: nil when no segment is a private pool's. A
// segment_alloc is a private pool's when the snapshot still holds a
// private pool's segment at that address and no later segment_free of that
// address follows; a segment_free, when the segment freed is a private
// pool's by that rule or by the state the trace starts from. Expandable
// segments' maps are not followed.
func poolsOf(s *snapshot.Snapshot, dev int, st *snapshot.State, t snapshot.Trace) *pools {
	type span struct{ addr, end uint64 }
	var spans []span
	final := map[uint64]bool{}
	held := map[uint64]bool{}
	for _, sg := range s.Segments {
		if sg.Device == dev && sg.Pool.Private() {
			spans = append(spans, span{sg.Address, sg.Address + uint64(sg.TotalSize)})
			final[sg.Address] = !sg.IsExpandable
		}
	}
	for _, sg := range st.Segments {
		if sg.Pool.Private() {
			spans = append(spans, span{sg.Address, sg.Address + uint64(sg.TotalSize)})
			held[sg.Address] = !sg.IsExpandable
		}
	}
	if len(spans) == 0 {
		return nil
	}
	p := &pools{allocs: map[int]bool{}, segs: map[int]bool{}, addrs: map[uint64]bool{}}
	for a := range final {
		p.addrs[a] = true
	}
	for a := range held {
		p.addrs[a] = true
	}
	freedLater := map[uint64]int{}
	for i := range t.Len() {
		if t.Action(i) == snapshot.SegmentFree {
			freedLater[t.At(i).Addr] = i
		}
	}
	for i := range t.Len() {
		switch t.Action(i) {
		case snapshot.Alloc:
			a := t.At(i).Addr
			for _, sp := range spans {
				if sp.addr <= a && a < sp.end {
					p.allocs[i] = true
					break
				}
			}
		case snapshot.SegmentAlloc:
			a := t.At(i).Addr
			if last, freed := freedLater[a]; final[a] && (!freed || last <= i) {
				p.segs[i], held[a] = true, true
			}
		case snapshot.SegmentFree:
			a := t.At(i).Addr
			if held[a] {
				p.segs[i] = true
				delete(held, a)
			}
		}
	}
	return p
}

// poolEntry replays entry e, the i-th of r.trace, when it is a private
// pool's (see pools), and reports whether it was.
func (r *replay) poolEntry(e *snapshot.TraceEntry, i int) bool {
	be := r.be
	switch {
	case r.pools == nil:
		return false
	case r.pools.segs[i] && e.Action == snapshot.SegmentAlloc:
		be.endAlloc()
		be.used += e.Size
		be.hold(e.Size)
		be.mallocs++
		r.poolSegs++
	case r.pools.segs[i]:
		be.endAlloc()
		be.used -= e.Size
		be.reserved -= e.Size
		r.res.DeviceFrees++
		r.poolSegs--
	case r.pools.allocs[i] && e.Action == snapshot.Alloc && r.poolSegs > 0:
		// Served from the pool's segments, where the record places it.
		be.endAlloc()
		be.endReleases()
		r.res.Allocs++
		r.res.AddressMatches++
		r.inPool[e.Addr] = true
	case e.Action == snapshot.FreeCompleted && r.inPool[e.Addr]:
		be.endAlloc()
		delete(r.inPool, e.Addr)
	default:
		return false
	}
	return true
}
