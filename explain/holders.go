package explain

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// A stackMap gives the alloc events of a PyTorch snapshot's trace their
// recorded stacks and entries, as a walk over the events meets them (see
// stackWalk): it holds the stacks of the blocks live before the trace,
// not one an event.
type stackMap struct {
	snap *snapshot.Snapshot
	// initial is the number of events of blocks live before the trace;
	// starts holds the stack of each by device and address.
	initial int
	starts  map[int]map[uint64]snapshot.StackID
	// ok says that the events were matched with the entries.
	ok bool
	// hasFrames says that the snapshot records stacks.
	hasFrames bool
}

// newStackMap matches the alloc events of t, src, with the entries of its
// snapshot, in one walk over them: the events of the blocks live before
// the trace, which a snapshot's reader yields first, by their address in
// the start state that the reader rebuilt; then each device's alloc and
// oom entries in order, which the reader yields in order. An event that
// does not match its entry (address and size) leaves the stacks out. It
// fails only when the events cannot be read.
func newStackMap(t *Trace, src eventSource) (*stackMap, error) {
	s := t.Snapshot
	m := &stackMap{snap: s}
	if s == nil || t.Start == nil {
		return m, nil
	}
	m.hasFrames = len(s.Stacks) > 1
	rules, err := s.AllocatorSettings.Rules()
	if err != nil {
		rules = snapshot.DefaultRules()
	}
	m.initial = t.Start.Initial
	m.starts = map[int]map[uint64]snapshot.StackID{}
	w := m.walk()
	err = walk(src, src.Len(), func(i int, ev *traces.Event) error {
		if ev.Op != traces.OpAlloc {
			return nil
		}
		if d := int(ev.Device); i < m.initial && m.starts[d] == nil {
			m.starts[d] = startStacks(s, d, rules)
		}
		if _, _, ok := w.at(i, ev); !ok {
			return errUnmatched
		}
		return nil
	})
	switch {
	case err == errUnmatched:
		return m, nil
	case err != nil:
		return nil, err
	}
	m.ok = true
	return m, nil
}

// startStacks returns the stacks of the blocks of device d live before
// the trace, by address: those of the start state that the reader rebuilt
// with rules, completed by atDump.
func startStacks(s *snapshot.Snapshot, d int, rules snapshot.Rules) map[uint64]snapshot.StackID {
	st := map[uint64]snapshot.StackID{}
	if state, _ := s.InitialStateWith(d, rules); state != nil {
		for _, sg := range state.Segments {
			for _, b := range sg.Blocks {
				if b.Live() {
					st[b.Address] = b.Stack
				}
			}
		}
		for _, e := range state.Unplaced {
			st[e.Addr] = e.Stack
		}
	}
	atDump(s, d, st)
	return st
}

// errUnmatched stops the walk of newStackMap at an event that does not
// match its entry.
var errUnmatched = errors.New("an event does not match its entry")

// A stackWalk gives the alloc events of a trace their stacks and entries,
// from the first event: at must be called for every alloc event of a
// device, in order, from the first (the other devices' may be left out).
type stackWalk struct {
	m    *stackMap
	next map[int]int // each device's next entry
}

// walk returns a walk from the first event.
func (m *stackMap) walk() *stackWalk { return &stackWalk{m: m, next: map[int]int{}} }

// at returns the stack of alloc event i, ev, and the index of its entry in
// its device's trace (-1 for a block live before the trace); false when
// the event does not match its entry.
func (w *stackWalk) at(i int, ev *traces.Event) (snapshot.StackID, int32, bool) {
	s, d := w.m.snap, int(ev.Device)
	if i < w.m.initial {
		addr, ok := ev.HexID()
		stack, found := w.m.starts[d][addr]
		return stack, -1, ok && found
	}
	tr := s.Trace(d)
	j := w.next[d]
	for j < tr.Len() && tr.Action(j) != snapshot.Alloc && tr.Action(j) != snapshot.OutOfMemory {
		j++
	}
	if j >= tr.Len() {
		return 0, 0, false
	}
	e := tr.At(j)
	w.next[d] = j + 1
	addr, isAddr := ev.HexID()
	if e.Size != ev.Size || (e.Action == snapshot.OutOfMemory) != isOOMEvent(ev) ||
		(e.Action == snapshot.Alloc && (!isAddr || addr != e.Addr)) {
		return 0, 0, false
	}
	return e.Stack, int32(j), true
}

