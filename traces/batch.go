package traces

// A BatchReader is a [Reader] that can also hand out its events a batch at a
// time, for a consumer that goes through millions of them (the replay
// engine): it then reads them in place, through a pointer, without an
// interface call and a 48-byte copy for each.
//
//	for {
//		batch := r.Batch()
//		if len(batch) == 0 {
//			break
//		}
//		for i := range batch {
//			ev := &batch[i]
//			...
//		}
//	}
//	if err := r.Err(); err != nil { ... }
//
// Batch returns the events after the last one that Scan or Batch yielded,
// at least one, or none at the end of the trace or at an error, which Err
// then returns. The batch is valid until the next call of Batch or Scan,
// and the caller must not modify it. Events in batches are valid as a
// Reader yields them (see [Event]).
type BatchReader interface {
	Reader
	Batch() []Event
}

// Batch returns every event not yet read, and moves to the end: the events
// are already in memory.
func (r *SliceReader) Batch() []Event {
	if r.i+1 >= len(r.events) {
		r.i = len(r.events)
		return nil
	}
	b := r.events[r.i+1:]
	r.i = len(r.events)
	return b
}

// Fill appends the events after the last one that Scan or Fill yielded to
// dst, up to cap(dst), and returns the slice: one call and one copy of each
// event, decoded by Scan. Fewer than cap(dst)-len(dst) events mean the end
// of the trace or an error, which Err then returns. The replay engine of
// package sim, reading a trace ahead in batches on a goroutine of its own,
// finds the method by type assertion, and so pays neither an interface call
// per event nor a copy of each event through Event.
func (r *csvReader) Fill(dst []Event) []Event {
	for len(dst) < cap(dst) && r.Scan() {
		dst = append(dst, r.ev)
	}
	return dst
}
