package cli

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	"github.com/gpualloc/gpualloc/traces"
)

// A decoded trace is decoded once, into memory, for the replays that share
// it: when several strategies (the variants of a sweep) replay a trace, the
// first of its replays to start decodes it and every replay then reads the
// events from memory (48 bytes an event), all of them in parallel. The
// events are dropped when the last replay is done with them. A trace of
// more than decodeLimit events is not held: its replays read the file
// each, streaming, as a lone replay does, so that memory stays bounded
// whatever the trace's length. Standard input cannot be read twice: it is
// held whatever its length.
type decoded struct {
	in    *input
	sizes *report.SizeCounter // counts the request sizes while decoding, when not nil
	users atomic.Int64        // replays that have not yet closed their reader

	once    sync.Once
	events  []traces.Event
	skipped int64
	err     error
	memory  sim.CapacityReporter // the devices' memory, when the reader knows it
	stream  bool                 // the trace is longer than decodeLimit: each replay reads the file
	format  string               // the trace's format, when the reader names it
	counted atomic.Bool          // a streaming replay counts the sizes
}

// decodeLimit is the most events a trace shared by several replays is held
// in memory with: 2^24 events, 768 MiB.
var decodeLimit = 1 << 24

// decodeOnce returns the trace of in, to be decoded once for users
// replays. With countSizes, the decoding counts the trace's request sizes
// for a report, in the decoded's sizes.
func (in *input) decodeOnce(users int, countSizes bool) *decoded {
	d := &decoded{in: in}
	d.users.Store(int64(users))
	if countSizes {
		d.sizes = report.NewSizeCounter(nil)
	}
	return d
}

// load decodes the trace.
func (d *decoded) load() {
	r, c, err := d.in.open()
	if err != nil {
		d.err = err
		return
	}
	if d.sizes != nil {
		d.sizes.Reader = r
		r = d.sizes
	}
	d.memory, _ = r.(sim.CapacityReporter)
	if f, ok := r.(interface{ Format() string }); ok {
		d.format = f.Format()
	}
	rereadable := d.in.name != "-"
	for r.Scan() {
		if rereadable && len(d.events) == decodeLimit {
			d.events, d.stream = nil, true
			break
		}
		d.events = append(d.events, r.Event())
	}
	if !d.stream {
		d.err = r.Err()
	} else if d.sizes != nil {
		d.sizes.Sizes = report.SizeHistogram{}
	}
	if c != nil {
		if err := c.Close(); d.err == nil {
			d.err = err
		}
	}
	d.in.mu.Lock()
	d.skipped = d.in.skipped
	d.in.mu.Unlock()
}

// open is a sim.Job's Open: a reader of the events in memory, decoding
// them first if no replay has yet.
func (d *decoded) open() (traces.Reader, io.Closer, error) {
	d.once.Do(d.load)
	if d.err != nil {
		d.release()
		return nil, nil, d.err
	}
	if d.stream {
		return d.openFile()
	}
	r := &memoryReader{SliceReader: traces.NewSliceReader(d.in.name, d.events), skipped: d.skipped, memory: d.memory, format: d.format}
	return r, closeFunc(func() error { d.release(); return nil }), nil
}

// openFile opens the trace's file for one replay of a trace too long to
// hold; the first such replay counts the sizes for the report.
func (d *decoded) openFile() (traces.Reader, io.Closer, error) {
	r, c, err := d.in.open()
	if err != nil {
		d.release()
		return r, c, err
	}
	if d.sizes != nil && d.counted.CompareAndSwap(false, true) {
		d.sizes.Reader = r
		r = d.sizes
	}
	return r, closeFunc(func() error {
		d.release()
		if c != nil {
			return c.Close()
		}
		return nil
	}), nil
}

// release notes that one replay is done with the events, and drops them
// after the last one.
func (d *decoded) release() {
	if d.users.Add(-1) == 0 {
		d.events = nil
	}
}

// A memoryReader reads a decoded trace and reports what its decoding
// skipped (with --lenient), as the file's reader would have.
type memoryReader struct {
	*traces.SliceReader
	skipped int64
	memory  sim.CapacityReporter
	format  string
}

func (r *memoryReader) Skipped() int64 { return r.skipped }

// Format is the file's format, so that a replay knows a snapshot's
// (sim.Result.MidRun).
func (r *memoryReader) Format() string { return r.format }

// DeviceCapacity is the decoded reader's (see sim.CapacityReporter).
func (r *memoryReader) DeviceCapacity(device int) int64 {
	if r.memory == nil {
		return 0
	}
	return r.memory.DeviceCapacity(device)
}
