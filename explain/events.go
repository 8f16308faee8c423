package explain

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/spill"
	"github.com/gpualloc/gpualloc/traces"
)

// An EventLog holds a trace's events for the walks that Explain makes over
// them: the replay as the trace ran, the replays of prefixes that find a
// moment, the walks that group the live bytes, the replays of what would
// have fit. None of them needs every event at once, so that a long trace
// need not be held whole.
//
// Policy: the events are kept in pages of logPage events. Full pages stay
// in memory until they take MaxHeld bytes; each page filled after that is
// written to an unnamed temporary file (package internal/spill, in the
// directory given, "" for the system's: TMPDIR) and dropped. A walk reads
// a spilled page back when it comes to it, into a page of its own: the
// walks are sequential, so each reads each spilled page once.
//
// Cost: 48 bytes an event, in memory up to MaxHeld and on disk past it;
// a walk that reads spilled pages holds two pages' buffers (3 MiB),
// whatever the length of the trace. Several walks may read the log at
// once (the replays of what would have fit run in parallel); none may
// while Append runs.
type EventLog struct {
	held    [][]traces.Event // the first pages, in memory
	spilled int              // the pages after them, in the file, in order
	tail    []traces.Event   // the last page, being filled
	n       int
	page    int // events a page: logPage, but in tests
	maxHeld int64
	f       *spill.File
	buf     []byte // a page's bytes, written
}

// DefaultMaxHeld is the bytes of pages that an EventLog holds in memory
// when it is given no bound: 5 pages, 163,840 events; a snapshot of
// 100,000 entries is held whole.
const DefaultMaxHeld = 8 << 20

// The layout of the log's pages: logPage events a page, eventBytes each in
// the file.
const (
	logPage    = 1 << 15
	eventBytes = 48
)

// NewEventLog returns an empty log whose pages past maxHeld bytes (0 for
// DefaultMaxHeld) go to a temporary file in dir ("" for the system's).
// Close removes the file.
func NewEventLog(dir string, maxHeld int64) *EventLog {
	if maxHeld <= 0 {
		maxHeld = DefaultMaxHeld
	}
	return &EventLog{page: logPage, maxHeld: maxHeld, f: spill.New(dir, "gpualloc-events-")}
}

