package sim

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// Recording a replay as a PyTorch memory snapshot (Config.Snapshot).
//
// The recorder sees what the engine sees, whatever the strategy: each block
// handed out and freed, each failed allocation, and each call of the device
// that the strategy makes through the engine's counting wrapper. From that
// alone it writes the trace entries PyTorch's allocator writes
// (torch.cuda.memory._record_memory_history) and, at the end, the
// segments and blocks PyTorch's _snapshot() reports:
//
//   - an alloc is an "alloc" entry (the block's address, the requested
//     size, the event's stream); a free is "free_requested" and then
//     "free_completed" (a replay has no stream events to wait for), written
//     before the strategy is called, so that the device frees it makes come
//     after them, as PyTorch frees a segment only once its blocks are free;
//   - an allocation that fails with out of memory is an "oom" entry, with
//     the device's free bytes after the failure ("device_free") and the size
//     the strategy would have set aside (the rounded size for a strategy
//     with a RoundSize method, as PyTorch records it, else the request);
//   - a Malloc of the device is a "segment_alloc", a Free a "segment_free";
//     a Map of a virtual-memory device is a "segment_map" of the mapped
//     bytes, an Unmap a "segment_unmap" (Create, Release, Reserve and
//     Unreserve hold or free no addresses a block can use, and PyTorch
//     records none of them). A device call during an alloc takes the
//     alloc's stream; during a free, the stream of its segment;
//   - at the end each device allocation is a segment, and each maximal run
//     of mapped pages of one reserved range an expandable segment (PyTorch
//     reports one segment per contiguous mapped range); its live blocks are
//     "active_allocated" blocks of their handed-out size and the bytes
//     between them "inactive" blocks, so that the blocks tile the segment.
//     A segment's "segment_type" is "small" for a device allocation of
//     2 MiB or less, or a range mapped in pages of 2 MiB or less, "large"
//     otherwise: the pools PyTorch's sizes imply.
//
// Entries carry the event's time or, when the trace has none, the event's
// index in the trace, so that a reader that merges the devices' traces by
// time finds the replay's order; the snapshot then says so, openly, in its
// allocator_settings (which the viewer shows in a tab of their own):
// "time_us": "event index (the replayed trace records no times)". When the trace has categories, alloc and
// free entries and blocks carry them and the other entries "unknown" (the
// viewer needs at least one "unknown" once any entry has a category: when
// the kept entries have none, a last "snapshot" entry has it).
//
// The recorder sees the replay through wrappers that the engine puts, only
// when it records, around the trace's reader (for the events' times), each
// device's allocator (for its blocks and failures) and the backend the
// allocator is given (for its device calls): off, the replay loop runs
// exactly as without it. On, it keeps the last SnapshotEntries entries per
// device in a ring (40 bytes each), or else every entry in an entryLog
// (about 13 bytes each, 14 with stacks, in blocks of 64 KiB), and maps of the live blocks
// and device memory. For Config.SnapshotStream the log spills its blocks
// to a temporary file and the entries are read back, one block at a time,
// as the snapshot is written: the recording holds a block per device
// whatever the length of the trace. For Config.Snapshot the blocks stay in
// memory and the snapshot is built once, at the end, 72 bytes per entry,
// each block let go once it is read. No entry allocates: a block is
// allocated (or its offset kept) once per 64 KiB.
type snapRecorder struct {
	max      int // entries kept per device; 0: all
	ringSize int // the size of the rings that keep them, or 0: they are logged
	devs     []*snapDevice

	// The event being replayed.
	stream uint64
	timeUS int64 // its time, or its index in the trace when it has none
	cat    gpualloc.Category
	stack  uint32 // its stack (traces.Event.Stack)
	cats   bool   // some event had a category
	// indexTimes says that some entry's time is its event's index: the
	// trace records no times.
	indexTimes bool

	settings *snapshot.AllocatorSettings
	spill    *spillFile // where the entries go, or nil: they stay in memory

	// frames and stacks are the trace's, which the events' stacks index
	// (traces.StackReporter); nil when it records none.
	frames []snapshot.Frame
	stacks [][]int32

	// releasing is true during a release of the allocator's cache that
	// the trace asked for (traces.OpRelease); released, once such a
	// release gave back device memory (see catEmptyCache).
	releasing, released bool
}

