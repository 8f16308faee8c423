package explain

import (
	"context"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// This file holds what simulate diff takes from Explain: the state of each
// device at the peak of its reserved memory, and replays of a trace from
// its start state with another strategy.

// AtPeak explains each device of t, in increasing order of index, at the
// first event after which its reserved memory stood at its peak in the
// replay as the trace ran: the moment Explain takes when no out-of-memory
// error comes first, whatever errors the trace records. It runs none of
// the replays of what would have fit: the reports have no Alternatives
// and no verdict. Options.At and TimeLimit are not read; Top, By,
// Capacity, Strategy and Timeline are, as Explain reads them.
//
// It returns the replay of the whole trace as it ran besides, with a
// series of at most seriesBuckets buckets (as sim.Config's
// SeriesBuckets; 0 for its default). It costs that replay and one more up
// to each device's peak, and for a trace of several devices O(log n)
// replays of prefixes to find each device's peak.
func AtPeak(ctx context.Context, t *Trace, o Options, seriesBuckets int) ([]Report, sim.Result, error) {
	o.At = nil
	x, devs, err := newExplainer(t, o)
	if err != nil {
		return nil, sim.Result{}, err
	}
	x.peakOnly = true
	return x.moments(ctx, devs, sim.Config{Trace: t.Name, Params: x.o.Strategy, SeriesBuckets: max(seriesBuckets, 0)})
}

// RecordedParams returns the strategy that Explain replays t with when
// Options gives none: pytorch with the settings that t records, PyTorch's
// defaults when it records none, whatever the environment says.
func RecordedParams(t *Trace) (*gpualloc.Params, error) {
	var conf string
	if t.Start != nil {
		conf = t.Start.Conf
	}
	return pytorchParams(conf)
}

// Replay replays the whole of t with p from t's start state, each device
// on a device of the capacity that Explain gives it with o (o.Capacity,
// else the memory t records, else 80 GiB), with a series of at most
// seriesBuckets buckets (as sim.Config's SeriesBuckets).
func Replay(ctx context.Context, t *Trace, o Options, p *gpualloc.Params, seriesBuckets int) (sim.Result, error) {
	return replayWith(ctx, t, o, sim.Config{Params: p, SeriesBuckets: seriesBuckets})
}

// ReplayEach replays t as Replay does, with no series, and calls observe
// after each event with the event's index in t.Events and what its device
// holds then (see sim.Config.Observe): the replay event by event, for an
// output that streams it. Its memory is the replay's, whatever the length
// of t.
func ReplayEach(ctx context.Context, t *Trace, o Options, p *gpualloc.Params, observe func(n int64, ev *traces.Event, after sim.DeviceBytes) error) (sim.Result, error) {
	return replayWith(ctx, t, o, sim.Config{Params: p, SeriesBuckets: -1, Observe: observe})
}

// replayWith replays t with c, its capacities and start state as Replay's.
func replayWith(ctx context.Context, t *Trace, o Options, c sim.Config) (sim.Result, error) {
	x, _, err := newReplayer(t, o)
	if err != nil {
		return sim.Result{}, err
	}
	c.Trace = t.Name
	return sim.ReplayContext(ctx, x.reader(x.ev.Len(), x.capOf), c)
}

// Key returns the group of the alloc event i of t as a Report's Holders
// name it when grouped by by, for a trace whose reports were made with
// the same grouping: the key of each event for tables of one's own. The
// StackIndex holds what it needs; build it once per trace.
func (s *StackIndex) Key(by By, i int) string {
	ev, err := s.x.ev.At(i)
	if err != nil {
		return ""
	}
	var stack snapshot.StackID
	var entry int32
	if s.stacks != nil {
		stack, entry = s.stacks[i], s.entries[i]
	}
	return s.x.key(s.x.by(by), i, &ev, stack, entry)
}

// A StackIndex gives the alloc events of a trace their groups, as Explain
// does, by index.
type StackIndex struct {
	x *explainer
	// stacks and entries are each event's stack and entry (see
	// stackWalk); nil when the events are not matched with entries.
	stacks  []snapshot.StackID
	entries []int32
}

// NewStackIndex matches the alloc events of t with the entries and stacks
// of its snapshot, as Explain does: O(events) time and memory. Events
// that cannot be read back (a Log's temporary file) leave the stacks out.
func NewStackIndex(t *Trace) *StackIndex {
	x := &explainer{t: t, ev: t.events()}
	s := &StackIndex{x: x}
	m, err := newStackMap(t, x.ev)
	if err != nil || !m.ok {
		x.stacks = &stackMap{snap: t.Snapshot}
		return s
	}
	x.stacks = m
	n := x.ev.Len()
	stacks, entries := make([]snapshot.StackID, n), make([]int32, n)
	w := m.walk()
	err = walk(x.ev, n, func(i int, ev *traces.Event) error {
		if ev.Op == traces.OpAlloc {
			stacks[i], entries[i] = m.stackOf(w, i, ev)
		}
		return nil
	})
	if err != nil {
		m.ok = false
		return s
	}
	s.stacks, s.entries = stacks, entries
	return s
}

// A Span is a named range of a device's time that a snapshot's
// external_annotations record: [StartUS, EndUS), EndUS the largest int64
// for a range still open when the snapshot was taken.
type Span struct {
	Name           string
	StartUS, EndUS int64
}

// Spans returns the ranges of device d, in order of start, the outer of
// two that start together first.
func (a *Annotations) Spans(d int) []Span {
	if a == nil {
		return nil
	}
	out := make([]Span, len(a.spans[d]))
	for i, s := range a.spans[d] {
		out[i] = Span{s.name, s.start, s.end}
	}
	return out
}