// ReadEventLog reads every event of r into a new log, as NewEventLog makes
// it.
func ReadEventLog(r traces.Reader, dir string, maxHeld int64) (*EventLog, error) {
	l := NewEventLog(dir, maxHeld)
	for r.Scan() {
		if err := l.Append(r.Event()); err != nil {
			l.Close()
			if n, ok := r.(interface{ Name() string }); ok {
				err = fmt.Errorf("%s: holding its events: %w", n.Name(), err)
			}
			return nil, err
		}
	}
	if err := r.Err(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Append adds ev, an event as a traces.Reader yields it, after the others.
// It fails when the temporary file cannot be written, naming it.
func (l *EventLog) Append(ev traces.Event) error {
	if l.tail == nil {
		l.tail = make([]traces.Event, 0, l.page)
	}
	l.tail = append(l.tail, ev)
	l.n++
	if len(l.tail) < l.page {
		return nil
	}
	if l.spilled == 0 && int64(len(l.held)+1)*int64(l.page)*eventBytes <= l.maxHeld {
		l.held, l.tail = append(l.held, l.tail), nil
		return nil
	}
	l.buf = encodeEvents(l.buf, l.tail)
	if _, err := l.f.Append(l.buf); err != nil {
		return err
	}
	l.spilled++
	l.tail = l.tail[:0]
	return nil
}

// Len returns the number of events.
func (l *EventLog) Len() int { return l.n }

// Spilled reports the bytes of the events that went to the temporary file.
func (l *EventLog) Spilled() int64 { return l.f.Size() }

// Close removes the temporary file; the log may not be read after. A nil
// log's Close does nothing.
func (l *EventLog) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// pageAt returns page p, reading a spilled one into the buffers of *into.
func (l *EventLog) pageAt(p int, into *pageBuf) ([]traces.Event, error) {
	switch k := p - len(l.held); {
	case k < 0:
		return l.held[p], nil
	case k < l.spilled:
		if into.ev == nil {
			into.ev, into.b = make([]traces.Event, l.page), make([]byte, l.page*eventBytes)
		}
		if err := l.f.ReadAt(into.b, int64(k)*int64(l.page)*eventBytes); err != nil {
			return nil, err
		}
		decodeEvents(into.ev, into.b)
		return into.ev, nil
	}
	return l.tail, nil
}

// pageBuf is a walk's page of spilled events, read back.
type pageBuf struct {
	ev []traces.Event
	b  []byte
}

// At returns event i: one read of the file for a spilled one.
func (l *EventLog) At(i int) (traces.Event, error) {
	if i < 0 || i >= l.n {
		return traces.Event{}, fmt.Errorf("event %d of %d", i, l.n)
	}
	p, k := i/l.page, i%l.page
	if j := p - len(l.held); j >= 0 && j < l.spilled {
		var b [eventBytes]byte
		if err := l.f.ReadAt(b[:], (int64(j)*int64(l.page)+int64(k))*eventBytes); err != nil {
			return traces.Event{}, err
		}
		var ev [1]traces.Event
		decodeEvents(ev[:], b[:])
		return ev[0], nil
	}
	if p < len(l.held) {
		return l.held[p][k], nil
	}
	return l.tail[k], nil
}

// Reader returns a reader of the first n events (all of them when n is
// past the last), named name: a traces.BatchReader that hands out a page
// at a time, in place where the page is in memory.
func (l *EventLog) Reader(name string, n int) traces.BatchReader {
	return &logReader{l: l, name: name, n: min(max(n, 0), l.n), i: -1}
}

// A logReader walks the first n events of a log.
type logReader struct {
	l     *EventLog
	name  string
	n     int
	i     int            // the current event
	first int            // the index of page's first event
	page  []traces.Event // the page of event i, cut at n
	buf   pageBuf
	err   error
}

// load makes page the page of event i, and reports whether there is one.
func (r *logReader) load(i int) bool {
	if r.err != nil || i >= r.n {
		return false
	}
	if i >= r.first && i < r.first+len(r.page) {
		return true
	}
	p := i / r.l.page
	pg, err := r.l.pageAt(p, &r.buf)
	if err != nil {
		r.err = fmt.Errorf("%s: %w", r.name, err)
		return false
	}
	r.first = p * r.l.page
	r.page = pg[:min(len(pg), r.n-r.first)]
	return true
}

// Scan advances to the next event.
func (r *logReader) Scan() bool {
	if !r.load(r.i + 1) {
		r.i = r.n
		return false
	}
	r.i++
	return true
}

// Event returns the current event.
func (r *logReader) Event() traces.Event { return r.page[r.i-r.first] }

// Batch returns the events of the current page after the current one (see
// traces.BatchReader).
func (r *logReader) Batch() []traces.Event {
	if !r.load(r.i + 1) {
		r.i = r.n
		return nil
	}
	b := r.page[r.i+1-r.first:]
	r.i = r.first + len(r.page) - 1
	return b
}

// Err returns the failure to read a spilled page back, if any.
func (r *logReader) Err() error { return r.err }

// Name returns the trace's name.
func (r *logReader) Name() string { return r.name }

// encodeEvents returns the bytes of evs, in buf if it has room: each
// event's fields, little-endian, in eventBytes.
func encodeEvents(buf []byte, evs []traces.Event) []byte {
	if cap(buf) < len(evs)*eventBytes {
		buf = make([]byte, len(evs)*eventBytes)
	}
	buf = buf[:len(evs)*eventBytes]
	for i := range evs {
		e, b := &evs[i], buf[i*eventBytes:(i+1)*eventBytes]
		b[0], b[1] = byte(e.Op), byte(e.Category)
		binary.LittleEndian.PutUint32(b[4:], e.Stack)
		binary.LittleEndian.PutUint64(b[8:], e.ID)
		binary.LittleEndian.PutUint32(b[16:], uint32(e.Slot))
		binary.LittleEndian.PutUint32(b[20:], uint32(e.Device))
		binary.LittleEndian.PutUint64(b[24:], uint64(e.Size))
		binary.LittleEndian.PutUint64(b[32:], e.Stream)
		binary.LittleEndian.PutUint64(b[40:], uint64(e.TimeUS))
	}
	return buf
}

// decodeEvents sets evs from b, as encodeEvents wrote them.
func decodeEvents(evs []traces.Event, b []byte) {
	for i := range evs {
		b := b[i*eventBytes : (i+1)*eventBytes]
		evs[i] = traces.Event{
			Op: traces.Op(b[0]), Category: gpualloc.Category(b[1]), Stack: binary.LittleEndian.Uint32(b[4:]),
			ID: binary.LittleEndian.Uint64(b[8:]), Slot: int32(binary.LittleEndian.Uint32(b[16:])),
			Device: int32(binary.LittleEndian.Uint32(b[20:])), Size: int64(binary.LittleEndian.Uint64(b[24:])),
			Stream: binary.LittleEndian.Uint64(b[32:]), TimeUS: int64(binary.LittleEndian.Uint64(b[40:])),
		}
	}
}

// An eventSource is what Explain walks: a Trace's Events, or its Log.
type eventSource interface {
	// Len returns the number of events.
	Len() int
	// Reader returns a reader of the first n events, named name.
	Reader(name string, n int) traces.BatchReader
	// At returns event i.
	At(i int) (traces.Event, error)
}

// sliceEvents are events in memory, as an eventSource.
type sliceEvents []traces.Event

func (s sliceEvents) Len() int { return len(s) }

func (s sliceEvents) Reader(name string, n int) traces.BatchReader {
	return traces.NewSliceReader(name, s[:min(max(n, 0), len(s))])
}

func (s sliceEvents) At(i int) (traces.Event, error) {
	if i < 0 || i >= len(s) {
		return traces.Event{}, fmt.Errorf("event %d of %d", i, len(s))
	}
	return s[i], nil
}

// events returns t's events: its Log when it has one, else its Events.
func (t *Trace) events() eventSource {
	if t.Log != nil {
		return t.Log
	}
	return sliceEvents(t.Events)
}

// walk calls f with each of the first n events of src, in order, and
// returns the first error of f or of the read.
func walk(src eventSource, n int, f func(i int, ev *traces.Event) error) error {
	r := src.Reader("", n)
	i := 0
	for {
		b := r.Batch()
		if len(b) == 0 {
			break
		}
		for k := range b {
			if err := f(i, &b[k]); err != nil {
				return err
			}
			i++
		}
	}
	return r.Err()
}

// devicesOf returns the devices of src's events, in increasing order.
func devicesOf(src eventSource) ([]int, error) {
	seen := map[int32]bool{}
	var out []int
	var last int32
	err := walk(src, src.Len(), func(i int, ev *traces.Event) error {
		if d := ev.Device; (i == 0 || d != last) && !seen[d] {
			seen[d] = true
			out = append(out, int(d))
		}
		last = ev.Device
		return nil
	})
	slices.Sort(out)
	return out, err
}