// catEmptyCache is the category that marks a segment_free or
// segment_unmap entry that a release the trace asked for made, which no
// category of its own has: the snapshot gives it the frame of PyTorch's
// torch.cuda.empty_cache, as PyTorch records it, so that a reader tells
// it from a release the strategy made to make room (see
// snapshot.TraceEntry.EmptyCache).
const catEmptyCache gpualloc.Category = 31

// emptyCacheFrame is the frame of torch.cuda.empty_cache, in
// torch/cuda/memory.py, that PyTorch records on the segment_free entries
// of a release the program asked for.
var emptyCacheFrame = snapshot.Frame{Name: "empty_cache", Filename: "torch/cuda/memory.py"}

// A snapEntry is a trace entry as the recorder keeps it.
type snapEntry struct {
	addr   uint64
	size   int64
	stream uint64
	timeUS int64
	action uint8 // index in snapActions
	cat    gpualloc.Category
	stack  uint32 // the allocation's stack, for an alloc, a free or an oom
}

var snapActions = [...]snapshot.Action{
	snapshot.Alloc, snapshot.FreeRequested, snapshot.FreeCompleted, snapshot.SegmentAlloc,
	snapshot.SegmentFree, snapshot.SegmentMap, snapshot.SegmentUnmap, snapshot.OutOfMemory,
}

const (
	actAlloc uint8 = iota
	actFreeRequested
	actFreeCompleted
	actSegmentAlloc
	actSegmentFree
	actSegmentMap
	actSegmentUnmap
	actOOM
)

// snapDevice is what the recorder knows of one device.
type snapDevice struct {
	// The entries kept: with a maximum, a ring (next is the index of the
	// oldest entry once it is full); else the log of them all.
	ring []snapEntry
	next int
	log  entryLog
	// window is the number of entries kept, the last ones; 0: all.
	window int
	// unknown counts the entries in the ring whose category is "unknown"
	// once the snapshot has categories (see snapEntry.unknown);
	// lastUnknown is the number of entries logged up to the last such
	// entry logged, 0 for none.
	unknown, lastUnknown int

	live     map[uint64]liveBlock // handed-out blocks by address
	segs     map[uint64]region    // device allocations by address
	reserved map[uint64]*vrange   // reserved ranges by address
	mapped   map[uint64]region    // mapped pages by address
}

type liveBlock struct {
	size, requested int64
	stream          uint64
	cat             gpualloc.Category
	stack           uint32 // the stack of its alloc: an ID, not the frames
}

// A region is a device allocation or a mapped page.
type region struct {
	size   int64
	stream uint64
}

// A vrange is a reserved range of a virtual-memory device.
type vrange struct {
	size  int64
	large bool // some page mapped in it was larger than 2 MiB
}

const smallSegment = 2 << 20 // PyTorch's kSmallBuffer: the small pool's segment

// maxRing is the largest window of entries kept in a ring (40 MiB a
// device); a larger one is the end of an entryLog, which takes a quarter
// of the memory, or none when spilled (a variable for the tests).
var maxRing = 1 << 20

// newSnapRecorder returns the recorder of a replay with cfg: one that keeps
// a window of cfg.SnapshotEntries entries of up to maxRing in a ring, and
// else logs every entry, spilled to a temporary file in cfg.SnapshotTemp
// when the snapshot is streamed (Config.SnapshotStream).
func newSnapRecorder(cfg *Config) *snapRecorder {
	r := &snapRecorder{max: max(cfg.SnapshotEntries, 0)}
	if r.max <= maxRing {
		r.ringSize = r.max
	}
	if cfg.SnapshotStream != nil && r.ringSize == 0 {
		r.spill = &spillFile{dir: cfg.SnapshotTemp}
	}
	return r
}

