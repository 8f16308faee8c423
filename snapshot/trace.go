package snapshot

import (
	"iter"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	spillfile "github.com/gpualloc/gpualloc/internal/spill"
	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
)

// A Trace is the recorded trace of one device, as [Snapshot.Trace] returns
// it: its entries in order, read with At. It is a view of the snapshot,
// valid while the snapshot's traces are not changed; the zero Trace is
// empty.
//
// A Trace either shows a slice of entries that a caller gave ([New],
// [Snapshot.SetTraces], [TraceOf]), or the entries as a read holds them:
// 48 bytes an entry, with no pointers for the collector to scan, made
// into a TraceEntry by At. Either way At costs O(1) and allocates
// nothing, except where the entries of a long trace were written out to
// bound the read's memory (past 256 MiB of them; see
// [ReadOptions.MaxHeld]): there At reads back
// the 32,768 entries around i (1.5 MiB) when it comes to them, into a
// page of its own, and a walk over the trace in order, forward or back,
// reads each page once. A Trace may be read from several goroutines at
// once.
//
// Reading back can fail, as any read of a file can: then At returns the
// zero TraceEntry for each entry of the page it could not read, and Err
// returns the error, as [bufio.Scanner.Err] does once a walk ends. A
// walk over a trace that a read holds checks Err when it ends, and before
// it reports an error of its own, which a zero entry may have caused.
type Trace struct {
	list []TraceEntry
	held *heldTrace
}

// defaultMaxTrace is the most entries of one device's trace that a read
// takes: the replays index them with int32. A file with more (over 60 GB)
// is refused, naming the entry.
const defaultMaxTrace = math.MaxInt32

// heldTrace is one device's trace as the decoder read it: the pages it
// held, then those it spilled, loaded while they are used, at most
// loaded at a time. Any goroutine may read it.
type heldTrace struct {
	held    [][]entryRec                 // the pages before the first spilled
	spilled []atomic.Pointer[[]entryRec] // the pages after; nil where not loaded
	n       int
	f       *spillfile.File // where the spilled pages are
	offs    []int64         // the offset in f of each spilled page
	strs    []string        // the decoder's strings, which entryRec indexes
	notes   traceNotes      // what the entries were, as read
	name    string          // the snapshot's, for errors
	maxLoad int             // the most spilled pages loaded at a time

	mu     sync.Mutex // held to load a page, and for err
	loaded []int      // the spilled pages loaded, oldest first
	err    error      // the first page that could not be read back
	buf    []byte     // a page's bytes, read
}

// hold returns the trace p as a heldTrace, writing its last page out
// when it spills the ones before (where that fails, the read fails: see
// newSpill).
func hold(p *pages.List[entryRec], notes traceNotes, strs []string) *heldTrace {
	l := p.Hold()
	h := &heldTrace{held: l.Pages, n: l.N, notes: notes, strs: strs}
	if len(l.Offs) > 0 {
		h.offs, h.f, h.maxLoad = l.Offs, l.Spill.File(), l.Spill.Loaded()
		h.spilled = make([]atomic.Pointer[[]entryRec], len(l.Offs))
	}
	return h
}

// inPlace returns entry i, 0 <= i < h.n, if its page is held, nil if it
// is spilled (see fromSpill): inlined, it costs less than a call.
func (h *heldTrace) inPlace(i int) *entryRec {
	if k := i >> pages.Shift; k < len(h.held) {
		return &h.held[k][i&(pages.Size-1)]
	}
	return nil
}

// fromSpill returns entry i, on a page spilled.
func (h *heldTrace) fromSpill(i int) *entryRec {
	k := i>>pages.Shift - len(h.held)
	pg := h.spilled[k].Load()
	if pg == nil {
		pg = h.load(k)
	}
	return &(*pg)[i&(pages.Size-1)]
}

// load reads spilled page k back, and drops the page loaded longest ago
// when more than maxLoad are. A goroutine that holds a page dropped
// reads it still: it is not reused. A page that cannot be read is zero,
// and the first such failure is kept for Err.
func (h *heldTrace) load(k int) *[]entryRec {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pg := h.spilled[k].Load(); pg != nil {
		return pg // loaded meanwhile
	}
	pg := make([]entryRec, min(pages.Size, h.n-(len(h.held)+k)<<pages.Shift))
	h.buf = pages.Room(h.buf, recBytes*len(pg))
	err := h.f.ReadAt(h.buf, h.offs[k])
	recCodec.Decode(pg, h.buf)
	if err != nil {
		if h.err == nil {
			h.err = &Error{Name: h.name, Msg: "device_traces: " + err.Error(), Err: err}
		}
		for i := range pg {
			pg[i] = entryRec{action: noStr, category: noStr} // the zero TraceEntry
		}
	}
	h.spilled[k].Store(&pg)
	h.loaded = append(h.loaded, k)
	if len(h.loaded) > h.maxLoad {
		h.spilled[h.loaded[0]].Store(nil)
		h.loaded = append(h.loaded[:0], h.loaded[1:]...)
	}
	return &pg
}

