package snapshot

import (
	"iter"
	"math"
)

// A Trace is the recorded trace of one device, as [Snapshot.Trace] returns
// it: its entries in order, read with At. It is a view of the snapshot,
// valid while the snapshot's traces are not changed; the zero Trace is
// empty.
//
// A Trace either shows a device's slice of DeviceTraces, or the entries
// as a read with [ReadOptions.Compact] holds them: 48 bytes an entry, with
// no pointers for the collector to scan, made into a TraceEntry by At.
// Either way At costs O(1) and allocates nothing.
type Trace struct {
	list []TraceEntry
	held *heldTrace
}

// maxTrace is the most entries of one device's trace that a read takes:
// the replays index them with int32. A file with more (over 60 GB) is
// refused, naming the entry. A variable for the tests.
var maxTrace = math.MaxInt32

// heldTrace is one device's trace as the decoder read it.
type heldTrace struct {
	recs *paged[entryRec]
	strs []string // the decoder's strings, which entryRec indexes
}

// TraceOf returns a Trace of the entries t, which it shows, not copies.
func TraceOf(t []TraceEntry) Trace { return Trace{list: t} }

// Len returns the number of entries.
func (t Trace) Len() int {
	if t.held != nil {
		return t.held.recs.len()
	}
	return len(t.list)
}

// At returns entry i, 0 <= i < Len().
func (t Trace) At(i int) TraceEntry {
	if t.held == nil {
		return t.list[i]
	}
	return t.held.recs.at(uint64(i)).entry(t.held.strs)
}

// Action returns the action of entry i: At(i).Action, without the rest.
func (t Trace) Action(i int) Action {
	if t.held == nil {
		return t.list[i].Action
	}
	return Action(strAt(t.held.strs, t.held.recs.at(uint64(i)).action))
}

// All yields the entries in order with their indexes, as At returns them.
func (t Trace) All() iter.Seq2[int, TraceEntry] {
	return func(yield func(int, TraceEntry) bool) {
		for i := range t.Len() {
			if !yield(i, t.At(i)) {
				return
			}
		}
	}
}

// Entries returns a copy of the entries, as a slice of DeviceTraces holds
// them.
func (t Trace) Entries() []TraceEntry {
	if t.held == nil {
		return append([]TraceEntry(nil), t.list...)
	}
	out := make([]TraceEntry, t.Len())
	for i := range out {
		out[i] = t.At(i)
	}
	return out
}
