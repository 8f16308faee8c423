package snapshot

import (
	"fmt"
	"sort"
	"strconv"
)

// Sizes of PyTorch's CUDA caching allocator that the rebuild relies on
// (c10/cuda/CUDACachingAllocator.cpp).
const (
	minBlockSize = 512     // kMinBlockSize: every block is a multiple of it
	smallSize    = 1 << 20 // kSmallSize: largest request served by the small pool
	smallBuffer  = 2 << 20 // kSmallBuffer: size of a small pool's segment
)

// A State is the memory of the allocator on one device at one moment.
type State struct {
	// Segments are the segments, in address order, each with its blocks in
	// address order covering it. A free block has RequestedSize 0 and
	// state Inactive; a live block, state ActiveAllocated.
	Segments []Segment
	// Unplaced are blocks live at that moment that no segment can hold, as
	// the alloc entries that would have made them. Only a snapshot whose
	// trace does not fit its segments has some.
	Unplaced []TraceEntry
}

// Allocs returns the blocks live in st, of its segments and unplaced, as
// the alloc entries that would have made them, in address order: each with
// its requested size and its segment's stream.
func (st *State) Allocs() []TraceEntry {
	var out []TraceEntry
	for _, sg := range st.Segments {
		for _, b := range sg.Blocks {
			if b.Live() {
				out = append(out, TraceEntry{Action: Alloc, Addr: b.Address, Size: b.RequestedSize, Stream: sg.Stream, TimeUS: NoTime})
			}
		}
	}
	out = append(out, st.Unplaced...)
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// InitialState returns the memory of device dev as it was before the first
// entry of its trace: the segments and blocks that PyTorch held then.
//
// It starts from the segments of the snapshot and walks the device's trace
// backwards, undoing each entry:
//
//   - alloc at A: the live block at A becomes free and merges with free
//     neighbours (PyTorch never leaves two free blocks side by side, and it
//     carves an allocation from the front of the free block it takes);
//   - free_completed at A of n bytes: the free block holding A is split
//     into the free bytes before A, a live block at A of n rounded up to a
//     multiple of 512 bytes, and the free bytes after it; when those last
//     bytes are too few for PyTorch to have split them off (under 512 in a
//     small segment, 1 MiB or less in a large one) they belong to the block;
//   - segment_alloc at A: the segment at A, by then one free block, goes;
//   - segment_free at A of n bytes: a segment of one free block comes back,
//     small when n is 2 MiB (PyTorch's small segments), large otherwise.
//
// The other actions (free_requested, oom, snapshot, segment_map and
// segment_unmap) change no block. Sizes are rounded as PyTorch does without
// roundup_power2_divisions.
//
// An entry that the segments cannot explain (an alloc where no live block
// starts, a free inside a live block, an address outside every segment),
// and a segment whose blocks do not cover it, make the snapshot
// inconsistent: InitialState returns the first such problem met walking
// backwards as an error naming the entry ("device_traces[0][7]: alloc of
// 0x7f0000000000 outside every segment"), together with the best state it
// can rebuild: the entry leaves the segments as they are, and the live
// blocks that no segment can hold are in Unplaced. The state then still
// holds every block that the trace frees before allocating it, so that a
// replay of the trace from it frees no unknown block.
//
// It costs O(log s + b) per entry, for s segments of at most b blocks.
func (s *Snapshot) InitialState(dev int) (*State, error) {
	r := &rebuild{unplaced: map[uint64]TraceEntry{}}
	for i := range s.Segments {
		if s.Segments[i].Device == dev {
			r.addSnapshotSegment(&s.Segments[i])
		}
	}
	sort.Slice(r.segs, func(i, j int) bool { return r.segs[i].addr < r.segs[j].addr })
	t := s.Trace(dev)
	for i := len(t) - 1; i >= 0; i-- {
		r.undo(&t[i], dev, i)
	}
	st := &State{Segments: make([]Segment, len(r.segs))}
	for i, sg := range r.segs {
		seg := Segment{Device: dev, Address: sg.addr, TotalSize: sg.size, Stream: sg.stream, IsExpandable: sg.expandable, SegmentType: "large"}
		if sg.small {
			seg.SegmentType = "small"
		}
		for _, b := range sg.blocks {
			blk := Block{Address: b.addr, Size: b.size, State: Inactive}
			if b.live {
				blk.RequestedSize, blk.State = b.requested, ActiveAllocated
				seg.AllocatedSize += b.size
				seg.RequestedSize += b.requested
			}
			seg.Blocks = append(seg.Blocks, blk)
		}
		seg.ActiveSize = seg.AllocatedSize
		st.Segments[i] = seg
	}
	for _, e := range r.unplaced {
		st.Unplaced = append(st.Unplaced, e)
	}
	sort.Slice(st.Unplaced, func(i, j int) bool { return st.Unplaced[i].Addr < st.Unplaced[j].Addr })
	return st, r.err
}

// rebuild is the state of InitialState's walk.
type rebuild struct {
	segs     []*rseg               // in address order
	unplaced map[uint64]TraceEntry // live blocks that no segment holds, by address
	err      error                 // the first problem
}

// rseg is a segment during the rebuild.
type rseg struct {
	addr       uint64
	size       int64
	stream     uint64
	small      bool
	expandable bool
	blocks     []rblock // in address order, covering the segment
}

type rblock struct {
	addr      uint64
	size      int64
	requested int64
	live      bool
}

func (s *rseg) end() uint64 { return s.addr + uint64(s.size) }

func hex(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }

func (r *rebuild) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

// addSnapshotSegment adds a segment of the snapshot; one whose blocks do not
// cover it is left out, its live blocks unplaced.
func (r *rebuild) addSnapshotSegment(sg *Segment) {
	rs := &rseg{addr: sg.Address, size: sg.TotalSize, stream: sg.Stream,
		small: sg.SegmentType == "small", expandable: sg.IsExpandable}
	if rs.size == 0 {
		for _, b := range sg.Blocks {
			rs.size += b.Size
		}
	}
	at := rs.addr
	for _, b := range sg.Blocks {
		if b.Address != at || b.Size <= 0 {
			r.fail("segment %s: block at %s of %d bytes, expected one at %s", hex(sg.Address), hex(b.Address), b.Size, hex(at))
			r.unplace(sg)
			return
		}
		rb := rblock{addr: b.Address, size: b.Size, live: b.Live()}
		if rb.live {
			rb.requested = b.RequestedSize
		}
		rs.blocks = append(rs.blocks, rb)
		at += uint64(b.Size)
	}
	switch {
	case rs.size <= 0 || rs.end() < rs.addr:
		r.fail("segment %s: size %d", hex(sg.Address), rs.size)
		r.unplace(sg)
		return
	case len(sg.Blocks) == 0:
		rs.blocks = []rblock{{addr: rs.addr, size: rs.size}}
	case at != rs.end():
		r.fail("segment %s: blocks cover %d of its %d bytes", hex(sg.Address), at-rs.addr, rs.size)
		r.unplace(sg)
		return
	}
	for _, o := range r.segs {
		if rs.addr < o.end() && o.addr < rs.end() {
			r.fail("segment %s: overlaps the segment at %s", hex(sg.Address), hex(o.addr))
			r.unplace(sg)
			return
		}
	}
	r.segs = append(r.segs, rs)
}

// unplace makes the live blocks of a segment left out unplaced.
func (r *rebuild) unplace(sg *Segment) {
	for _, b := range sg.Blocks {
		if b.Live() {
			r.unplaced[b.Address] = TraceEntry{Action: Alloc, Addr: b.Address, Size: b.RequestedSize, Stream: sg.Stream, TimeUS: NoTime}
		}
	}
}

// find returns the index of the segment holding address a, or -1.
func (r *rebuild) find(a uint64) int {
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].end() > a })
	if i < len(r.segs) && r.segs[i].addr <= a {
		return i
	}
	return -1
}

