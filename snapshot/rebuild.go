package snapshot

import (
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/gpualloc/gpualloc/internal/torchsize"
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
	// Fresh are the segment_alloc entries that PyTorch recorded just
	// before the trace's first entry, an alloc, and that a ring buffer cut
	// off: the alloc took a new segment (see InitialStateWith), which is
	// not in Segments. A replay of the trace from the state replays them
	// first.
	Fresh []TraceEntry
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
// entry of its trace: the segments and blocks that PyTorch held then. It is
// InitialStateWith the rules of the snapshot's settings, or PyTorch's
// defaults when the settings are not valid.
func (s *Snapshot) InitialState(dev int) (*State, error) {
	r, err := s.AllocatorSettings.Rules()
	if err != nil {
		r = DefaultRules()
	}
	return s.InitialStateWith(dev, r)
}

// InitialStateWith returns the memory of device dev as it was before the
// first entry of its trace, for an allocator with the given rules.
//
// It starts from the segments of the snapshot and walks the device's trace
// backwards, undoing each entry:
//
//   - alloc at A: the live block at A becomes free and merges with free
//     neighbours (PyTorch never leaves two free blocks side by side, and it
//     carves an allocation from the front of the free block it takes);
//   - free_completed at A of n bytes: the free block holding A is split
//     into the free bytes before A, a live block at A of n bytes rounded as
//     the rules round, and the free bytes after it, which belong to the
//     block when PyTorch would not have split them off (see below);
//   - segment_alloc at A: the segment at A, by then one free block, goes;
//   - segment_free at A of n bytes: a segment of one free block comes back,
//     small when n is 2 MiB (PyTorch's small segments), large otherwise;
//   - segment_map at A of n bytes (expandable segments): the free bytes
//     [A, A+n) are cut out of their segment, a mapped range;
//   - segment_unmap at A of n bytes: they come back, free, joined to the
//     mapped ranges of the same stream just before and after them.
//
// The other actions (free_requested, oom, snapshot) change no block.
//
// Hidden tails. A block live before the trace may be larger than its
// rounded request: PyTorch does not split the rest off a free block when
// it is 1 MiB or less in a large segment (without expandable segments), nor
// at all when the request is at least max_split_size, which may then take
// a free block up to max_non_split_rounding larger. The trace records only
// the request, so the rebuild decides such tails from what PyTorch cannot
// have done and from the trace's other entries:
//
//   - the rest after a block made live by undoing its free is its tail when
//     PyTorch would not have split it off, but it ends at the first address
//     that an earlier entry of the trace names (while the block was live,
//     those addresses were other blocks);
//   - a free fragment of 1 MiB or less before a block made live, in a large
//     segment, cannot be (every block of the large pool is larger): its
//     bytes belong to the live block before it. A larger fragment after an
//     oversize block (max_split_size), less than max_non_split_rounding with
//     that block's tail and named by no earlier entry, belongs to it too.
//
// A constraint that no tail satisfies (such a fragment with no live block
// before it) is reported as an error, as below, not guessed away.
//
// A window may also start between a segment_alloc and the alloc it served:
// when the first entry is an alloc that took a segment PyTorch's pool could
// not have served it from, the segment is new, and goes to State.Fresh (see
// freshSegment).
//
// An entry that the segments cannot explain (an alloc where no live block
// starts, a free inside a live block, an address outside every segment),
// and a segment whose blocks do not cover it, make the snapshot
// inconsistent: InitialStateWith returns the first such problem met walking
// backwards as an error naming the entry ("device_traces[0][7]: alloc of
// 0x7f0000000000 outside every segment"), together with the best state it
// can rebuild: the entry leaves the segments as they are, and the live
// blocks that no segment can hold are in Unplaced. The state then still
// holds every block that the trace frees before allocating it, so that a
// replay of the trace from it frees no unknown block.
//
// It costs O(s log s) for the s segments of the snapshot, O(log s + b) per
// entry, for segments of at most b blocks, and O(n + d log d) for the n
// entries to index the d addresses they name; an entry that adds or drops a segment
// also moves the segments after it in the sorted list.
func (s *Snapshot) InitialStateWith(dev int, rules Rules) (*State, error) {
	r := &rebuild{rules: rules, unplaced: map[uint64]TraceEntry{}}
	r.addSnapshotSegments(s.Segments, dev)
	t := s.Trace(dev)
	r.named = newNamed(t)
	for i := t.Len() - 1; i >= 0; i-- {
		e := t.At(i)
		r.named.now = int32(i) // entries from i on are undone, or being undone
		r.undo(&e, dev, i)
	}
	st := r.state(dev)
	st.Fresh = r.fresh
	for _, e := range r.unplaced {
		st.Unplaced = append(st.Unplaced, e)
	}
	sort.Slice(st.Unplaced, func(i, j int) bool { return st.Unplaced[i].Addr < st.Unplaced[j].Addr })
	return st, r.err
}

// state returns the segments of r as a State of device dev.
func (r *rebuild) state(dev int) *State {
	st := &State{Segments: make([]Segment, len(r.segs))}
	for i, sg := range r.segs {
		seg := Segment{Device: dev, Address: sg.addr, TotalSize: sg.size, Stream: sg.stream, IsExpandable: sg.expandable, SegmentType: "large", Pool: sg.pool}
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
	return st
}

// rebuild is the state of InitialState's walk.
type rebuild struct {
	rules    Rules
	named    *named                // addresses of the entries not undone yet
	segs     []*rseg               // in address order
	near     [nearSlots]int32      // by an address's 2 MiB: the index in segs that find returned last for one there
	unplaced map[uint64]TraceEntry // live blocks that no segment holds, by address
	fresh    []TraceEntry          // see State.Fresh
	err      error                 // the first problem
}

// rseg is a segment during the rebuild.
type rseg struct {
	addr       uint64
	size       int64
	stream     uint64
	pool       PoolID // the snapshot's segment's; the default for one the trace implies
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

// addSnapshotSegments adds the segments of the snapshot on device dev (of
// every device when dev < 0), in address order. A segment whose blocks do not cover it, or that overlaps
// one added before it in the snapshot's order, is left out, its live
// blocks unplaced; the problems are reported in the snapshot's order.
//
// It costs O(s log s) for s segments: they are sorted by address and
// checked against their neighbours; only a snapshot with overlaps falls
// back to inserting them one by one into the sorted list.
func (r *rebuild) addSnapshotSegments(segs []Segment, dev int) {
	type item struct {
		sg  *Segment
		rs  *rseg  // nil when left out
		msg string // why it is left out
	}
	var items []item
	var ok []int // the items not left out yet
	for i := range segs {
		if dev >= 0 && segs[i].Device != dev {
			continue
		}
		rs, msg := newSnapshotSegment(&segs[i])
		if msg == "" {
			ok = append(ok, len(items))
		}
		items = append(items, item{&segs[i], rs, msg})
	}
	sort.SliceStable(ok, func(i, j int) bool { return items[ok[i]].rs.addr < items[ok[j]].rs.addr })
	disjoint := true
	for k := 1; k < len(ok); k++ {
		if items[ok[k]].rs.addr < items[ok[k-1]].rs.end() {
			disjoint = false
			break
		}
	}
	if !disjoint {
		// Add them in the snapshot's order, each refused when it overlaps
		// one added before it (the first added of those is named).
		var kept []int // in address order
		reported := false
		for i := range items {
			rs := items[i].rs
			if rs == nil {
				continue
			}
			j := sort.Search(len(kept), func(j int) bool { return items[kept[j]].rs.end() > rs.addr })
			if j < len(kept) && items[kept[j]].rs.addr < rs.end() {
				if !reported {
					first := kept[j]
					for k := j; k < len(kept) && items[kept[k]].rs.addr < rs.end(); k++ {
						first = min(first, kept[k])
					}
					items[i].msg = fmt.Sprintf("segment %s: overlaps the segment at %s", hex(rs.addr), hex(items[first].rs.addr))
					reported = true
				} else {
					items[i].msg = "overlap"
				}
				items[i].rs = nil
				continue
			}
			kept = append(kept, 0)
			copy(kept[j+1:], kept[j:])
			kept[j] = i
		}
		ok = kept
	}
	for _, it := range items {
		if it.rs == nil {
			r.fail("%s", it.msg)
			r.unplace(it.sg)
		}
	}
	for _, i := range ok {
		r.segs = append(r.segs, items[i].rs)
	}
}

// newSnapshotSegment returns segment sg of the snapshot as a segment of
// the rebuild, or why its blocks do not cover it.
func newSnapshotSegment(sg *Segment) (*rseg, string) {
	rs := &rseg{addr: sg.Address, size: sg.TotalSize, stream: sg.Stream, pool: sg.Pool,
		small: sg.SegmentType == "small", expandable: sg.IsExpandable}
	if rs.size == 0 {
		for _, b := range sg.Blocks {
			rs.size += b.Size
		}
	}
	at := rs.addr
	rs.blocks = make([]rblock, 0, len(sg.Blocks))
	for _, b := range sg.Blocks {
		if b.Address != at || b.Size <= 0 {
			return nil, fmt.Sprintf("segment %s: block at %s of %d bytes, expected one at %s", hex(sg.Address), hex(b.Address), b.Size, hex(at))
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
		return nil, fmt.Sprintf("segment %s: size %d", hex(sg.Address), rs.size)
	case len(sg.Blocks) == 0:
		rs.blocks = []rblock{{addr: rs.addr, size: rs.size}}
	case at != rs.end():
		return nil, fmt.Sprintf("segment %s: blocks cover %d of its %d bytes", hex(sg.Address), at-rs.addr, rs.size)
	}
	return rs, ""
}

// unplace makes the live blocks of a segment left out unplaced.
func (r *rebuild) unplace(sg *Segment) {
	for _, b := range sg.Blocks {
		if b.Live() {
			r.unplaced[b.Address] = TraceEntry{Action: Alloc, Addr: b.Address, Size: b.RequestedSize, Stream: sg.Stream, TimeUS: NoTime}
		}
	}
}

// find returns the index of the segment holding address a, or -1: the
// one it returned last for an address in the same 2 MiB (near), as an
// entry's address is mostly in a segment that one before it was in, else
// by binary search. An index in near is a guess, checked against the
// segment there, since segs changes: a segment that holds a is the one.
// The guess costs a load where the search costs a cache line and a
// mispredicted branch per halving.
func (r *rebuild) find(a uint64) int {
	slot := &r.near[(a>>nearShift)&(nearSlots-1)]
	if i := int(*slot); i < len(r.segs) && r.segs[i].addr <= a && a < r.segs[i].end() {
		return i
	}
	lo, hi := 0, len(r.segs)
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); r.segs[m].end() > a {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo < len(r.segs) && r.segs[lo].addr <= a {
		*slot = int32(lo)
		return lo
	}
	return -1
}

// The table of rebuild.near: by 2 MiB, the size of PyTorch's small
// segments and the rounding of its large ones (kSmallBuffer and
// kRoundLarge in c10/cuda/CUDACachingAllocator.cpp), in 1024 slots (4 KiB).
const (
	nearShift = 21
	nearSlots = 1 << 10
)

// undo undoes entry e, the i-th of device dev's trace.
func (r *rebuild) undo(e *TraceEntry, dev, i int) {
	where := func() string {
		if r.err != nil {
			return "" // fail keeps the first error alone: no need to say where the others are
		}
		return fmt.Sprintf("device_traces[%d][%d]: %s of %s", dev, i, e.Action, hex(e.Addr))
	}
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
			return
		}
		if i == 0 {
			r.freshSegment(si, e)
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
		if msg := r.unfree(sg, e.Addr, e.Size); msg != "" {
			r.fail("%s%s", where(), msg)
			if b := sg.liveAt(e.Addr); b != nil {
				b.requested = e.Size
			} else {
				r.unplaced[e.Addr] = TraceEntry{Action: Alloc, Addr: e.Addr, Size: e.Size, Stream: sg.stream, TimeUS: NoTime}
			}
		}
	case SegmentAlloc:
		if msg := r.dropSegment(e.Addr); msg != "" {
			r.fail("%s%s", where(), msg)
		}
	case SegmentFree:
		if msg := r.addSegment(e.Addr, e.Size, e.Stream); msg != "" {
			r.fail("%s%s", where(), msg)
		}
	case SegmentMap:
		if msg := r.unmap(e.Addr, e.Size); msg != "" {
			r.fail("%s%s", where(), msg)
		}
	case SegmentUnmap:
		if msg := r.mapRange(e.Addr, e.Size, e.Stream); msg != "" {
			r.fail("%s%s", where(), msg)
		}
	}
}

// freshSegment decides whether the trace's first entry, alloc e in segment
// si, took a new segment, whose segment_alloc a ring buffer cut off: when
// the segment is then one free block of the size that PyTorch allocates for
// the request (get_allocation_size), and that block is one its pool could
// not have served the request from (a request under max_split_size, a
// block of at least it: get_free_block refuses it). The segment then goes
// from the state, into fresh. When the pool could have served it, the
// segment stays: either way the alloc lands at its start.
func (r *rebuild) freshSegment(si int, e *TraceEntry) {
	sg := r.segs[si]
	rounded := r.rules.RoundSize(e.Size)
	if sg.small || sg.expandable || r.rules.Expandable || len(sg.blocks) != 1 || sg.blocks[0].live ||
		sg.addr != e.Addr || sg.size != torchsize.AllocationSize(rounded) ||
		r.rules.oversize(rounded) || !r.rules.oversize(sg.size) {
		return
	}
	r.fresh = append(r.fresh, TraceEntry{Action: SegmentAlloc, Addr: sg.addr, Size: sg.size, Stream: e.Stream, TimeUS: e.TimeUS})
	r.segs = append(r.segs[:si], r.segs[si+1:]...)
}

// dropSegment removes the segment at a, one free block; it returns what
// prevents it, or "".
func (r *rebuild) dropSegment(a uint64) string {
	si := r.find(a)
	if si < 0 || r.segs[si].addr != a {
		return ": no segment starts there"
	}
	sg := r.segs[si]
	if len(sg.blocks) != 1 || sg.blocks[0].live {
		return ": the segment still has live blocks"
	}
	r.segs = append(r.segs[:si], r.segs[si+1:]...)
	return ""
}

// addSegment adds a segment of size bytes at a, one free block; it returns
// what prevents it, or "".
func (r *rebuild) addSegment(a uint64, size int64, stream uint64) string {
	if size <= 0 || a+uint64(size) < a {
		return fmt.Sprintf(": size %d", size)
	}
	ns := &rseg{addr: a, size: size, stream: stream, small: size == torchsize.SmallBuffer, blocks: []rblock{{addr: a, size: size}}}
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].end() > a })
	if i < len(r.segs) && r.segs[i].addr < ns.end() {
		return ": overlaps the segment at " + hex(r.segs[i].addr)
	}
	r.segs = append(r.segs[:i], append([]*rseg{ns}, r.segs[i:]...)...)
	return ""
}

