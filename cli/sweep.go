package cli

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// A decoded trace is decoded once, into memory, for the replays that share
// it: when several strategies (the variants of a sweep) replay a trace, the
// first of its replays to start decodes it and every replay then reads the
// events from memory, all of them in parallel. The events are held in
// chunks of chunkEvents, allocated as the decoding fills them, so that
// holding a trace costs 48 bytes an event and at most one chunk more,
// without the copies and the spare capacity of a slice grown by append. The
// events are dropped when the last replay is done with them. A trace of
// more than decodeLimit events is not held: the replays that run at once
// read it together from one decoding (see stream), so that memory stays
// bounded whatever the trace's length. Standard input, a FIFO or a device
// cannot be read twice: it is held whatever its length.
type decoded struct {
	in    *input
	src   func() (traces.Reader, io.Closer, error) // opens the trace: in.open when made
	sizes *report.SizeCounter                      // counts the request sizes while decoding, when not nil
	users atomic.Int64                             // replays that have not yet closed their reader

	once    sync.Once
	events  eventChunks
	skipped int64
	err     error
	memory  sim.CapacityReporter // the devices' memory, when the reader knows it
	start   *traces.Start        // the recorded start state, when the reader knows it
	frames  []snapshot.Frame     // the frames and stacks that the events' Stack indexes
	stacks  [][]int32            // (traces.StackReporter), when the reader has them
	stream  bool                 // the trace is longer than decodeLimit: replays read streams of it
	midRun  bool                 // whether the trace is a window of a running program

	mu      sync.Mutex
	streams []*stream // the streams of the trace, the last of which replays join
}

// decodeLimit is the most events a trace shared by several replays is held
// in memory with: 2^24 events, 768 MiB.
var decodeLimit = 1 << 24

// decodeOnce returns the trace of in, to be decoded once for users
// replays. With countSizes, the decoding counts the trace's request sizes
// for a report, in the decoded's sizes.
func (in *input) decodeOnce(users int, countSizes bool) *decoded {
	d := &decoded{in: in, src: in.open}
	d.users.Store(int64(users))
	if countSizes {
		d.sizes = report.NewSizeCounter(nil)
	}
	return d
}

// load decodes the trace.
func (d *decoded) load() {
	r, c, err := d.src()
	if err != nil {
		d.err = err
		return
	}
	if d.sizes != nil {
		d.sizes.Reader = r
		r = d.sizes
	}
	d.memory, _ = r.(sim.CapacityReporter)
	d.start = traces.StartOf(r)
	d.frames, d.stacks = traces.StacksOf(r)
	if m, ok := r.(interface{ MidRun() bool }); ok {
		d.midRun = m.MidRun()
	}
	rereadable := !d.in.once
	for r.Scan() {
		d.events.add(r.Event())
		if rereadable && d.events.n > decodeLimit {
			// Too long to hold: the first stream goes on from here, with
			// the events decoded so far, and closes the file.
			d.streams = []*stream{newStream(d, r, c, d.events.chunks)}
			d.events, d.stream = eventChunks{}, true
			return
		}
	}
	d.err = r.Err()
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
		return d.openStream()
	}
	r := &memoryReader{chunks: d.events.chunks, i: -1, name: d.in.name, skipped: d.skipped, memory: d.memory, start: d.start, midRun: d.midRun,
		frames: d.frames, stacks: d.stacks}
	return r, closeFunc(func() error { d.release(); return nil }), nil
}

// openStream returns a reader of the trace too long to hold: of the last
// stream, if it can still be joined, else of a new one.
func (d *decoded) openStream() (traces.Reader, io.Closer, error) {
	d.mu.Lock()
	var r *streamReader
	if len(d.streams) > 0 {
		r = d.streams[len(d.streams)-1].join()
	}
	if r == nil {
		src, c, err := d.src()
		if err != nil {
			d.mu.Unlock()
			d.release()
			return nil, nil, err
		}
		s := newStream(d, src, c, nil)
		d.streams = append(d.streams, s)
		r = s.join()
	}
	d.mu.Unlock()
	return r, closeFunc(func() error {
		err := r.Close()
		d.release()
		return err
	}), nil
}

// release notes that one replay is done with the events, and drops them
// after the last one.
func (d *decoded) release() {
	if d.users.Add(-1) == 0 {
		d.events = eventChunks{}
		d.mu.Lock()
		for _, s := range d.streams {
			s.stop()
		}
		d.streams = nil
		d.mu.Unlock()
	}
}

// chunkEvents is the number of events in a chunk of a decoded trace:
// 64 Ki events, 3 MiB.
var chunkEvents = 1 << 16