// undo undoes entry e, the i-th of device dev's trace.
func (r *rebuild) undo(e *TraceEntry, dev, i int) {
	where := func() string { return fmt.Sprintf("device_traces[%d][%d]: %s of %s", dev, i, e.Action, hex(e.Addr)) }
	switch e.Action {
	case Alloc:
		if _, ok := r.unplaced[e.Addr]; ok {
			delete(r.unplaced, e.Addr)
			return
		}
		si := r.find(e.Addr)
		if si < 0 {
			r.fail("%s outside every segment", where())
			return
		}
		if !r.segs[si].unalloc(e.Addr) {
			r.fail("%s where no live block starts", where())
		}
	case FreeCompleted:
		if u, ok := r.unplaced[e.Addr]; ok {
			r.fail("%s already live", where())
			u.Size = e.Size
			r.unplaced[e.Addr] = u
			return
		}
		si := r.find(e.Addr)
		if si < 0 {
			r.fail("%s outside every segment", where())
			r.unplaced[e.Addr] = TraceEntry{Action: Alloc, Addr: e.Addr, Size: e.Size, Stream: e.Stream, TimeUS: NoTime}
			return
		}
		sg := r.segs[si]
		if msg := sg.unfree(e.Addr, e.Size); msg != "" {
			r.fail("%s%s", where(), msg)
			if b := sg.liveAt(e.Addr); b != nil {
				b.requested = e.Size
			} else {
				r.unplaced[e.Addr] = TraceEntry{Action: Alloc, Addr: e.Addr, Size: e.Size, Stream: sg.stream, TimeUS: NoTime}
			}
		}
	case SegmentAlloc:
		si := r.find(e.Addr)
		if si < 0 || r.segs[si].addr != e.Addr {
			r.fail("%s: no segment starts there", where())
			return
		}
		sg := r.segs[si]
		if len(sg.blocks) != 1 || sg.blocks[0].live {
			r.fail("%s: the segment still has live blocks", where())
			return
		}
		r.segs = append(r.segs[:si], r.segs[si+1:]...)
	case SegmentFree:
		if e.Size <= 0 {
			r.fail("%s: size %d", where(), e.Size)
			return
		}
		ns := &rseg{addr: e.Addr, size: e.Size, stream: e.Stream, small: e.Size == smallBuffer,
			blocks: []rblock{{addr: e.Addr, size: e.Size}}}
		if ns.end() < ns.addr {
			r.fail("%s: size %d", where(), e.Size)
			return
		}
		i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].end() > e.Addr })
		if i < len(r.segs) && r.segs[i].addr < ns.end() {
			r.fail("%s: overlaps the segment at %s", where(), hex(r.segs[i].addr))
			return
		}
		r.segs = append(r.segs[:i], append([]*rseg{ns}, r.segs[i:]...)...)
	}
}