func (r *snapRecorder) device(i int) *snapDevice {
	if i >= len(r.devs) {
		r.devs = append(r.devs, make([]*snapDevice, i+1-len(r.devs))...)
	}
	d := r.devs[i]
	if d == nil {
		d = &snapDevice{window: r.max, log: entryLog{spill: r.spill, stacks: r.stacks != nil}, live: map[uint64]liveBlock{}, segs: map[uint64]region{}, reserved: map[uint64]*vrange{}, mapped: map[uint64]region{}}
		r.devs[i] = d
	}
	return d
}

// open notes a device's allocator, which it wraps to record its blocks: the
// first allocator gives the snapshot's settings, its own when it reports
// them; spec names the strategy.
func (r *snapRecorder) open(d *device, spec string) {
	r.device(d.index)
	a := d.alloc
	ra := &recAlloc{inner: a, stream: d.stream, cat: d.cat, rec: r, d: d}
	d.alloc, d.stream, d.cat = ra, ra, ra
	if rel, ok := a.(gpualloc.Releaser); ok {
		d.alloc = &recReleaser{ra, rel}
	}
	if r.settings != nil {
		return
	}
	s := snapshot.DefaultSettings()
	if sr, ok := a.(snapshot.SettingsReporter); ok {
		s = sr.AllocatorSettings()
	}
	if spec != "" {
		other := map[string]any{snapshot.StrategyKey: spec}
		for k, v := range s.Other {
			other[k] = v
		}
		s.Other = other
	}
	r.settings = &s
}

// The allocator_settings key, and its value, by which a replay's snapshot
// says that its times are event indexes.
const (
	timeSourceKey   = "time_us"
	indexTimeSource = "event index (the replayed trace records no times)"
)

func (r *snapRecorder) add(dev int, e snapEntry) {
	d := r.devs[dev]
	switch {
	case r.ringSize > 0 && len(d.ring) == r.ringSize:
		if d.ring[d.next].unknown() {
			d.unknown--
		}
		if e.unknown() {
			d.unknown++
		}
		d.ring[d.next] = e
		d.next = (d.next + 1) % r.ringSize
	case r.ringSize > 0:
		if e.unknown() {
			d.unknown++
		}
		d.ring = append(d.ring, e)
	default:
		d.log.add(&e)
		if e.unknown() {
			d.lastUnknown = d.log.n
		}
	}
}

// unknown reports whether e's category is "unknown" in a snapshot with
// categories: an entry other than an alloc, a free or an oom has none.
func (e *snapEntry) unknown() bool {
	switch e.action {
	case actAlloc, actFreeRequested, actFreeCompleted, actOOM:
		return e.cat == gpualloc.CategoryUnknown
	}
	return true
}

// kept returns the number of entries kept.
func (d *snapDevice) kept() int {
	n := len(d.ring) + d.log.n
	if d.window > 0 {
		n = min(n, d.window)
	}
	return n
}

// hasUnknown reports whether an entry kept has the category "unknown" (see
// snapEntry.unknown).
func (d *snapDevice) hasUnknown() bool {
	return d.unknown > 0 || d.lastUnknown > 0 && d.lastUnknown > d.log.n-d.kept()
}

// each calls f with each entry kept, oldest first, until f returns false;
// it may be called once.
func (d *snapDevice) each(f func(e *snapEntry) bool) error {
	for j := range d.ring {
		if !f(&d.ring[(d.next+j)%len(d.ring)]) {
			return nil
		}
	}
	skip := d.log.n - d.kept() // the entries logged before the window
	return d.log.each(func(e *snapEntry) bool {
		if skip > 0 {
			skip--
			return true
		}
		return f(e)
	})
}

// begin notes the allocation about to be made.
func (r *snapRecorder) begin(stream uint64, cat gpualloc.Category) {
	r.stream, r.cat = stream, cat
	if cat != gpualloc.CategoryUnknown {
		r.cats = true
	}
}

