package traces

import (
	"errors"
	"io"
	"strconv"

	"github.com/gpualloc/gpualloc/strategy/pytorch/snapshot"
)

// A SnapshotReader yields the allocations and frees of a PyTorch memory
// snapshot as Events. It implements [Reader].
//
// An "alloc" entry of the snapshot's trace is an OpAlloc of its requested
// size, a "free_completed" an OpFree; the other actions are not events (the
// snapshot package models them all). The Event's ID is the block's address, tagged
// as a hexadecimal id (see [IDKey]), so that a trace converted to the native
// format and read back pairs allocations and frees the same way. Stream and
// device are the entry's.
//
// The trace is the tail of a ring buffer: blocks may be live before its
// first entry. The reader rebuilds them by walking each device's trace
// backwards from the segments at dump time (see
// [snapshot.Snapshot.InitialState]; a snapshot whose trace does not fit its
// segments is still read, from the best state rebuilt). The blocks live at
// the start are yielded first, as OpAlloc events of their requested size
// ordered by device and address, with the time of the trace's first entry;
// then the trace follows, so that no free refers to an unknown block.
//
// Devices' traces are merged by time when every entry has a time, and
// concatenated in device order otherwise (old files have no times). Times
// are made non-decreasing by raising a time that goes backwards to the one
// before it.
//
// The whole snapshot is in memory (see [snapshot.Read]); yielding events
// costs O(1) each and allocates nothing.
type SnapshotReader struct {
	name   string
	opts   Options
	snap   *snapshot.Snapshot
	closer io.Closer

	start   []initialBlock // blocks live before the trace
	refs    []entryRef     // alloc and free_completed entries, in order
	next    int            // index in start, then len(start)+index in refs
	hasTime bool
	time0   int64 // time of the start events
	last    int64 // time of the previous event

	ev  Event
	err error

	live      liveTable
	freeSlots []int32
	nslots    int32

	skipped   int64
	firstSkip error
}

var _ Reader = (*SnapshotReader)(nil)

// initialBlock is a block live before the first entry of the trace.
type initialBlock struct {
	device int
	addr   uint64
	size   int64
	stream uint64
}

// entryRef locates an entry of a Snapshot's traces.
type entryRef struct {
	device int32
	index  int32
}

