package traces

import (
	"io"
	"sort"
	"strconv"
)

// A snapshotReader yields the allocations and frees of a PyTorch memory
// snapshot as Events, and its checker checks them.
//
// An "alloc" entry of the snapshot's trace is an OpAlloc of its requested
// size, a "free_completed" an OpFree; the other actions are not events (see
// [Snapshot.Traces] for them). The Event's ID is the block's address, tagged
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
// The whole snapshot is in memory (see [ReadSnapshot]); yielding events
// costs O(1) each and allocates nothing.
type snapshotReader struct {
	checker
	snap *Snapshot

	start   []initialBlock // blocks live before the trace
	refs    []entryRef     // alloc and free_completed entries, in order
	next    int            // index in start, then len(start)+index in refs
	hasTime bool
	time0   int64 // time of the start events
}

const pytorchFormatName = "PyTorch snapshot"

var snapshotWords = vocab{alloc: "alloc", free: "free_completed", unknown: "free_completed of %s never allocated"}

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

// newSnapshotReader returns a reader of the snapshot that src holds, named
// name in errors. It reads src whole (see [ReadSnapshot], whose errors it
// returns); it does not close src.
func newSnapshotReader(src io.Reader, name string, opts Options) (*snapshotReader, error) {
	s, err := ReadSnapshot(src, name)
	if err != nil {
		return nil, err
	}
	return s.reader(name, opts), nil
}

// reader returns a reader of the snapshot's allocations and frees, named
// name in errors.
func (s *Snapshot) reader(name string, opts Options) *snapshotReader {
	r := &snapshotReader{snap: s, time0: NoTime}
	r.start = s.initialBlocks()
	r.hasTime = s.hasTime()
	r.refs = s.mergedRefs(r.hasTime)
	cols := []Column{ColOp, ColID, ColSize, ColStream, ColDevice}
	if r.hasTime {
		cols = append(cols, ColTime)
	}
	r.init(name, pytorchFormatName, cols, opts, &snapshotWords)
	r.clamp, r.where = true, r.position
	if r.hasTime {
		for _, t := range s.Traces {
			if len(t) > 0 && (r.time0 == NoTime || t[0].TimeUS < r.time0) {
				r.time0 = t[0].TimeUS
			}
		}
	}
	return r
}

// hasTime reports whether the snapshot's trace has entries and all of them
// have a time.
func (s *Snapshot) hasTime() bool {
	n := 0
	for _, t := range s.Traces {
		for _, e := range t {
			if e.TimeUS == NoTime {
				return false
			}
			n++
		}
	}
	return n > 0
}

// isEvent reports whether a trace entry is an allocation or a free.
func isEvent(action string) bool {
	return action == "alloc" || action == "free_completed"
}

// initialBlocks returns the blocks live before the first entry of the
// trace, ordered by device and address.
func (s *Snapshot) initialBlocks() []initialBlock {
	live := map[[2]uint64]initialBlock{} // (device, address)
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if b.Live() {
				live[[2]uint64{uint64(seg.Device), b.Address}] = initialBlock{seg.Device, b.Address, b.RequestedSize, seg.Stream}
			}
		}
	}
	for dev, t := range s.Traces {
		for i := len(t) - 1; i >= 0; i-- {
			e := &t[i]
			k := [2]uint64{uint64(dev), e.Addr}
			switch e.Action {
			case "alloc":
				delete(live, k)
			case "free_completed":
				live[k] = initialBlock{dev, e.Addr, e.Size, e.Stream}
			}
		}
	}
	blocks := make([]initialBlock, 0, len(live))
	for _, b := range live {
		blocks = append(blocks, b)
	}
	sort.Slice(blocks, func(i, j int) bool {
		if blocks[i].device != blocks[j].device {
			return blocks[i].device < blocks[j].device
		}
		return blocks[i].addr < blocks[j].addr
	})
	return blocks
}

// mergedRefs returns the alloc and free_completed entries of all devices in
// replay order: merged by time, or device after device.
func (s *Snapshot) mergedRefs(byTime bool) []entryRef {
	var refs []entryRef
	if !byTime {
		for dev, t := range s.Traces {
			for i := range t {
				if isEvent(t[i].Action) {
					refs = append(refs, entryRef{int32(dev), int32(i)})
				}
			}
		}
		return refs
	}
	pos := make([]int, len(s.Traces))
	for {
		best := -1
		for dev, t := range s.Traces {
			for pos[dev] < len(t) && !isEvent(t[pos[dev]].Action) {
				pos[dev]++
			}
			if pos[dev] < len(t) && (best < 0 || t[pos[dev]].TimeUS < s.Traces[best][pos[best]].TimeUS) {
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
func (r *snapshotReader) Scan() bool {
	for r.err == nil {
		var addr uint64
		switch i := r.next; {
		case i < len(r.start):
			b := r.start[i]
			r.ev = Event{Op: OpAlloc, Size: b.size, Stream: b.stream, Device: int32(b.device), TimeUS: r.time0}
			addr = b.addr
		case i-len(r.start) < len(r.refs):
			ref := r.refs[i-len(r.start)]
			e := &r.snap.Traces[ref.device][ref.index]
			t := e.TimeUS
			if !r.hasTime {
				t = NoTime
			}
			r.ev = Event{Op: OpFree, Size: e.Size, Stream: e.Stream, Device: int32(ref.device), TimeUS: t}
			if e.Action == "alloc" {
				r.ev.Op = OpAlloc
			}
			addr = e.Addr
		default:
			return false
		}
		err := r.decode(addr)
		if err == nil {
			// A free takes its allocation's size and stream, and must be
			// on its device.
			err = r.event(&record{hasSize: r.ev.Op == OpAlloc, hasDevice: true})
		}
		r.next++
		if err == nil {
			return true
		}
		r.err = r.reject(err)
	}
	return false
}

// position returns where the current entry is, for errors.
func (r *snapshotReader) position() string {
	if i := r.next - len(r.start); i >= 0 && i < len(r.refs) {
		return "device_traces[" + strconv.Itoa(int(r.refs[i].device)) + "][" + strconv.Itoa(int(r.refs[i].index)) + "]"
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

// Snapshot returns the snapshot the reader replays.
func (r *snapshotReader) Snapshot() *Snapshot { return r.snap }

// Initial returns the number of blocks live before the trace's first
// entry: the reader's first events.
func (r *snapshotReader) Initial() int { return len(r.start) }

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
