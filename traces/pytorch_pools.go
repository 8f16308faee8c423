package traces

import (
	"sort"

	"github.com/gpualloc/gpualloc/snapshot"
)

// A PoolInfo describes one memory pool of one device of a PyTorch
// snapshot: the default pools of the allocator (Pool the zero value) or a
// private pool (a CUDA graph's, a torch.cuda.MemPool's: see
// [snapshot.PoolID]).
type PoolInfo struct {
	Device int
	Pool   snapshot.PoolID
	// Segments and ReservedBytes are the pool's segments when the snapshot
	// was taken, and their bytes.
	Segments      int64
	ReservedBytes int64
	// Entries counts the entries of the device's trace (allocs, frees,
	// segment actions) whose address lies in a segment of the pool, as
	// the snapshot's segments and the state when the trace began place
	// them; an entry in no segment known counts for the default pools.
	// PyTorch's trace entries do not name their pool: 0 for a private
	// pool means that the trace says nothing of it.
	Entries int64
}

// Pools returns the pools of each device of the snapshot, in order of
// device and pool, for a description of the trace (simulate inspect).
func (r *snapshotReader) Pools() []PoolInfo {
	s := r.snap
	var out []PoolInfo
	for _, dev := range s.Devices() {
		type span struct {
			addr, end uint64
			pool      snapshot.PoolID
		}
		var spans []span
		byPool := map[snapshot.PoolID]*PoolInfo{{}: {Device: dev}}
		for _, sg := range s.Segments {
			if sg.Device != dev {
				continue
			}
			p := byPool[sg.Pool]
			if p == nil {
				p = &PoolInfo{Device: dev, Pool: sg.Pool}
				byPool[sg.Pool] = p
			}
			p.Segments++
			p.ReservedBytes += sg.TotalSize
			spans = append(spans, span{sg.Address, sg.Address + uint64(sg.TotalSize), sg.Pool})
		}
		if dev < len(r.states) && r.states[dev] != nil {
			for _, sg := range r.states[dev].Segments {
				spans = append(spans, span{sg.Address, sg.Address + uint64(sg.TotalSize), sg.Pool})
			}
		}
		sort.Slice(spans, func(i, j int) bool { return spans[i].addr < spans[j].addr })
		t := s.Trace(dev)
		for i := range t.Len() {
			if a := t.Action(i); a == snapshot.OutOfMemory || a == snapshot.TakeSnapshot {
				continue
			}
			pool := snapshot.PoolID{}
			if len(byPool) == 1 {
				// Only the default pools: every entry counts for them.
				byPool[pool].Entries++
				continue
			}
			e := t.At(i)
			i := sort.Search(len(spans), func(i int) bool { return spans[i].end > e.Addr })
			for ; i < len(spans) && spans[i].addr <= e.Addr; i++ {
				if e.Addr < spans[i].end {
					pool = spans[i].pool
					break
				}
			}
			if p := byPool[pool]; p != nil {
				p.Entries++
			}
		}
		start := len(out)
		for _, p := range byPool {
			out = append(out, *p)
		}
		part := out[start:]
		sort.Slice(part, func(i, j int) bool {
			a, b := part[i].Pool, part[j].Pool
			return a[0] < b[0] || a[0] == b[0] && a[1] < b[1]
		})
	}
	return out
}

// privateAllocs returns, as a bitset over the reader's events (bit n of
// word n/64), the allocations of the trace whose address lies in a segment
// of a private pool, as the snapshot's segments and the state when the
// trace began place them, and the pool of each, in the order of the
// events; nil when there are none. An allocation in a private pool's
// segment that neither shows (one the trace allocates and frees) counts
// for the default pools.
func (r *snapshotReader) privateAllocs() ([]uint64, []snapshot.PoolID) {
	type span struct {
		addr, end uint64
		pool      snapshot.PoolID
	}
	spans := map[int][]span{}
	add := func(dev int, sg *snapshot.Segment) {
		if sg.Pool.Private() {
			spans[dev] = append(spans[dev], span{sg.Address, sg.Address + uint64(sg.TotalSize), sg.Pool})
		}
	}
	for i := range r.snap.Segments {
		add(r.snap.Segments[i].Device, &r.snap.Segments[i])
	}
	for dev, st := range r.states {
		if st != nil {
			for i := range st.Segments {
				add(dev, &st.Segments[i])
			}
		}
	}
	if len(spans) == 0 {
		return nil, nil
	}
	var bits []uint64
	var pools []snapshot.PoolID
	n := len(r.start)
	o := r.order.restart()
	for ref, ok := o.next(); ok; ref, ok = o.next() {
		e := r.traces[ref.device].At(int(ref.index))
		if e.Action == snapshot.Alloc {
			for _, sp := range spans[int(ref.device)] {
				if sp.addr <= e.Addr && e.Addr < sp.end {
					for len(bits) <= n/64 {
						bits = append(bits, 0)
					}
					bits[n/64] |= 1 << (n % 64)
					pools = append(pools, sp.pool)
					break
				}
			}
		}
		n++
		if e.Action == snapshot.OutOfMemory {
			n++ // its alloc and its free
		}
	}
	return bits, pools
}