func (r *snapRecorder) alloc(dev int, b gpualloc.Block, requested int64) {
	r.devs[dev].live[b.Addr] = liveBlock{size: b.Size, requested: requested, stream: r.stream, cat: r.cat, stack: r.stack}
	r.add(dev, snapEntry{action: actAlloc, addr: b.Addr, size: requested, stream: r.stream, timeUS: r.timeUS, cat: r.cat, stack: r.stack})
}

// free records the free of b, before the strategy frees it.
func (r *snapRecorder) free(dev int, b gpualloc.Block) {
	d := r.devs[dev]
	lb := d.live[b.Addr]
	delete(d.live, b.Addr)
	r.stream, r.cat = lb.stream, lb.cat
	e := snapEntry{action: actFreeRequested, addr: b.Addr, size: lb.requested, stream: lb.stream, timeUS: r.timeUS, cat: lb.cat, stack: lb.stack}
	r.add(dev, e)
	e.action = actFreeCompleted
	r.add(dev, e)
}

func (r *snapRecorder) oom(dev int, size, deviceFree int64) {
	r.add(dev, snapEntry{action: actOOM, addr: uint64(max(deviceFree, 0)), size: size, stream: r.stream, timeUS: r.timeUS, cat: r.cat, stack: r.stack})
}

func (r *snapRecorder) segmentAlloc(dev int, addr uint64, size int64) {
	r.devs[dev].segs[addr] = region{size: size, stream: r.stream}
	r.add(dev, snapEntry{action: actSegmentAlloc, addr: addr, size: size, stream: r.stream, timeUS: r.timeUS})
}

func (r *snapRecorder) segmentFree(dev int, addr uint64, size int64) {
	r.drop(dev, r.devs[dev].segs, actSegmentFree, addr, size)
}

// drop records the end of a device allocation or mapping at addr, kept in
// m, with the stream it was made on.
func (r *snapRecorder) drop(dev int, m map[uint64]region, action uint8, addr uint64, size int64) {
	stream := m[addr].stream
	delete(m, addr)
	e := snapEntry{action: action, addr: addr, size: size, stream: stream, timeUS: r.timeUS}
	if r.releasing {
		e.cat, r.released = catEmptyCache, true
	}
	r.add(dev, e)
}

func (r *snapRecorder) reserve(dev int, addr uint64, size int64) {
	r.devs[dev].reserved[addr] = &vrange{size: size}
}

func (r *snapRecorder) unreserve(dev int, addr uint64) { delete(r.devs[dev].reserved, addr) }

func (r *snapRecorder) segmentMap(dev int, addr uint64, size int64) {
	d := r.devs[dev]
	d.mapped[addr] = region{size: size, stream: r.stream}
	if size > smallSegment {
		if _, v := d.rangeOf(addr); v != nil {
			v.large = true
		}
	}
	r.add(dev, snapEntry{action: actSegmentMap, addr: addr, size: size, stream: r.stream, timeUS: r.timeUS})
}

func (r *snapRecorder) segmentUnmap(dev int, addr uint64, size int64) {
	r.drop(dev, r.devs[dev].mapped, actSegmentUnmap, addr, size)
}

// rangeOf returns the address of the reserved range that holds addr and
// the range, or addr and nil when none does. O(ranges).
func (d *snapDevice) rangeOf(addr uint64) (uint64, *vrange) {
	for a, v := range d.reserved {
		if a <= addr && addr < a+uint64(v.size) {
			return a, v
		}
	}
	return addr, nil
}