// stackOf returns the stack and entry of alloc event i, ev, as w meets it:
// none when the events are not matched.
func (m *stackMap) stackOf(w *stackWalk, i int, ev *traces.Event) (snapshot.StackID, int32) {
	if !m.ok {
		return 0, 0
	}
	st, j, _ := w.at(i, ev)
	return st, j
}

// atDump gives the blocks of st without a stack the stacks of the blocks
// live at their address when the snapshot was taken, where the device's
// trace neither allocates nor frees that address: such a block is the
// same allocation, live from before the trace to its end, and the
// snapshot's segments record where it was allocated (the start state
// rebuilt by walking the trace back does not).
func atDump(s *snapshot.Snapshot, d int, st map[uint64]snapshot.StackID) {
	named := map[uint64]bool{}
	tr := s.Trace(d)
	for i := range tr.Len() {
		if a := tr.Action(i); a == snapshot.Alloc || a == snapshot.FreeCompleted || a == snapshot.FreeRequested {
			named[tr.At(i).Addr] = true
		}
	}
	for _, sg := range s.Segments {
		if sg.Device != d {
			continue
		}
		for _, b := range sg.Blocks {
			if stack, ok := st[b.Address]; ok && stack == 0 && b.Live() && !named[b.Address] {
				st[b.Address] = b.Stack
			}
		}
	}
}

// frames reports whether the events have stacks.
func (m *stackMap) frames() bool { return m.ok && m.hasFrames }

// matched reports whether the events are matched with their entries.
func (m *stackMap) matched() bool { return m.ok }

