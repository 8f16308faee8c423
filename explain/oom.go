package explain

import "github.com/gpualloc/gpualloc/traces"

// recordedOOM returns the index of the event of the first out-of-memory
// error that the trace records on device d, -1 when none (see findOOMs).
func (x *explainer) recordedOOM(d int) int {
	if i, ok := x.ooms[d]; ok {
		return i
	}
	return -1
}

// findOOMs finds the first out-of-memory error that the trace records on
// each device, in one walk over the events: a PyTorch snapshot's oom entry
// is an alloc of the size that failed, with an id of its own (no
// address), whose free follows at once.
func (x *explainer) findOOMs() error {
	x.ooms = map[int]int{}
	if x.t.Format != snapshotFormat {
		return nil
	}
	var prev traces.Event
	return walk(x.ev, x.ev.Len(), func(i int, e *traces.Event) error {
		if i > 0 && e.Op == traces.OpFree && prev.Op == traces.OpAlloc && e.ID == prev.ID && isOOMEvent(&prev) {
			if _, ok := x.ooms[int(prev.Device)]; !ok {
				x.ooms[int(prev.Device)] = i - 1
			}
		}
		prev = *e
		return nil
	})
}

// snapshotFormat is the format name of a PyTorch snapshot's reader.
const snapshotFormat = "PyTorch snapshot"

// isOOMEvent reports whether e, an event of a PyTorch snapshot, is the
// alloc of its oom entry: the only allocation of a snapshot whose id is no
// address.
func isOOMEvent(e *traces.Event) bool {
	_, addr := e.HexID()
	return !addr
}