// TraceOf returns a Trace of the entries t, which it shows, not copies.
func TraceOf(t []TraceEntry) Trace { return Trace{list: t} }

// Len returns the number of entries.
func (t Trace) Len() int {
	if t.held != nil {
		return t.held.n
	}
	return len(t.list)
}

// At returns entry i, 0 <= i < Len().
func (t Trace) At(i int) TraceEntry {
	if t.held == nil {
		return t.list[i]
	}
	r := t.held.inPlace(i)
	if r == nil {
		r = t.held.fromSpill(i)
	}
	return r.entry(t.held.strs)
}

// Err returns the first failure to read the trace back from the
// temporary file of its read, an [*Error] that names the snapshot and the
// file, or nil. At and Action return zero values for the entries that
// it left unread.
func (t Trace) Err() error {
	if t.held == nil || t.held.spilled == nil {
		return nil
	}
	t.held.mu.Lock()
	defer t.held.mu.Unlock()
	return t.held.err
}

// Action returns the action of entry i: At(i).Action, without the rest.
func (t Trace) Action(i int) Action {
	if t.held == nil {
		return t.list[i].Action
	}
	r := t.held.inPlace(i)
	if r == nil {
		r = t.held.fromSpill(i)
	}
	return Action(strAt(t.held.strs, r.action))
}

// Has reports whether an entry of the trace takes action a, so that a
// walk for the entries of a rare action (segment_map, oom) can be left
// out where there are none. It costs O(1) for a trace that a read holds,
// which notes the actions of its entries as it reads them (those of the
// file: a page that could not be read back still counts), up to maxActs
// of them; a walk over the entries for one given as a slice, or with
// more actions.
func (t Trace) Has(a Action) bool {
	if t.held != nil && len(t.held.notes.acts) <= maxActs {
		for _, i := range t.held.notes.acts {
			if Action(strAt(t.held.strs, i)) == a {
				return true
			}
		}
		return false
	}
	for i := range t.Len() {
		if t.Action(i) == a {
			return true
		}
	}
	return false
}

// maxActs is the most actions of a trace that a read notes, so that a
// file of many kept the read's cost linear: PyTorch writes nine.
const maxActs = 16

// Timed reports whether every entry of the trace has a time (TimeUS is
// not NoTime); an empty trace is timed. Categorized reports whether an
// entry records a category. Both cost O(1) for a trace that a read holds,
// which notes them as it reads the entries, and a walk over the entries
// for one given as a slice.
func (t Trace) Timed() bool {
	if t.held != nil {
		return !t.held.notes.untimed
	}
	for _, e := range t.list {
		if e.TimeUS == NoTime {
			return false
		}
	}
	return true
}

// Categorized: see Timed.
func (t Trace) Categorized() bool {
	if t.held != nil {
		return t.held.notes.categorized
	}
	for _, e := range t.list {
		if e.Category != "" {
			return true
		}
	}
	return false
}

// A traceList is a device's trace list as a read decodes it: the records
// of its entries, and what they were.
type traceList struct {
	recs  pages.List[entryRec]
	notes traceNotes
}

// append adds entry e, whose strings are in strs, and notes it.
func (t *traceList) append(e entryRec, strs []string) {
	t.recs.Append(e)
	t.notes.note(&e, strs)
}

// traceNotes is what a read notes of a trace's entries as it reads
// them, for Trace.Has, Timed and Categorized.
type traceNotes struct {
	acts        []uint32 // the actions, once each; past maxActs, not known
	untimed     bool     // an entry has no time
	categorized bool     // an entry records a category
}

// note adds entry e, whose strings are in strs, to what n notes.
func (n *traceNotes) note(e *entryRec, strs []string) {
	if len(n.acts) <= maxActs && !slices.Contains(n.acts, e.action) {
		n.acts = append(n.acts, e.action)
	}
	n.untimed = n.untimed || e.time == NoTime
	n.categorized = n.categorized || strAt(strs, e.category) != ""
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

// Entries returns a copy of the entries, nil when there are none; Err
// says whether they were all read back.
func (t Trace) Entries() []TraceEntry {
	if t.Len() == 0 {
		return nil
	}
	if t.held == nil {
		return append([]TraceEntry(nil), t.list...)
	}
	out := make([]TraceEntry, t.Len())
	for i := range out {
		out[i] = t.At(i)
	}
	return out
}