// streamed returns the snapshot of the replay: the trace entries kept, read
// as they are written, and the segments as they are now. It fails when a
// live block lies outside the device memory the strategy holds, which no
// snapshot can show. The trace entries can be read once.
func (r *snapRecorder) streamed() (*snapshot.Stream, error) {
	s := &snapshot.Stream{AllocatorSettings: r.settings, Devices: len(r.devs)}
	if r.indexTimes && r.settings != nil {
		set := *r.settings
		set.Other = map[string]any{timeSourceKey: indexTimeSource}
		for k, v := range r.settings.Other {
			set.Other[k] = v
		}
		s.AllocatorSettings = &set
	}
	s.Frames, s.Stacks = r.frames, r.stacks
	empty := snapshot.StackID(0) // the stack of a release the trace asked for
	if r.released {
		// The trace's frames and stacks, and after them the frame of
		// empty_cache and its stack.
		empty = snapshot.StackID(max(len(r.stacks), 1))
		s.Frames = append(slices.Clip(r.frames), emptyCacheFrame)
		s.Stacks = append(slices.Clip(r.stacks), []int32{int32(len(r.frames))})
		if len(r.stacks) == 0 {
			s.Stacks = [][]int32{nil, {0}}
		}
	}
	unknown, last := false, -1
	for i, d := range r.devs {
		if d == nil {
			continue
		}
		segs, err := d.segments(i, r.cats, r.stackOf)
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		s.Segments = append(s.Segments, segs...)
		if d.kept() > 0 {
			last = i
		}
		unknown = unknown || d.hasUnknown()
	}
	// The viewer needs one entry of category "unknown": without one, the
	// last entry of the last device says that the snapshot was taken, as
	// PyTorch's does, in place of the oldest when the device keeps no more.
	taken := -1
	if r.cats && !unknown {
		taken = last
	}
	var te snapshot.TraceEntry
	s.Entries = func(dev int, yield func(*snapshot.TraceEntry) bool) error {
		d := r.devs[dev]
		if d == nil {
			return nil
		}
		skip := dev == taken && r.max > 0 && d.kept() == r.max
		more, at := true, int64(0)
		err := d.each(func(e *snapEntry) bool {
			at = e.timeUS
			if skip {
				skip = false
				return true
			}
			te = snapshot.TraceEntry{Action: snapActions[e.action], Addr: e.addr, Size: e.size, Stream: e.stream, TimeUS: e.timeUS, Stack: r.stackOf(e.stack)}
			if (e.action == actSegmentFree || e.action == actSegmentUnmap) && e.cat == catEmptyCache {
				te.Stack, te.EmptyCache = empty, true
			}
			if r.cats {
				te.Category = gpualloc.CategoryUnknown.String()
				if !e.unknown() {
					te.Category = e.cat.String()
				}
			}
			more = yield(&te)
			return more
		})
		if err != nil || !more || dev != taken {
			return err
		}
		te = snapshot.TraceEntry{Action: snapshot.TakeSnapshot, TimeUS: at, Category: gpualloc.CategoryUnknown.String()}
		yield(&te)
		return nil
	}
	return s, nil
}

// stackOf returns the StackID of the snapshot for stack id of the trace:
// id itself, or 0 where the trace's table has no such stack.
func (r *snapRecorder) stackOf(id uint32) snapshot.StackID {
	if int(id) >= len(r.stacks) {
		return 0
	}
	return snapshot.StackID(id)
}

// collect reads the entries of s, the recorder's stream, into a snapshot.
func (r *snapRecorder) collect(s *snapshot.Stream) (*snapshot.Snapshot, error) {
	traces := make([][]snapshot.TraceEntry, s.Devices)
	for d := range s.Devices {
		var t []snapshot.TraceEntry
		if r.devs[d] != nil {
			t = make([]snapshot.TraceEntry, 0, r.devs[d].kept()+1) // and the snapshot entry
		}
		if err := s.Entries(d, func(e *snapshot.TraceEntry) bool { t = append(t, *e); return true }); err != nil {
			return nil, err
		}
		traces[d] = t
	}
	out := snapshot.New(s.Segments, traces...)
	out.AllocatorSettings, out.Frames, out.Stacks = s.AllocatorSettings, s.Frames, s.Stacks
	return out, nil
}

