package traces

// A SliceReader is a [Reader] of events held in memory, for replaying the
// same trace many times (benchmarks, parameter sweeps) without decoding it
// again. The events must be valid as a Reader yields them (see [Event]);
// [ReadAll] makes such a slice from any Reader.
type SliceReader struct {
	events []Event
	name   string
	i      int
}

// NewSliceReader returns a reader of events, named name.
func NewSliceReader(name string, events []Event) *SliceReader {
	return &SliceReader{events: events, name: name, i: -1}
}

// Scan advances to the next event.
func (r *SliceReader) Scan() bool {
	if r.i+1 >= len(r.events) {
		r.i = len(r.events)
		return false
	}
	r.i++
	return true
}

// Event returns the current event.
func (r *SliceReader) Event() Event { return r.events[r.i] }

// Err returns nil: a slice has no read errors.
func (r *SliceReader) Err() error { return nil }

// Name returns the trace's name.
func (r *SliceReader) Name() string { return r.name }

// Reset goes back to before the first event, to read the trace again.
func (r *SliceReader) Reset() { r.i = -1 }

// ReadAll reads every event of r into memory: 48 bytes an event.
func ReadAll(r Reader) ([]Event, error) {
	var events []Event
	for r.Scan() {
		events = append(events, r.Event())
	}
	return events, r.Err()
}