// unmap removes the free bytes [a, a+size) from the mapped range of an
// expandable segment that holds them, which may leave two ranges; it
// returns what prevents it, or "".
func (r *rebuild) unmap(a uint64, size int64) string {
	end := a + uint64(size)
	if size <= 0 || end < a {
		return fmt.Sprintf(": size %d", size)
	}
	si := r.find(a)
	if si < 0 {
		return ": outside every segment"
	}
	sg := r.segs[si]
	bi := sg.blockAt(a)
	if !sg.expandable {
		return ": in a segment that is not expandable"
	}
	if b := sg.blocks[bi]; b.live || b.addr+uint64(b.size) < end {
		return ": not one free block"
	}
	var parts []*rseg
	if a > sg.addr {
		left := &rseg{addr: sg.addr, size: int64(a - sg.addr), stream: sg.stream, pool: sg.pool, small: sg.small, expandable: true}
		left.blocks = append(left.blocks, sg.blocks[:bi+1]...)
		left.blocks[bi].size = int64(a - left.blocks[bi].addr)
		parts = append(parts, left)
	}
	if end < sg.end() {
		right := &rseg{addr: end, size: int64(sg.end() - end), stream: sg.stream, pool: sg.pool, small: sg.small, expandable: true}
		b := sg.blocks[bi]
		right.blocks = append([]rblock{{addr: end, size: int64(b.addr + uint64(b.size) - end)}}, sg.blocks[bi+1:]...)
		if right.blocks[0].size == 0 {
			right.blocks = right.blocks[1:]
		}
		parts = append(parts, right)
	}
	r.segs = append(r.segs[:si], append(parts, r.segs[si+1:]...)...)
	return ""
}

