package explain

import (
	"context"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
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
	if o.Top <= 0 {
		o.Top = 10
	}
	if o.By == "" {
		o.By = BySite
	}
	o.At = nil
	x := &explainer{t: t, o: o, caps: map[int]int64{}, src: map[int]string{}}
	devs := traces.Devices(t.Events)
	for _, d := range devs {
		x.caps[d], x.src[d] = x.capacity(d)
	}
	if o.Strategy == nil {
		p, err := RecordedParams(t)
		if err != nil {
			return nil, sim.Result{}, err
		}
		x.o.Strategy, x.recorded = p, p
	}
	x.stacks = newStackMap(t)
	if err := x.startFits(devs); err != nil {
		return nil, sim.Result{}, err
	}
	r := prefixReader{traces.NewSliceReader(t.Name, t.Events), sim.StartOf(t.Start), x.capOf}
	full, err := sim.ReplayContext(ctx, r, sim.Config{Trace: t.Name, Params: x.o.Strategy, SeriesBuckets: max(seriesBuckets, 0)})
	if err != nil {
		return nil, full, err
	}
	var reps []Report
	for _, d := range devs {
		rep, err := x.peak(ctx, d, &full)
		if err != nil {
			return nil, full, err
		}
		if o.Timeline {
			rep.Timeline = x.timeline(d, &rep, &full)
		}
		reps = append(reps, rep)
	}
	return reps, full, nil
}

// peak explains device d at the peak of its reserved bytes in full, the
// replay of the whole trace as it ran.
func (x *explainer) peak(ctx context.Context, d int, full *sim.Result) (Report, error) {
	t := x.t
	fd := deviceOf(full, d)
	rep := Report{Trace: t.Name, Device: d, Strategy: full.Strategy.Spec, CapacityBytes: x.caps[d], CapacitySource: x.src[d],
		PeakLiveBytes: fd.PeakRequestedBytes, By: x.o.By, TimeUS: traces.NoTime, Moment: MomentPeak}
	initial := 0
	if t.Start != nil {
		initial = min(t.Start.Initial(), len(t.Events))
	}
	var prefix int
	if len(full.Devices) == 1 && full.Series != nil && peakEvent(full.Series) >= 0 {
		i := max(peakEvent(full.Series), int64(initial)-1)
		rep.EventIndex, prefix = i, int(i)+1
	} else {
		n, err := x.firstPrefix(ctx, d, max(initial, 1), len(t.Events), func(r sim.DeviceResult) bool {
			return r.PeakReservedBytes >= fd.PeakReservedBytes
		})
		if err != nil {
			return rep, err
		}
		rep.EventIndex, prefix = int64(n-1), n
	}
	if i := rep.EventIndex; i >= 0 && i < int64(len(t.Events)) {
		rep.TimeUS = t.Events[i].TimeUS
		if rep.TimeUS != traces.NoTime {
			rep.SinceStartUS = rep.TimeUS - t.Events[0].TimeUS
		}
	}
	if err := x.state(ctx, d, prefix, &rep); err != nil {
		return rep, err
	}
	x.holders(d, prefix, &rep)
	return rep, nil
}

// RecordedParams returns the strategy that Explain replays t with when
// Options gives none: pytorch with the settings that t records, PyTorch's
// defaults when it records none, whatever the environment says.
func RecordedParams(t *Trace) (*gpualloc.Params, error) {
	return pytorchParams(sim.StartOf(t.Start).RecordedConf())
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
	x := &explainer{t: t, o: o, caps: map[int]int64{}, src: map[int]string{}}
	devs := traces.Devices(t.Events)
	for _, d := range devs {
		x.caps[d], x.src[d] = x.capacity(d)
	}
	if err := x.startFits(devs); err != nil {
		return sim.Result{}, err
	}
	r := prefixReader{traces.NewSliceReader(t.Name, t.Events), sim.StartOf(t.Start), x.capOf}
	c.Trace = t.Name
	return sim.ReplayContext(ctx, r, c)
}

// Key returns the group of the alloc event i of t as a Report's Holders
// name it when grouped by by, for a trace whose reports were made with
// the same grouping: the key of each event for tables of one's own. The
// StackIndex holds what it needs; build it once per trace.
func (s *StackIndex) Key(by By, i int) string {
	return s.x.key(s.by(by), i, &s.x.t.Events[i])
}

// A StackIndex gives the alloc events of a trace their groups, as Explain
// does.
type StackIndex struct{ x *explainer }

// NewStackIndex matches the alloc events of t with the entries and stacks
// of its snapshot, as Explain does: O(events) time and memory.
func NewStackIndex(t *Trace) *StackIndex {
	x := &explainer{t: t}
	x.stacks = newStackMap(t)
	return &StackIndex{x}
}

// by returns the grouping that holders uses for a request of by.
func (s *StackIndex) by(by By) By {
	if by == "" {
		by = BySite
	}
	if !s.x.stacks.frames() && (by == BySite || by == ByFrame) || by == ByAnnotation && (s.x.t.Annotations == nil || !s.x.stacks.matched()) {
		return BySize
	}
	return by
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