// eventChunks are the events of a trace in memory, in chunks of
// chunkEvents events but the last.
type eventChunks struct {
	chunks [][]traces.Event
	n      int // events
}

// add appends ev, starting a chunk when the last one is full.
func (c *eventChunks) add(ev traces.Event) {
	k := len(c.chunks) - 1
	if k < 0 || len(c.chunks[k]) == chunkEvents {
		c.chunks = append(c.chunks, make([]traces.Event, 0, chunkEvents))
		k++
	}
	c.chunks[k] = append(c.chunks[k], ev)
	c.n++
}

// A memoryReader reads a decoded trace from its chunks, and reports what
// its decoding skipped (with --lenient), as the file's reader would have.
type memoryReader struct {
	chunks  [][]traces.Event
	c, i    int // the current event: chunks[c][i]
	name    string
	skipped int64
	memory  sim.CapacityReporter
	midRun  bool
	frames  []snapshot.Frame
	stacks  [][]int32
	start   *traces.Start // the decoded reader's
}

// Start is the decoded reader's (see traces.StartReporter).
func (r *memoryReader) Start() *traces.Start { return r.start }

// Stacks are the decoded reader's (see traces.StackReporter).
func (r *memoryReader) Stacks() ([]snapshot.Frame, [][]int32) { return r.frames, r.stacks }

// Scan advances to the next event.
func (r *memoryReader) Scan() bool {
	if r.c >= len(r.chunks) {
		return false
	}
	if r.i++; r.i == len(r.chunks[r.c]) {
		r.c, r.i = r.c+1, 0
		return r.c < len(r.chunks) && len(r.chunks[r.c]) > 0
	}
	return true
}

// Event returns the current event.
func (r *memoryReader) Event() traces.Event { return r.chunks[r.c][r.i] }

// Err returns nil: what is in memory was read without error.
func (r *memoryReader) Err() error { return nil }

// Name returns the trace's name.
func (r *memoryReader) Name() string { return r.name }

func (r *memoryReader) Skipped() int64 { return r.skipped }

// MidRun is the file reader's, so that a replay knows a snapshot's
// (sim.Result.MidRun).
func (r *memoryReader) MidRun() bool { return r.midRun }

// DeviceCapacity is the decoded reader's (see sim.CapacityReporter).
func (r *memoryReader) DeviceCapacity(device int) int64 {
	if r.memory == nil {
		return 0
	}
	return r.memory.DeviceCapacity(device)
}

// A variant of a sweep that refuses the settings it shares with the
// others is not replayed but gets a row that says so: a sweep over
// releases of PyTorch with a setting that an older release does not have
// (expandable_segments before 2.1) answers for every release, as a
// variant that runs out of memory gets its row of OOMs. A value that the
// sweep gives and the parameter does not take (round:cutoff=30..40/5:
// 35), a run whose every variant refuses, and a refusal outside a sweep
// are bad usage, with the line of the refusal (see chosenStrategies.open).

// countRefused returns how many of strategies refused their parameters.
func (p *replayPlan) countRefused(strategies []*gpualloc.Params) int {
	n := 0
	for _, s := range strategies {
		if p.chosen.refused[s] != nil {
			n++
		}
	}
	return n
}

// refusal is the error of the job of a strategy that refused its
// parameters: it opens no trace.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refusedOpen is the Open of the job of a strategy that refused its
// parameters with err.
func refusedOpen(err error) func() (traces.Reader, io.Closer, error) {
	return func() (traces.Reader, io.Closer, error) { return nil, nil, &refusal{err} }
}

// refusedRows returns out with the outcome of each job whose strategy
// refused its parameters made a row that says why (sim.Result.Refused),
// its figures zero: a result, not an error, for the table, the JSON, the
// CSV and the report.
func (p *replayPlan) refusedRows(out []sim.JobResult) []sim.JobResult {
	var r *refusal
	for i := range out {
		if !errors.As(out[i].Err, &r) {
			continue
		}
		c := p.jobs[i].Config
		out[i] = sim.JobResult{Result: sim.Result{
			Trace: c.Trace, Strategy: sim.StrategyOf(c.Params), Backend: c.Backend, CapacityBytes: c.Capacity,
			Refused: oneLine(r.err.Error()),
		}}
	}
	// The device's size, as the replays of the same trace give it.
	for i := range out {
		if out[i].Result.Refused == "" || out[i].Result.CapacityBytes != 0 {
			continue
		}
		for _, o := range out {
			if o.Err == nil && o.Result.Refused == "" && o.Result.Trace == out[i].Result.Trace {
				out[i].Result.CapacityBytes = o.Result.CapacityBytes
				break
			}
		}
	}
	return out
}
