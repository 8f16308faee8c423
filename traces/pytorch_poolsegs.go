package traces

import (
	"sort"

	"github.com/gpualloc/gpualloc/snapshot"
)

// A PoolSegment is a segment of a private pool (a CUDA graph's, a
// torch.cuda.MemPool's: see [snapshot.PoolID]) that a snapshot's trace
// allocates (segment_alloc) or frees (segment_free) on one device.
type PoolSegment struct {
	// Event is the index of the reader's event before which the segment
	// action happens: the device's next event after it, or the number of
	// events when none follows.
	Event  int64
	Device int
	Pool   snapshot.PoolID
	// Addr is the segment's address as recorded, Size its bytes.
	Addr uint64
	Size int64
	Free bool
}

// poolSegments returns the segment actions of the trace in private pools
// (Start.PoolSegments), in the order of their events (see
// PoolSegment.Event), the order of each device's trace kept.
// PyTorch's trace entries do not name their pool; a segment's is known
// from the snapshot's segments: a segment_alloc is a private pool's when
// the snapshot still holds a private pool's segment at that address, and
// no later segment_free of that address follows; a segment_free is one
// when the segment freed is a private pool's by that rule or by the state
// when the trace began. A private pool's segment that the trace both
// allocates and frees leaves nothing to tell its pool by, and counts for
// the default pools. Expandable segments' maps and unmaps are not
// followed. O(entries log events), found once by Start.
func (r *snapshotReader) poolSegments() []PoolSegment {
	s := r.snap
	type key struct {
		dev  int
		addr uint64
	}
	final := map[key]snapshot.PoolID{}
	for _, sg := range s.Segments {
		if sg.Pool.Private() && !sg.IsExpandable {
			final[key{sg.Device, sg.Address}] = sg.Pool
		}
	}
	held := map[key]snapshot.PoolID{}
	for dev, st := range r.states {
		if st == nil {
			continue
		}
		for _, sg := range st.Segments {
			if sg.Pool.Private() && !sg.IsExpandable {
				held[key{dev, sg.Address}] = sg.Pool
			}
		}
	}
	if len(final) == 0 && len(held) == 0 {
		return nil
	}
	// The reader's index of each event entry, by device: the entries'
	// indexes in the device's trace, and the events they are.
	type at struct {
		index int32
		event int64
	}
	byDev := make([][]at, len(r.traces))
	n := int64(len(r.start))
	o := r.order.restart()
	for ref, ok := o.next(); ok; ref, ok = o.next() {
		byDev[ref.device] = append(byDev[ref.device], at{ref.index, n})
		n++
		if r.traces[ref.device].Action(int(ref.index)) == snapshot.OutOfMemory {
			n++ // its alloc and its free
		}
	}
	var out []PoolSegment
	for dev, t := range r.traces {
		// freedLater[addr] is the last segment_free of addr in the trace.
		freedLater := map[uint64]int{}
		for i := range t.Len() {
			if t.Action(i) == snapshot.SegmentFree {
				freedLater[t.At(i).Addr] = i
			}
		}
		events := byDev[dev]
		for i := range t.Len() {
			e := t.At(i)
			k := key{dev, e.Addr}
			var pool snapshot.PoolID
			switch e.Action {
			case snapshot.SegmentAlloc:
				p, ok := final[k]
				if last, freed := freedLater[e.Addr]; !ok || freed && last > i {
					continue
				}
				pool, held[k] = p, p
			case snapshot.SegmentFree:
				p, ok := held[k]
				if !ok {
					continue
				}
				pool = p
				delete(held, k)
			default:
				continue
			}
			j := sort.Search(len(events), func(j int) bool { return int(events[j].index) > i })
			ev := n
			if j < len(events) {
				ev = events[j].event
			}
			out = append(out, PoolSegment{Event: ev, Device: dev, Pool: pool, Addr: e.Addr, Size: e.Size, Free: e.Action == snapshot.SegmentFree})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Event < out[j].Event })
	return out
}
