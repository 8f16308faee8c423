package snapshot

import (
	"fmt"
	"github.com/gpualloc/gpualloc/snapshot/internal/pickle"
	"io"
)

// A Stream is a snapshot whose trace entries are not held in memory: they
// are handed to [WriteStream] one at a time, device by device, as it writes
// them, for example read back from a file that a recording spilled them
// to. Its fields mean what those of [Snapshot] of the same names mean.
type Stream struct {
	Segments []Segment
	// Devices is the number of device traces: device_traces has one list
	// per device, 0 to Devices-1.
	Devices int
	// Entries calls yield with each trace entry of device d, oldest first,
	// until yield returns false; the entry is the caller's only during the
	// call. Its error stops the write and becomes WriteStream's.
	Entries           func(d int, yield func(*TraceEntry) bool) error
	AllocatorSettings *AllocatorSettings
	Frames            []Frame
	Stacks            [][]int32
}

// WriteStream writes s as [Write] writes the snapshot with the same
// segments, entries and settings: the same bytes. It holds one frame of
// output (64 KiB), the memo of distinct strings, frames and stacks, and one
// entry at a time, whatever the number of entries.
func WriteStream(w io.Writer, s *Stream, o WriteOptions) error {
	proto := o.Protocol
	if proto == 0 {
		proto = 4
	}
	if proto < 2 || proto > 4 {
		return fmt.Errorf("snapshot: write: pickle protocol %d: want 2, 3 or 4", o.Protocol)
	}
	p := &pickler{w: w, proto: proto, memo: map[string]uint32{}, frameList: s.Frames, stacks: s.Stacks,
		frameMemo: make([]int64, len(s.Frames)), stackMemo: make([]int64, len(s.Stacks))}
	for i := range p.frameMemo {
		p.frameMemo[i] = -1
	}
	for i := range p.stackMemo {
		p.stackMemo[i] = -1
	}
	// The header stands outside the frames, as Python writes it.
	if _, err := w.Write([]byte{pickle.OpProto, byte(proto)}); err != nil {
		return err
	}
	p.emptyDict()
	p.mark()
	p.str("segments")
	p.list(len(s.Segments), func(i int) { p.segment(&s.Segments[i]) })
	p.str("device_traces")
	var err error
	p.list(s.Devices, func(d int) {
		if err != nil {
			return
		}
		err = p.stream(func(yield func(*TraceEntry) bool) error { return s.Entries(d, yield) })
	})
	if err != nil {
		return err
	}
	if s.AllocatorSettings != nil {
		p.str("allocator_settings")
		p.settings(s.AllocatorSettings)
	}
	p.op(pickle.OpSetItems)
	p.op(pickle.OpStop)
	p.flushFrame()
	return p.err
}

// stream writes the list of the entries that each calls yield with, in
// batches of APPENDS as list does: the same bytes for the same entries,
// without knowing their number first.
func (p *pickler) stream(each func(yield func(*TraceEntry) bool) error) error {
	p.op(pickle.OpEmptyList)
	n := 0
	err := each(func(e *TraceEntry) bool {
		if n == 0 {
			p.mark()
		}
		p.entry(e)
		n++
		if n == batchSize {
			p.op(pickle.OpAppends)
			p.end()
			n = 0
		}
		return p.err == nil
	})
	if n > 0 {
		p.op(pickle.OpAppends)
		p.end()
	}
	p.end()
	return err
}