// segments returns the device's segments in address order, each tiled by
// its blocks.
func (d *snapDevice) segments(dev int, cats bool, stackOf func(uint32) snapshot.StackID) ([]snapshot.Segment, error) {
	var segs []snapshot.Segment
	for addr, g := range d.segs {
		segs = append(segs, snapshot.Segment{Device: dev, Address: addr, TotalSize: g.size, Stream: g.stream, SegmentType: segmentType(g.size <= smallSegment)})
	}
	// Mapped pages: runs of adjacent pages of one reserved range.
	pages := make([]uint64, 0, len(d.mapped))
	for a := range d.mapped {
		pages = append(pages, a)
	}
	slices.Sort(pages)
	for i := 0; i < len(pages); {
		start := pages[i]
		base, _ := d.rangeOf(start)
		first := d.mapped[start]
		end := start + uint64(first.size)
		j := i + 1
		for ; j < len(pages) && pages[j] == end && sameRange(d, pages[j], base); j++ {
			end += uint64(d.mapped[pages[j]].size)
		}
		small := true
		if v := d.reserved[base]; v != nil {
			small = !v.large
		}
		segs = append(segs, snapshot.Segment{Device: dev, Address: start, TotalSize: int64(end - start), Stream: first.stream,
			SegmentType: segmentType(small), IsExpandable: true})
		i = j
	}
	slices.SortFunc(segs, func(a, b snapshot.Segment) int { return cmp.Compare(a.Address, b.Address) })

	blocks := make([]uint64, 0, len(d.live))
	for a := range d.live {
		blocks = append(blocks, a)
	}
	slices.Sort(blocks)
	k := 0
	for i := range segs {
		sg := &segs[i]
		end := sg.Address + uint64(sg.TotalSize)
		at := sg.Address
		for ; k < len(blocks) && blocks[k] < end; k++ {
			a := blocks[k]
			b := d.live[a]
			if a < at || a+uint64(b.size) > end {
				return nil, fmt.Errorf("block at %#x of %d bytes lies outside the device memory the strategy holds", a, b.size)
			}
			if a > at {
				sg.Blocks = append(sg.Blocks, snapshot.Block{Address: at, Size: int64(a - at), State: snapshot.Inactive})
			}
			blk := snapshot.Block{Address: a, Size: b.size, RequestedSize: b.requested, State: snapshot.ActiveAllocated, Stack: stackOf(b.stack)}
			if cats {
				blk.Category = b.cat.String()
			}
			sg.Blocks = append(sg.Blocks, blk)
			sg.AllocatedSize += b.size
			sg.RequestedSize += b.requested
			at = a + uint64(b.size)
		}
		if at < end {
			sg.Blocks = append(sg.Blocks, snapshot.Block{Address: at, Size: int64(end - at), State: snapshot.Inactive})
		}
		sg.ActiveSize = sg.AllocatedSize
	}
	if k < len(blocks) {
		a := blocks[k]
		return nil, fmt.Errorf("block at %#x of %d bytes lies outside the device memory the strategy holds", a, d.live[a].size)
	}
	return segs, nil
}

// sameRange reports whether addr lies in the reserved range at base.
func sameRange(d *snapDevice, addr, base uint64) bool {
	a, _ := d.rangeOf(addr)
	return a == base
}

func segmentType(small bool) string {
	if small {
		return "small"
	}
	return "large"
}

// snapshot hands the replay's snapshot to Config.SnapshotStream, or builds
// it for Config.Snapshot, and stops the recording.
func (e *engine) snapshot() error {
	r := e.rec
	e.rec = nil
	defer r.spill.close()
	if err := r.spillErr(); err != nil {
		return fmt.Errorf("%ssnapshot: %w", e.prefix(), err)
	}
	s, err := r.streamed()
	if err == nil {
		if e.cfg.SnapshotStream != nil {
			err = e.cfg.SnapshotStream(s)
		} else {
			var snap *snapshot.Snapshot
			if snap, err = r.collect(s); err == nil {
				err = e.cfg.Snapshot(snap)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("%ssnapshot: %w", e.prefix(), err)
	}
	return nil
}

// spillErr returns the error of the spill file, if any.
func (r *snapRecorder) spillErr() error {
	if r.spill == nil {
		return nil
	}
	return r.spill.err
}