// mapRange adds the free bytes [a, a+size) to the expandable segments of
// stream, joined to a mapped range that ends at a or starts at a+size; it
// returns what prevents it, or "". A range joined to none is of the small
// pool when size is not a multiple of the large pool's pages (kLargeBuffer,
// 20 MiB).
func (r *rebuild) mapRange(a uint64, size int64, stream uint64) string {
	end := a + uint64(size)
	if size <= 0 || end < a {
		return fmt.Sprintf(": size %d", size)
	}
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].end() > a })
	if i < len(r.segs) && r.segs[i].addr < end {
		return ": overlaps the segment at " + hex(r.segs[i].addr)
	}
	ns := &rseg{addr: a, size: size, stream: stream, small: size%torchsize.LargeBuffer != 0, expandable: true, blocks: []rblock{{addr: a, size: size}}}
	joins := func(o *rseg) bool { return o.expandable && o.stream == stream }
	if i > 0 && r.segs[i-1].end() == a && joins(r.segs[i-1]) {
		p := r.segs[i-1]
		ns.small, ns.pool = p.small, p.pool
		ns.addr, ns.size = p.addr, p.size+size
		ns.blocks = append(append([]rblock(nil), p.blocks...), ns.blocks...)
		i--
		r.segs = append(r.segs[:i], r.segs[i+1:]...)
	}
	if i < len(r.segs) && r.segs[i].addr == end && joins(r.segs[i]) {
		n := r.segs[i]
		ns.small, ns.pool = n.small, n.pool
		ns.size += n.size
		ns.blocks = append(ns.blocks, n.blocks...)
		r.segs = append(r.segs[:i], r.segs[i+1:]...)
	}
	ns.mergeFree()
	r.segs = append(r.segs[:i], append([]*rseg{ns}, r.segs[i:]...)...)
	return ""
}