// liveAt returns the live block that starts at a, or nil.
func (s *rseg) liveAt(a uint64) *rblock {
	i := sort.Search(len(s.blocks), func(i int) bool { return s.blocks[i].addr >= a })
	if i < len(s.blocks) && s.blocks[i].addr == a && s.blocks[i].live {
		return &s.blocks[i]
	}
	return nil
}

// unalloc undoes the allocation of the live block at a, reporting whether
// there is one.
func (s *rseg) unalloc(a uint64) bool {
	i := sort.Search(len(s.blocks), func(i int) bool { return s.blocks[i].addr >= a })
	if i == len(s.blocks) || s.blocks[i].addr != a || !s.blocks[i].live {
		return false
	}
	s.blocks[i].live, s.blocks[i].requested = false, 0
	if i+1 < len(s.blocks) && !s.blocks[i+1].live {
		s.blocks[i].size += s.blocks[i+1].size
		s.blocks = append(s.blocks[:i+1], s.blocks[i+2:]...)
	}
	if i > 0 && !s.blocks[i-1].live {
		s.blocks[i-1].size += s.blocks[i].size
		s.blocks = append(s.blocks[:i], s.blocks[i+1:]...)
	}
	return true
}

// unfree undoes the free of the block of requested bytes at a; it returns
// what prevents it, or "".
func (s *rseg) unfree(a uint64, requested int64) string {
	i := sort.Search(len(s.blocks), func(i int) bool { return s.blocks[i].addr+uint64(s.blocks[i].size) > a })
	if i == len(s.blocks) || s.blocks[i].live {
		return " inside a live block"
	}
	f := s.blocks[i]
	size := roundSize(requested)
	rest := int64(f.addr+uint64(f.size)-a) - size
	if rest < 0 {
		return fmt.Sprintf(": %d bytes do not fit in the free block at %s of %d bytes", size, hex(f.addr), f.size)
	}
	if rest > 0 && ((s.small && rest < minBlockSize) || (!s.small && rest <= smallSize)) {
		size, rest = size+rest, 0
	}
	var nb []rblock
	if a > f.addr {
		nb = append(nb, rblock{addr: f.addr, size: int64(a - f.addr)})
	}
	nb = append(nb, rblock{addr: a, size: size, requested: requested, live: true})
	if rest > 0 {
		nb = append(nb, rblock{addr: a + uint64(size), size: rest})
	}
	s.blocks = append(s.blocks[:i], append(nb, s.blocks[i+1:]...)...)
	return ""
}

// roundSize is the size PyTorch gives a block of n requested bytes without
// roundup_power2_divisions: n rounded up to a multiple of 512.
func roundSize(n int64) int64 {
	if n < minBlockSize {
		return minBlockSize
	}
	return (n + minBlockSize - 1) / minBlockSize * minBlockSize
}
