package explain

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// A stackMap gives the alloc events of a PyTorch snapshot's trace their
// recorded stacks.
type stackMap struct {
	snap *snapshot.Snapshot
	// stacks holds the stack of each alloc event, and entries the index
	// of its entry in its device's trace (-1 for a block live before the
	// trace), by event index; nil when the events could not be matched
	// with the entries.
	stacks  []snapshot.StackID
	entries []int32
	// hasFrames says that the snapshot records stacks.
	hasFrames bool
}

// newStackMap matches the alloc events of t with the entries of its
// snapshot: the events of the blocks live before the trace, which a
// snapshot's reader yields first, by their address in the start state
// that the reader rebuilt; then each device's alloc and oom entries in
// order, which the reader yields in order. An event that does not match
// its entry (address and size) leaves the stacks out.
func newStackMap(t *Trace) *stackMap {
	s := t.Snapshot
	m := &stackMap{snap: s}
	if s == nil || t.Start == nil {
		return m
	}
	m.hasFrames = len(s.Stacks) > 1
	rules, err := s.AllocatorSettings.Rules()
	if err != nil {
		rules = snapshot.DefaultRules()
	}
	initial := t.Start.Initial
	starts := map[int]map[uint64]snapshot.StackID{}
	next := map[int]int{} // each device's next entry
	stacks := make([]snapshot.StackID, len(t.Events))
	entries := make([]int32, len(t.Events))
	for i := range t.Events {
		ev := &t.Events[i]
		if ev.Op != traces.OpAlloc {
			continue
		}
		d := int(ev.Device)
		if i < initial {
			st, ok := starts[d]
			if !ok {
				st = map[uint64]snapshot.StackID{}
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
				starts[d] = st
			}
			addr, ok := addressOf(ev)
			stack, found := st[addr]
			if !ok || !found {
				return m
			}
			stacks[i], entries[i] = stack, -1
			continue
		}
		tr := s.Trace(d)
		j := next[d]
		for j < tr.Len() && tr.Action(j) != snapshot.Alloc && tr.Action(j) != snapshot.OutOfMemory {
			j++
		}
		if j >= tr.Len() {
			return m
		}
		e := tr.At(j)
		next[d] = j + 1
		addr, isAddr := addressOf(ev)
		if e.Size != ev.Size || (e.Action == snapshot.OutOfMemory) != isOOMEvent(ev) ||
			(e.Action == snapshot.Alloc && (!isAddr || addr != e.Addr)) {
			return m
		}
		stacks[i], entries[i] = e.Stack, int32(j)
	}
	m.stacks, m.entries = stacks, entries
	return m
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

// addressOf returns the address that a snapshot's alloc event is named by.
func addressOf(ev *traces.Event) (uint64, bool) {
	id := ev.IDText()
	if !strings.HasPrefix(id, "0x") {
		return 0, false
	}
	a, err := strconv.ParseUint(id[2:], 16, 64)
	return a, err == nil
}

// frames reports whether the events have stacks.
func (m *stackMap) frames() bool { return m.stacks != nil && m.hasFrames }

// matched reports whether the events are matched with their entries.
func (m *stackMap) matched() bool { return m.stacks != nil }

// holders groups the live allocations of device d after the first n
// events, as Options.By says, into rep's Holders and OtherBytes.
func (x *explainer) holders(d, n int, rep *Report) {
	by := x.o.By
	rep.Frames = x.stacks.frames()
	if !rep.Frames && (by == BySite || by == ByFrame) || by == ByAnnotation && (x.t.Annotations == nil || !x.stacks.matched()) {
		by = BySize
	}
	rep.By = by
	live := liveAt(x.t.Events, d, n)
	type group struct {
		key          string
		bytes, count int64
	}
	idx := map[string]int{}
	var groups []group
	for _, i := range live {
		ev := &x.t.Events[i]
		k := x.key(by, i, ev)
		j, ok := idx[k]
		if !ok {
			j = len(groups)
			idx[k] = j
			groups = append(groups, group{key: k})
		}
		groups[j].bytes += ev.Size
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
}

// liveAt returns the indexes of the alloc events of device d that are live
// after the first n events, in the order of their allocation.
func liveAt(events []traces.Event, d, n int) []int {
	bySlot := map[int32]int{}
	for i := range events[:n] {
		ev := &events[i]
		if int(ev.Device) != d {
			continue
		}
		switch ev.Op {
		case traces.OpAlloc:
			bySlot[ev.Slot] = i
		case traces.OpFree:
			delete(bySlot, ev.Slot)
		}
	}
	out := make([]int, 0, len(bySlot))
	for _, i := range bySlot {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// key returns the group of the alloc event i.
func (x *explainer) key(by By, i int, ev *traces.Event) string {
	switch by {
	case BySite, ByFrame:
		frames := x.stacks.snap.StackFrames(x.stacks.stacks[i])
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
		d, j := int(ev.Device), int(x.stacks.entries[i])
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