// holders groups the live allocations of device d after the first n
// events, as Options.By says, into rep's Holders and OtherBytes: a walk
// over them that holds the live allocations of d.
func (x *explainer) holders(d, n int, rep *Report) error {
	by := x.by(x.o.By)
	rep.Frames = x.stacks.frames()
	rep.By = by
	live, err := x.liveAt(d, n)
	if err != nil {
		return err
	}
	type group struct {
		key          string
		bytes, count int64
	}
	idx := map[string]int{}
	var groups []group
	for i := range live {
		a := &live[i]
		k := x.key(by, a.index, &a.ev, a.stack, a.entry)
		j, ok := idx[k]
		if !ok {
			j = len(groups)
			idx[k] = j
			groups = append(groups, group{key: k})
		}
		groups[j].bytes += a.ev.Size
		groups[j].count++
	}
	slices.SortFunc(groups, func(a, b group) int {
		if c := cmp.Compare(b.bytes, a.bytes); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	rep.Holders = []Holder{}
	for i, g := range groups {
		if i < x.o.Top {
			rep.Holders = append(rep.Holders, Holder{Site: g.key, Bytes: g.bytes, Count: g.count})
			continue
		}
		rep.OtherBytes += g.bytes
		rep.OtherCount += g.count
	}
	return nil
}

// by returns the grouping that holders uses for a request of by: by size
// where the trace has no stacks for sites or frames, or no annotations.
func (x *explainer) by(by By) By {
	if by == "" {
		by = BySite
	}
	if !x.stacks.frames() && (by == BySite || by == ByFrame) || by == ByAnnotation && (x.t.Annotations == nil || !x.stacks.matched()) {
		return BySize
	}
	return by
}

// A liveAlloc is an allocation live at a moment: its alloc event, the
// event's index, and its stack and entry (see stackWalk).
type liveAlloc struct {
	ev    traces.Event
	index int
	stack snapshot.StackID
	entry int32
}

// liveAt returns the allocations of device d that are live after the
// first n events, in the order of their allocation.
func (x *explainer) liveAt(d, n int) ([]liveAlloc, error) {
	bySlot := map[int32]liveAlloc{}
	w := x.stacks.walk()
	err := walk(x.ev, n, func(i int, ev *traces.Event) error {
		if int(ev.Device) != d {
			return nil
		}
		switch ev.Op {
		case traces.OpAlloc:
			st, j := x.stacks.stackOf(w, i, ev)
			bySlot[ev.Slot] = liveAlloc{*ev, i, st, j}
		case traces.OpFree:
			delete(bySlot, ev.Slot)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]liveAlloc, 0, len(bySlot))
	for _, a := range bySlot {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b liveAlloc) int { return cmp.Compare(a.index, b.index) })
	return out, nil
}

// key returns the group of the alloc event i, ev, whose stack and entry
// are stack and entry (see stackWalk).
func (x *explainer) key(by By, i int, ev *traces.Event, stack snapshot.StackID, entry int32) string {
	switch by {
	case BySite, ByFrame:
		frames := x.stacks.snap.StackFrames(stack)
		if len(frames) == 0 {
			if x.t.Start != nil && i < x.t.Start.Initial {
				return "(allocated before the trace: no stack)"
			}
			return "(no stack recorded)"
		}
		if by == ByFrame {
			for _, f := range frames {
				if isPython(f.Filename) {
					return FormatFrame(f)
				}
			}
			return FormatFrame(frames[0])
		}
		if f, ok := Site(frames); ok {
			return FormatFrame(f)
		}
		for _, f := range frames {
			if name, ok := backwardName(f.Name); ok {
				return "(autograd backward) " + name
			}
		}
		return "(no frame outside PyTorch)"
	case ByStream:
		return "stream " + strconv.FormatUint(ev.Stream, 10)
	case ByAnnotation:
		d, j := int(ev.Device), int(entry)
		t := ev.TimeUS
		if j >= 0 {
			t = x.stacks.snap.Trace(d).At(j).TimeUS
		}
		if a := x.t.Annotations.at(d, j, t); a != "" {
			return a
		}
		if j < 0 {
			return "(allocated before the trace)"
		}
		return "(no annotation)"
	}
	return sizeLabel(ev.Size)
}

// sizeLabel names a size exactly: in a unit when that says it exactly
// ("2 MiB"), else in bytes.
func sizeLabel(n int64) string {
	s := gpualloc.FormatSize(n)
	if num, unit, ok := strings.Cut(s, " "); ok && strings.Contains(num, ".") {
		s = strings.TrimRight(strings.TrimRight(num, "0"), ".") + " " + unit
	}
	if v, err := gpualloc.ParseSize(strings.ReplaceAll(s, " ", "")); err == nil && v == n {
		return s
	}
	return strconv.FormatInt(n, 10) + " B"
}

// FormatFrame writes a frame as "file:line function".
func FormatFrame(f snapshot.Frame) string {
	return fmt.Sprintf("%s:%d %s", f.Filename, f.Line, f.Name)
}

// Site returns the call site of a stack, innermost frame first: the first
// frame of a Python file that is neither PyTorch's own (a path with a torch
// directory) nor Python's library (lib/pythonX.Y outside site-packages, a
// "<frozen ...>" module). PyTorch's C++ frames (c10::, at::, torch::, the
// caching allocator) and the interpreter's (ceval.c, _PyEval_...) are in C
// and C++ files, never Python ones. It returns false when no frame is one.
func Site(frames []snapshot.Frame) (snapshot.Frame, bool) {
	for _, f := range frames {
		if isUserPython(f.Filename) {
			return f, true
		}
	}
	return snapshot.Frame{}, false
}

// isPython reports whether file is a Python file.
func isPython(file string) bool {
	return strings.HasSuffix(file, ".py") && !strings.HasPrefix(file, "<")
}

// backwardName returns the backward function of autograd that a C++ frame
// of PyTorch's runs ("div_tensor_other_backward" of
// "torch::autograd::generated::details::div_tensor_other_backward(...)"):
// what an allocation made on autograd's thread, which records no Python
// frame, was made for.
func backwardName(name string) (string, bool) {
	if strings.HasPrefix(name, "torch::autograd::AccumulateGrad::apply") {
		return "AccumulateGrad", true // a parameter's gradient
	}
	if !strings.HasPrefix(name, "torch::autograd::generated::") {
		return "", false
	}
	if i := strings.IndexByte(name, '('); i >= 0 {
		name = name[:i]
	}
	parts := strings.Split(name, "::")
	name = parts[len(parts)-1]
	if name == "apply" && len(parts) > 4 { // XBackward0::apply
		name = parts[len(parts)-2]
	}
	return name, name != ""
}

// isUserPython reports whether file is a Python file of the program, not
// of PyTorch or of Python's library.
func isUserPython(file string) bool {
	if !isPython(file) {
		return false
	}
	f := strings.ReplaceAll(file, `\`, "/")
	if strings.HasPrefix(f, "torch/") || strings.Contains(f, "/torch/") {
		return false
	}
	if i := strings.Index(f, "/lib/python"); i >= 0 && !strings.Contains(f[i:], "-packages/") {
		return false
	}
	return true
}