// NewSnapshotReader returns a reader of the snapshot that src holds, named
// name in errors. It reads src whole with [snapshot.Read], whose errors it
// returns as a [*ParseError] (wrapping [ErrNotTrace] when src is not a
// snapshot); it does not close src.
func NewSnapshotReader(src io.Reader, name string, opts Options) (*SnapshotReader, error) {
	s, err := snapshot.Read(src, name)
	if err != nil {
		return nil, snapshotError(err)
	}
	return newSnapshotReader(s, name, opts), nil
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

// newSnapshotReader returns a reader of the snapshot's allocations and
// frees, named name in errors.
func newSnapshotReader(s *snapshot.Snapshot, name string, opts Options) *SnapshotReader {
	r := &SnapshotReader{name: name, opts: opts, snap: s, time0: NoTime, last: NoTime}
	r.live.init(10)
	r.start = initialBlocks(s)
	r.hasTime = hasTime(s)
	r.refs = mergedRefs(s, r.hasTime)
	if r.hasTime {
		for _, t := range s.DeviceTraces {
			if len(t) > 0 && (r.time0 == NoTime || t[0].TimeUS < r.time0) {
				r.time0 = t[0].TimeUS
			}
		}
	}
	return r
}

// hasTime reports whether the snapshot's trace has entries and all of them
// have a time.
func hasTime(s *snapshot.Snapshot) bool {
	n := 0
	for _, t := range s.DeviceTraces {
		for _, e := range t {
			if e.TimeUS == snapshot.NoTime {
				return false
			}
			n++
		}
	}
	return n > 0
}

// isEvent reports whether a trace entry is an allocation or a free.
func isEvent(action snapshot.Action) bool {
	return action == snapshot.Alloc || action == snapshot.FreeCompleted
}

// initialBlocks returns the blocks live before the first entry of the
// trace, ordered by device and address.
func initialBlocks(s *snapshot.Snapshot) []initialBlock {
	var blocks []initialBlock
	for _, dev := range s.Devices() {
		st, _ := s.InitialState(dev) // the best state, even when inconsistent
		for _, e := range st.Allocs() {
			blocks = append(blocks, initialBlock{dev, e.Addr, e.Size, e.Stream})
		}
	}
	return blocks
}

// mergedRefs returns the alloc and free_completed entries of all devices in
// replay order: merged by time, or device after device.
func mergedRefs(s *snapshot.Snapshot, byTime bool) []entryRef {
	var refs []entryRef
	if !byTime {
		for dev, t := range s.DeviceTraces {
			for i := range t {
				if isEvent(t[i].Action) {
					refs = append(refs, entryRef{int32(dev), int32(i)})
				}
			}
		}
		return refs
	}
	pos := make([]int, len(s.DeviceTraces))
	for {
		best := -1
		for dev, t := range s.DeviceTraces {
			for pos[dev] < len(t) && !isEvent(t[pos[dev]].Action) {
				pos[dev]++
			}
			if pos[dev] < len(t) && (best < 0 || t[pos[dev]].TimeUS < s.DeviceTraces[best][pos[best]].TimeUS) {
				best = dev
			}
		}
		if best < 0 {
			return refs
		}
		refs = append(refs, entryRef{int32(best), int32(pos[best])})
		pos[best]++
	}
}

// Scan advances to the next event, which Event then returns. It returns
// false at the end of the trace or at an error, which Err then returns.
func (r *SnapshotReader) Scan() bool {
	for r.err == nil {
		var err error
		switch i := r.next; {
		case i < len(r.start):
			b := r.start[i]
			r.ev = Event{Op: OpAlloc, Size: b.size, Stream: b.stream, Device: int32(b.device), TimeUS: r.time0}
			err = r.alloc(b.addr, "segments")
		case i-len(r.start) < len(r.refs):
			ref := r.refs[i-len(r.start)]
			e := &r.snap.DeviceTraces[ref.device][ref.index]
			t := e.TimeUS
			if !r.hasTime {
				t = NoTime
			} else if t < r.last {
				t = r.last
			}
			r.ev = Event{Size: e.Size, Stream: e.Stream, Device: int32(ref.device), TimeUS: t}
			where := "device_traces[" + strconv.Itoa(int(ref.device)) + "][" + strconv.Itoa(int(ref.index)) + "]"
			if e.Action == snapshot.Alloc {
				r.ev.Op = OpAlloc
				err = r.alloc(e.Addr, where)
			} else {
				r.ev.Op = OpFree
				err = r.free(e.Addr, where)
			}
		default:
			return false
		}
		r.next++
		if err == nil {
			r.last = r.ev.TimeUS
			return true
		}
		if !r.opts.Lenient {
			r.err = err
			return false
		}
		r.skipped++
		if r.firstSkip == nil {
			r.firstSkip = err
		}
	}
	return false
}

func (r *SnapshotReader) errorf(where string, msg string) error {
	return &ParseError{Name: r.name, Msg: where + ": " + msg}
}

func hexAddr(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }

// alloc completes r.ev, an allocation of addr, and makes it live.
func (r *SnapshotReader) alloc(addr uint64, where string) error {
	if addr > idValueMask {
		return r.errorf(where, "address "+hexAddr(addr)+" too large for an id")
	}
	if r.ev.Size <= 0 {
		return r.errorf(where, "alloc of "+hexAddr(addr)+" with size "+strconv.FormatInt(r.ev.Size, 10))
	}
	r.ev.ID = addr | idHexTag
	r.ev.Slot = r.nslots
	if n := len(r.freeSlots); n > 0 {
		r.ev.Slot = r.freeSlots[n-1]
	}
	if !r.live.insert(liveInfo{key: r.ev.ID, size: r.ev.Size, stream: r.ev.Stream, slot: r.ev.Slot, device: r.ev.Device}) {
		return r.errorf(where, "alloc of "+hexAddr(addr)+" that is already live")
	}
	if n := len(r.freeSlots); n > 0 {
		r.freeSlots = r.freeSlots[:n-1]
	} else {
		r.nslots++
	}
	return nil
}

// free completes r.ev, the free of addr, and makes it not live.
func (r *SnapshotReader) free(addr uint64, where string) error {
	r.ev.ID = addr&idValueMask | idHexTag
	i := -1
	if addr <= idValueMask {
		i = r.live.find(r.ev.ID)
	}
	if i < 0 {
		return r.errorf(where, "free_completed of "+hexAddr(addr)+" never allocated")
	}
	a := &r.live.e[i]
	if a.device != r.ev.Device {
		return r.errorf(where, "free_completed of "+hexAddr(addr)+" on device "+strconv.Itoa(int(r.ev.Device))+
			", allocated on device "+strconv.Itoa(int(a.device)))
	}
	r.ev.Slot, r.ev.Size, r.ev.Stream = a.slot, a.size, a.stream
	r.live.removeAt(i)
	r.freeSlots = append(r.freeSlots, r.ev.Slot)
	return nil
}

// Event returns the event found by the last call to Scan.
func (r *SnapshotReader) Event() Event { return r.ev }

// Err returns the error that ended the trace, or nil at its clean end.
func (r *SnapshotReader) Err() error { return r.err }

// Name returns the trace's name, as given to NewSnapshotReader.
func (r *SnapshotReader) Name() string { return r.name }

// Format returns "PyTorch snapshot".
func (r *SnapshotReader) Format() string { return pytorchFormatName }

const pytorchFormatName = "PyTorch snapshot"

// Columns returns the native columns the events fill: op, id, size,
// stream, device, and time_us when the snapshot has times.
func (r *SnapshotReader) Columns() []Column {
	cols := []Column{ColOp, ColID, ColSize, ColStream, ColDevice}
	if r.hasTime {
		cols = append(cols, ColTime)
	}
	return cols
}

// HasTime reports whether the events have times.
func (r *SnapshotReader) HasTime() bool { return r.hasTime }

// Initial returns the number of blocks live before the trace's first
// entry: the reader's first events.
func (r *SnapshotReader) Initial() int { return len(r.start) }

// Skipped returns the number of bad events skipped in lenient mode.
func (r *SnapshotReader) Skipped() int64 { return r.skipped }

// FirstSkipped returns the error of the first event skipped, or nil.
func (r *SnapshotReader) FirstSkipped() error { return r.firstSkip }

// Live returns the number of live allocations after the last event found.
func (r *SnapshotReader) Live() int { return r.live.n }

// Slots returns the number of distinct slots handed out so far, the peak
// number of live allocations.
func (r *SnapshotReader) Slots() int { return int(r.nslots) }

// Close closes the file the reader came from, if it owns one.
func (r *SnapshotReader) Close() error {
	if r.closer == nil {
		return nil
	}
	err := r.closer.Close()
	r.closer = nil
	return err
}

// sniffPyTorch reports whether head may start a PyTorch snapshot: a pickle
// of protocol 2 to 5. The reader answers ErrNotTrace for other pickles.
func sniffPyTorch(head []byte) bool {
	return len(head) >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5
}

func init() {
	registerFormat(format{name: pytorchFormatName, sniff: sniffPyTorch, open: openPyTorch})
}

func openPyTorch(src io.Reader, name string, opts Options) (FileReader, error) {
	r, err := NewSnapshotReader(src, name, opts)
	if err != nil {
		return nil, err
	}
	return r, nil
}
