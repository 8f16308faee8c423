package traces

import (
	"errors"
	"io"
	"strconv"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// A snapshotReader yields the allocations and frees of a PyTorch memory
// snapshot as Events, and its checker checks them.
//
// An "alloc" entry of the snapshot's trace is an OpAlloc of its requested
// size, a "free_completed" an OpFree, and a cache release that
// torch.cuda.empty_cache() made an OpRelease of its device (see
// isCacheRelease). An "oom" entry, an allocation that PyTorch failed, is an
// OpAlloc of the size it records (the request as PyTorch rounded it), with
// an id of its own, followed at once by its OpFree: a replay makes the same
// request, which fails where the device is as full as it was, and is given
// back at once where it succeeds; oom entries also count in AllocFailures.
// The other actions are not events (the snapshot package models them all).
//
// The reader knows the memory of a device (DeviceCapacity) that the
// snapshot records (the "device_memory" that a replay's snapshot writes in
// its allocator_settings) or, since PyTorch's snapshots do not record it,
// whose trace records an oom: the device's free bytes then plus the
// segments PyTorch held (see [snapshot.DeviceMemory]). A replay with no
// capacity of its own takes it, so that the device is as full as the record
// says. The Event's ID is the block's address, tagged
// as a hexadecimal id (see idKeyOf), so that a trace converted to the native
// format and read back pairs allocations and frees the same way. Stream and
// device are the entry's.
//
// The trace is the tail of a ring buffer: blocks may be live before its
// first entry. The reader rebuilds them by walking each device's trace
// backwards from the blocks live at dump time (the "active_allocated" and
// "active_pending_free" blocks of the segments): undoing an alloc makes its
// block not live, undoing a free_completed makes its block live with the
// size the free gives. The blocks left live are yielded first, as OpAlloc
// events ordered by device and address, with the time of the trace's first
// entry; then the trace follows, so that no free refers to an unknown block.
//
// Devices' traces are merged by time when every entry has a time, and
// concatenated in device order otherwise (old files have no times). Times
// are made non-decreasing by raising a time that goes backwards to the one
// before it.
//
// Categories: an entry or a block may record what it holds under a
// "category" key, in memory_viz's names; PyTorch's own snapshots do not,
// so a snapshot usually has no category column. When one entry or block has
// one, the trace gains the category column: an alloc entry's category is
// its own, a block live before the trace takes the category of its first
// free_completed, or else of the block live at dump time at its address,
// and what records none is unknown. A name that is no category is an error.
//
// The whole snapshot is in memory, its traces as a compact read holds
// them (see [snapshot.ReadOptions]: 48 bytes an entry); the order of
// events is found as they are yielded (see eventOrder), each in
// O(devices), allocating nothing.
type snapshotReader struct {
	checker
	snap   *snapshot.Snapshot
	traces []snapshot.Trace // the snapshot's, by device

	start   []initialBlock // blocks live before the trace
	order   eventOrder     // the event entries, in replay order
	cur     entryRef       // the entry of event next, once curAt == next
	curAt   int
	next    int // index in start, then len(start) + the events of the trace so far
	hasTime bool
	time0   int64 // time of the start events

	oomFree bool              // the free of the current oom entry comes next
	ooms    uint64            // oom entries yielded
	memory  []int64           // per device, what DeviceCapacity returns
	states  []*snapshot.State // per device, Start's States
	private []uint64          // Start's Private
	pools   []snapshot.PoolID // Start's PrivatePools
	begin   startMemo         // what Start returns
}

const pytorchFormatName = "PyTorch snapshot"

var snapshotWords = vocab{alloc: "alloc", free: "free_completed", unknown: "free_completed of %s never allocated"}

// initialBlock is a block live before the first entry of the trace.
type initialBlock struct {
	device   int
	addr     uint64
	size     int64
	stream   uint64
	category string
	stack    snapshot.StackID
}

// entryRef locates an entry of a Snapshot's traces.
type entryRef struct {
	device int32
	index  int32
}

// newSnapshotReader returns a reader of the snapshot that src holds, named
// name in errors. It reads src whole with [snapshot.ReadWith], compactly
// and without the stacks unless opts.Stacks asks for them (see Event.Stack); it returns the read's errors as a
// [*ParseError] (wrapping [ErrNotTrace] when src is not a snapshot); it
// does not close src.
func newSnapshotReader(src io.Reader, name string, opts Options) (*snapshotReader, error) {
	s, err := snapshot.ReadWith(src, name, snapshot.ReadOptions{NoStacks: !opts.Stacks, TempDir: opts.TempDir})
	if err != nil {
		return nil, snapshotError(err)
	}
	r := snapshotReaderOf(s, name, opts)
	if err := r.traceErr(); err != nil {
		return nil, snapshotError(err)
	}
	return r, nil
}

// traceErr returns the first failure of the snapshot's traces to read
// their entries back from the temporary file of the read (see
// [snapshot.Trace.Err]), or nil: the walks over them check it when they
// end, and before an error of their own, which an entry not read may
// have caused.
func (r *snapshotReader) traceErr() error {
	for _, t := range r.traces {
		if err := t.Err(); err != nil {
			return err
		}
	}
	return nil
}

// snapshotError returns an error of snapshot.Read as a *ParseError.
func snapshotError(err error) error {
	var se *snapshot.Error
	if !errors.As(err, &se) {
		return err
	}
	pe := &ParseError{Name: se.Name, Msg: se.Msg, Err: se.Err}
	if errors.Is(err, snapshot.ErrNotSnapshot) {
		pe.Err = errors.Join(ErrNotTrace, se.Err)
	}
	return pe
}

// snapshotReaderOf returns a reader of the snapshot's allocations and
// frees, named name in errors.
func snapshotReaderOf(s *snapshot.Snapshot, name string, opts Options) *snapshotReader {
	r := &snapshotReader{snap: s, time0: NoTime, traces: tracesOf(s)}
	var cats bool
	r.hasTime, cats = timesAndCategories(r.traces)
	r.start, r.states, r.memory = initialBlocks(s)
	r.order = newEventOrder(r.traces, r.hasTime)
	r.curAt = -1
	r.private, r.pools = r.privateAllocs()
	cols := []Column{ColOp, ColID, ColSize, ColStream, ColDevice}
	if r.hasTime {
		cols = append(cols, ColTime)
	}
	if cats || blockCategories(s) {
		cols = append(cols, ColCategory)
		initialCategories(s, r.traces, r.start)
	}
	r.init(name, pytorchFormatName, cols, opts, &snapshotWords)
	r.clamp, r.where = true, r.position
	if r.hasTime {
		for _, t := range r.traces {
			if t.Len() > 0 && (r.time0 == NoTime || t.At(0).TimeUS < r.time0) {
				r.time0 = t.At(0).TimeUS
			}
		}
	}
	return r
}

// tracesOf returns the traces of the snapshot's devices.
func tracesOf(s *snapshot.Snapshot) []snapshot.Trace {
	out := make([]snapshot.Trace, s.NumTraces())
	for d := range out {
		out[d] = s.Trace(d)
	}
	return out
}

// timesAndCategories reports whether the traces have entries and all of
// them have a time, and whether an entry records a category: O(1) a
// trace, from what the read noted (snapshot.Trace.Timed, Categorized).
func timesAndCategories(traces []snapshot.Trace) (timed, cats bool) {
	n, untimed := 0, false
	for _, t := range traces {
		n += t.Len()
		untimed = untimed || !t.Timed()
		cats = cats || t.Categorized()
	}
	return n > 0 && !untimed, cats
}

// blockCategories reports whether a block of the snapshot records a
// category.
func blockCategories(s *snapshot.Snapshot) bool {
	for _, sg := range s.Segments {
		for _, b := range sg.Blocks {
			if b.Category != "" {
				return true
			}
		}
	}
	return false
}

// initialCategories gives each block live before the trace the category of
// its first free_completed entry, or else of the live block at its address
// in the snapshot's segments.
func initialCategories(s *snapshot.Snapshot, traces []snapshot.Trace, start []initialBlock) {
	type key struct {
		device int
		addr   uint64
	}
	idx := make(map[key]int, len(start))
	for i, b := range start {
		idx[key{b.device, b.addr}] = i
	}
	for _, sg := range s.Segments {
		for _, b := range sg.Blocks {
			if i, ok := idx[key{sg.Device, b.Address}]; ok && b.Live() {
				start[i].category = b.Category
			}
		}
	}
	for dev, t := range traces {
		seen := map[uint64]bool{}
		for i := range t.Len() {
			e := t.At(i)
			if (e.Action != snapshot.Alloc && e.Action != snapshot.FreeCompleted) || seen[e.Addr] {
				continue
			}
			seen[e.Addr] = true
			if i, ok := idx[key{dev, e.Addr}]; ok && e.Action == snapshot.FreeCompleted && e.Category != "" {
				start[i].category = e.Category
			}
		}
	}
}

// isEvent reports whether a trace entry is an allocation, a free or a
// failed allocation.
func isEvent(action snapshot.Action) bool {
	return action == snapshot.Alloc || action == snapshot.FreeCompleted || action == snapshot.OutOfMemory
}

// isEventAt reports whether entry i of a device's trace is an event: an
// allocation, a free, or the first entry of a cache release.
func isEventAt(t snapshot.Trace, i int) bool {
	return isEvent(t.Action(i)) || isCacheRelease(t, i)
}

// isCacheRelease reports whether entry i of a device's trace starts a
// release of the cache that no failing allocation caused, such as one the
// program asked for (torch.cuda.empty_cache). PyTorch records no entry of
// its own for it: emptyCache calls release_cached_blocks, whose
// release_block records a segment_free (a segment_unmap for expandable
// segments) per segment it gives back (c10/cuda/CUDACachingAllocator.cpp).
// The allocator also releases segments inside malloc when a cudaMalloc
// fails (release_available_cached_blocks, then release_cached_blocks, and
// the retry); those releases stay the allocator's own decision, which the
// replayed strategy takes again or not.
//
// The two are told apart by the entries' frames where the file records
// them: a segment_free or segment_unmap whose frames name empty_cache
// (snapshot.TraceEntry.EmptyCache) is a release, and a run of such entries
// is one release, yielded at its first entry. Where the frames do not say
// so (no frames recorded, or frames of malloc), the pattern decides: a
// malloc's release is followed by the segment_alloc (or segment_map) of
// the room it made, or by the oom it failed with, so a run of segment_free
// and segment_unmap entries is a release when what follows it is none of
// those (snapshot.Trace.ReleasesCache). Without frames, an empty_cache followed at once by an allocation
// that takes a new segment reads as a malloc's own release, and is not
// yielded.
func isCacheRelease(t snapshot.Trace, i int) bool {
	released := func(a snapshot.Action) bool { return a == snapshot.SegmentFree || a == snapshot.SegmentUnmap }
	if !released(t.Action(i)) {
		return false
	}
	// Only the first entry of a run is yielded: one whose frames name
	// empty_cache starts a run of its own after one whose frames do not,
	// and the other way round.
	if i > 0 && released(t.Action(i-1)) && t.At(i-1).EmptyCache == t.At(i).EmptyCache {
		return false
	}
	return t.ReleasesCache(i)
}

// initialBlocks returns the blocks live before the first entry of the
// trace, ordered by device and, within a device, as [startBlocks] orders
// them; the state of each device then; and the memory of each device as
// its oom entries tell it (0 where they do not).
func initialBlocks(s *snapshot.Snapshot) ([]initialBlock, []*snapshot.State, []int64) {
	var blocks []initialBlock
	var states []*snapshot.State
	var memory []int64
	rules, err := s.AllocatorSettings.Rules()
	if err != nil {
		rules = snapshot.DefaultRules()
	}
	for _, dev := range s.Devices() {
		st, _ := s.InitialStateWith(dev, rules) // the best state, even when inconsistent
		for len(states) <= dev {
			states = append(states, nil)
		}
		states[dev] = st
		for _, e := range startBlocks(st) {
			blocks = append(blocks, initialBlock{dev, e.Addr, e.Size, e.Stream, "", e.Stack})
		}
		m := s.AllocatorSettings.DeviceMemory(dev)
		if m == 0 {
			m = snapshot.DeviceMemory(st, s.Trace(dev), rules)
		}
		if m > 0 {
			for len(memory) <= dev {
				memory = append(memory, 0)
			}
			memory[dev] = m
		}
	}
	return blocks, states, memory
}

// startBlocks returns the blocks live in st as the alloc entries that
// would have made them, in the order in which a snapshot's reader yields
// them before its trace: the live blocks of st's segments, segment after
// segment in address order and in address order within each (the order
// in which a strategy's Restore returns them), then the unplaced ones in
// address order.
func startBlocks(st *snapshot.State) []snapshot.TraceEntry {
	var out []snapshot.TraceEntry
	for _, sg := range st.Segments {
		for _, b := range sg.Blocks {
			if b.Live() {
				out = append(out, snapshot.TraceEntry{Action: snapshot.Alloc, Addr: b.Address, Size: b.RequestedSize, Stream: sg.Stream, TimeUS: snapshot.NoTime, Stack: b.Stack})
			}
		}
	}
	return append(out, st.Unplaced...)
}

// Stacks returns the frames and stacks that the events' Stack indexes
// (see [StackReporter]): none unless the snapshot was read with
// [Options.Stacks].
func (r *snapshotReader) Stacks() ([]snapshot.Frame, [][]int32) { return r.snap.Frames, r.snap.Stacks }

// DeviceCapacity returns the memory of device dev as the snapshot's oom
// entries tell it, or 0 when they do not: the reader is a
// sim.CapacityReporter, whose replays take it as the device's size.
func (r *snapshotReader) DeviceCapacity(dev int) int64 {
	if dev < 0 || dev >= len(r.memory) {
		return 0
	}
	return r.memory[dev]
}

// An eventOrder walks the event entries of the traces (see isEventAt) in
// replay order: merged by time, the earliest first and the lower device
// on a tie, or device after device. It keeps a position per device: each
// step costs O(devices), and nothing is held per event.
type eventOrder struct {
	traces []snapshot.Trace
	byTime bool  // merge by time (more than one trace)
	pos    []int // per device, the next entry to look at
	dev    int   // when not byTime, the device walked
}

func newEventOrder(traces []snapshot.Trace, byTime bool) eventOrder {
	// One trace is in its own order, with or without times.
	return eventOrder{traces: traces, byTime: byTime && len(traces) > 1, pos: make([]int, len(traces))}
}

// next returns the next event entry, or false after the last.
func (o *eventOrder) next() (entryRef, bool) {
	if !o.byTime {
		for ; o.dev < len(o.traces); o.dev++ {
			t, p := o.traces[o.dev], &o.pos[o.dev]
			for *p < t.Len() {
				i := *p
				*p++
				if isEventAt(t, i) {
					return entryRef{int32(o.dev), int32(i)}, true
				}
			}
		}
		return entryRef{}, false
	}
	best := -1
	var bestTime int64
	for dev, t := range o.traces {
		for o.pos[dev] < t.Len() && !isEventAt(t, o.pos[dev]) {
			o.pos[dev]++
		}
		if o.pos[dev] >= t.Len() {
			continue
		}
		if tm := t.At(o.pos[dev]).TimeUS; best < 0 || tm < bestTime {
			best, bestTime = dev, tm
		}
	}
	if best < 0 {
		return entryRef{}, false
	}
	ref := entryRef{int32(best), int32(o.pos[best])}
	o.pos[best]++
	return ref, true
}

// restart returns a new walk of the same entries from the first.
func (o *eventOrder) restart() eventOrder { return newEventOrder(o.traces, o.byTime) }

// Scan advances to the next event, which Event then returns. It returns
// false at the end of the trace or at an error, which Err then returns.
func (r *snapshotReader) Scan() bool {
	for r.err == nil {
		var addr uint64
		var category string
		switch i := r.next; {
		case i < len(r.start):
			b := r.start[i]
			r.ev = Event{Op: OpAlloc, Size: b.size, Stream: b.stream, Device: int32(b.device), TimeUS: r.time0, Stack: uint32(b.stack)}
			addr, category = b.addr, b.category
		case r.curAt == i || r.advance(i):
			ref := r.cur
			e := r.traces[ref.device].At(int(ref.index))
			t := e.TimeUS
			if !r.hasTime {
				t = NoTime
			}
			r.ev = Event{Op: OpFree, Size: e.Size, Stream: e.Stream, Device: int32(ref.device), TimeUS: t, Stack: uint32(e.Stack)}
			if e.Action == snapshot.OutOfMemory {
				if r.oomEvent() {
					return true
				}
				continue
			}
			if e.Action == snapshot.Alloc {
				r.ev.Op = OpAlloc
			}
			if e.Action != snapshot.Alloc && e.Action != snapshot.FreeCompleted {
				r.ev = Event{Op: OpRelease, Device: int32(ref.device), TimeUS: t}
			}
			addr, category = e.Addr, e.Category
		default:
			if err := r.traceErr(); err != nil {
				r.err = snapshotError(err)
			}
			return false
		}
		var err error
		if r.ev.Op != OpRelease {
			err = r.decode(addr)
		}
		rec := record{hasSize: r.ev.Op == OpAlloc, hasDevice: true}
		if err == nil && category != "" && r.ev.Op != OpRelease {
			err = r.category(category, &rec)
		}
		if err == nil {
			// A free takes its allocation's size, stream and category, and
			// must be on its device.
			err = r.event(&rec)
		}
		r.next++
		if err == nil {
			return true
		}
		r.fail(err)
	}
	return false
}

// fail notes err, the current event's: r.err is the traces' failure to
// read back if they have one, else err as the checker rejects it.
func (r *snapshotReader) fail(err error) {
	if terr := r.traceErr(); terr != nil {
		r.err = snapshotError(terr)
		return
	}
	r.err = r.reject(err)
}

// advance makes r.cur the entry of event i, the one after the current,
// and reports whether there is one.
func (r *snapshotReader) advance(i int) bool {
	ref, ok := r.order.next()
	if ok {
		r.cur, r.curAt = ref, i
	}
	return ok
}

// oomEvent makes r.ev, a free of the current entry's size, the alloc of the
// current oom entry, or then its free, and reports whether it is an event.
func (r *snapshotReader) oomEvent() bool {
	if !r.oomFree {
		r.countFailure(r.ev.Device)
		r.ev.Op = OpAlloc
	}
	r.ev.ID = idTokenTag | r.ooms
	if r.oomFree {
		r.ooms++
		r.next++
	}
	r.oomFree = !r.oomFree
	err := r.event(&record{hasSize: r.ev.Op == OpAlloc, hasDevice: true})
	if err == nil {
		return true
	}
	r.fail(err)
	return false
}

// category sets the category of r.ev from a name the snapshot records; on
// a free, the checker then checks it against the allocation's.
func (r *snapshotReader) category(name string, rec *record) error {
	var c gpualloc.Category
	if c.UnmarshalText([]byte(name)) != nil {
		return r.errorf("unknown category %s (known: %s)", quote([]byte(name)), categoryNames)
	}
	r.ev.Category, rec.hasCategory = c, true
	return nil
}

// position returns where the current entry is, for errors.
func (r *snapshotReader) position() string {
	if r.next >= len(r.start) && r.curAt == r.next {
		return "device_traces[" + strconv.Itoa(int(r.cur.device)) + "][" + strconv.Itoa(int(r.cur.index)) + "]"
	}
	return "segments"
}

func hexAddr(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }

// decode sets the ID of r.ev, an event of addr, checking what the checker
// does not: that the address fits an ID, and that an alloc has a size.
func (r *snapshotReader) decode(addr uint64) error {
	switch {
	case addr > idValueMask && r.ev.Op == OpFree:
		return r.errorf(r.words.unknown, hexAddr(addr))
	case addr > idValueMask:
		return r.errorf("address %s too large for an id", hexAddr(addr))
	case r.ev.Op == OpAlloc && r.ev.Size <= 0:
		return r.errorf("alloc of %s with size %d", hexAddr(addr), r.ev.Size)
	}
	r.ev.ID = addr | idHexTag
	return nil
}

// sniffPyTorch reports whether head may start a PyTorch snapshot: a pickle
// of protocol 2 to 5. The reader answers ErrNotTrace for other pickles.
func sniffPyTorch(head []byte) bool {
	return len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5
}

func init() {
	registerFormat(format{name: pytorchFormatName, sniff: sniffPyTorch, open: openPyTorch})
}

func openPyTorch(src io.Reader, name string, opts Options) (formatReader, error) {
	return newSnapshotReader(src, name, opts)
}