// mergeFree merges the free blocks of s that are side by side.
func (s *rseg) mergeFree() {
	out := s.blocks[:1]
	for _, b := range s.blocks[1:] {
		if p := &out[len(out)-1]; !p.live && !b.live {
			p.size += b.size
			continue
		}
		out = append(out, b)
	}
	s.blocks = out
}

// blockAt returns the index of the block of s that holds a, s holding a.
func (s *rseg) blockAt(a uint64) int {
	return sort.Search(len(s.blocks), func(i int) bool { return s.blocks[i].addr+uint64(s.blocks[i].size) > a })
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

// large reports whether the blocks of s follow the large pool's rule for
// splitting: a large segment without expandable segments.
func (r *rebuild) large(s *rseg) bool { return !s.small && !r.rules.Expandable }

// unfree undoes the free of the block of requested bytes at a in segment
// s, with its hidden tail (see InitialStateWith); it returns what prevents
// it, or "".
func (r *rebuild) unfree(s *rseg, a uint64, requested int64) string {
	i := s.blockAt(a)
	if i == len(s.blocks) || s.blocks[i].live {
		return " inside a live block"
	}
	f := s.blocks[i]
	size := r.rules.RoundSize(requested)
	rest := int64(f.addr+uint64(f.size)-a) - size
	if size == 0 || rest < 0 {
		return fmt.Sprintf(": %d bytes do not fit in the free block at %s of %d bytes", size, hex(f.addr), f.size)
	}
	if rest > 0 && !r.rules.split(s.small, size, rest) {
		tail := rest
		if r.large(s) && r.rules.oversize(size) && tail >= r.rules.MaxNonSplitRounding {
			tail = 0 // PyTorch would not have taken so large a block
		}
		if n, ok := r.named.firstIn(a+uint64(size), a+uint64(size+tail)); ok {
			tail = int64(n - a - uint64(size))
		}
		size, rest = size+tail, rest-tail
	}
	before := int64(a - f.addr)
	if before > 0 && r.large(s) {
		switch p := s.prevLive(i); {
		case before <= torchsize.SmallSize && p == nil:
			return fmt.Sprintf(": a free fragment of %d bytes at %s before it, which PyTorch cannot leave in a large segment, and no live block before it to own it", before, hex(f.addr))
		case before <= torchsize.SmallSize:
			p.size += before
			f.addr, f.size, before = a, f.size-before, 0
		case p != nil && r.rules.oversize(r.rules.RoundSize(p.requested)) &&
			p.size-r.rules.RoundSize(p.requested)+before < r.rules.MaxNonSplitRounding && !r.named.has(f.addr):
			p.size += before
			f.addr, f.size, before = a, f.size-before, 0
		}
	}
	var room [3]rblock // no allocation: Replace copies them in
	nb := room[:0]
	if before > 0 {
		nb = append(nb, rblock{addr: f.addr, size: before})
	}
	nb = append(nb, rblock{addr: a, size: size, requested: requested, live: true})
	if rest > 0 {
		nb = append(nb, rblock{addr: a + uint64(size), size: rest})
	}
	s.blocks = slices.Replace(s.blocks, i, i+1, nb...)
	return ""
}

// prevLive returns the block before block i of s if it is live, else nil.
func (s *rseg) prevLive(i int) *rblock {
	if i > 0 && s.blocks[i-1].live {
		return &s.blocks[i-1]
	}
	return nil
}
