package snapshot

import (
	"fmt"
	"slices"
)

// A Tracker follows a device's trace forward from a [State], as PyTorch's
// allocator changed its memory: it knows, after each entry, the segments
// and blocks that the recorded decisions imply, for a replay that compares
// its own decisions with the recorded ones and then continues from the
// recorded state.
type Tracker struct {
	r    rebuild
	held int64 // bytes of the segments held, kept by Apply
}

// NewTracker returns a Tracker that starts from st (which it does not
// keep), for an allocator with the given rules.
func NewTracker(st *State, rules Rules) *Tracker {
	t := &Tracker{r: rebuild{rules: rules, named: &named{}, unplaced: map[uint64]TraceEntry{}}}
	t.r.addSnapshotSegments(st.Segments, -1)
	for _, s := range t.r.segs {
		t.held += s.size
	}
	t.r.err = nil
	return t
}

// Apply applies entry e as PyTorch did:
//
//   - alloc at A of n bytes: the free block that starts at A becomes live,
//     its size n rounded as the rules round; the rest is split off as
//     PyTorch's should_split says, else it stays with the block (a record
//     that allocates inside a free block, which PyTorch does not do, splits
//     off the free bytes before A);
//   - free_completed at A: the live block at A becomes free and merges with
//     its free neighbours;
//   - segment_alloc and segment_map at A of n bytes: a segment, or mapped
//     bytes of an expandable segment, free, come;
//   - segment_free and segment_unmap: they go.
//
// The other actions change nothing. An entry that does not fit the
// memory is an error, and leaves it as it was. It costs O(log s + b), for s
// segments of at most b blocks.
func (t *Tracker) Apply(e *TraceEntry) error {
	r := &t.r
	var msg string
	switch e.Action {
	case Alloc:
		msg = r.alloc(e.Addr, e.Size)
	case FreeCompleted:
		si := r.find(e.Addr)
		if si < 0 || !r.segs[si].unalloc(e.Addr) {
			msg = " where no live block starts"
		}
	case SegmentAlloc:
		if msg = r.addSegment(e.Addr, e.Size, e.Stream); msg == "" {
			t.held += e.Size
		}
	case SegmentFree:
		var size int64
		if si := r.find(e.Addr); si >= 0 {
			size = r.segs[si].size
		}
		if msg = r.dropSegment(e.Addr); msg == "" {
			t.held -= size
		}
	case SegmentMap:
		if msg = r.mapRange(e.Addr, e.Size, e.Stream); msg == "" {
			t.held += e.Size // joined ranges keep their bytes
		}
	case SegmentUnmap:
		if msg = r.unmap(e.Addr, e.Size); msg == "" {
			t.held -= e.Size
		}
	}
	if msg != "" {
		return fmt.Errorf("%s of %s%s", e.Action, hex(e.Addr), msg)
	}
	return nil
}

// State returns the memory as it is now, its segments in address order.
func (t *Tracker) State(dev int) *State { return t.r.state(dev) }

// alloc makes live the free block at a for a request of requested bytes;
// it returns what prevents it, or "".
func (r *rebuild) alloc(a uint64, requested int64) string {
	si := r.find(a)
	if si < 0 {
		return " outside every segment"
	}
	s := r.segs[si]
	i := s.blockAt(a)
	f := s.blocks[i]
	if f.live {
		return " inside a live block"
	}
	var room [3]rblock // no allocation: Replace copies them in
	nb := room[:0]
	if a > f.addr {
		// PyTorch carves from the front of a free block; a record that
		// does not is followed all the same.
		nb = append(nb, rblock{addr: f.addr, size: int64(a - f.addr)})
		f.size -= int64(a - f.addr)
	}
	size := r.rules.RoundSize(requested)
	rest := f.size - size
	if size == 0 || rest < 0 {
		return fmt.Sprintf(": %d bytes do not fit in the free block of %d bytes", size, f.size)
	}
	if !r.rules.split(s.small, size, rest) {
		size, rest = f.size, 0
	}
	nb = append(nb, rblock{addr: a, size: size, requested: requested, live: true})
	if rest > 0 {
		nb = append(nb, rblock{addr: a + uint64(size), size: rest})
	}
	s.blocks = slices.Replace(s.blocks, i, i+1, nb...)
	return ""
}

// Held returns the bytes of the segments held now, in O(1): Apply keeps
// the count.
func (t *Tracker) Held() int64 { return t.held }

// DeviceMemory returns the memory of a device as the oom entries of its
// trace t tell it, PyTorch's memory snapshots recording no total: at each
// oom entry, the device's free bytes that it records ("device_free") plus
// the bytes of the segments held then, following t from st; the largest of
// these. It returns 0 when t has no oom entry or does not fit st. The
// memory that other processes and the CUDA context hold is not in it.
func DeviceMemory(st *State, t Trace, rules Rules) int64 {
	if !t.Has(OutOfMemory) {
		return 0
	}
	var total int64
	var tr *Tracker
	for i := range t.Len() {
		if t.Action(i) != OutOfMemory && tr == nil {
			continue
		}
		e := t.At(i)
		if e.Action == OutOfMemory {
			if tr == nil {
				tr = NewTracker(st, rules)
				for j := range i {
					if ej := t.At(j); tr.Apply(&ej) != nil {
						return 0
					}
				}
			}
			total = max(total, int64(e.Addr)+tr.Held())
		}
		if tr.Apply(&e) != nil {
			return 0
		}
	}
	return total
}
