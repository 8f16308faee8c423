package diff

import (
	"cmp"
	"context"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// Options say how runs are measured and compared.
type Options struct {
	// By groups the live bytes at the peak, as explain.Options.By: by
	// site (the default), frame, stream, size or annotation.
	By explain.By
	// Capacity is every device's memory; 0 means the memory that each
	// trace records for the device, else 80 GiB.
	Capacity int64
	// With, when not nil, is the strategy both traces are replayed with
	// in the cross replays, WithSpec the text it was given as; nil means
	// each trace with the other's recorded settings.
	With     *gpualloc.Params
	WithSpec string
	// Step names the annotation whose ranges end the steps of a run
	// (external_annotations, record_function ranges), matched as a
	// prefix; "" means DefaultStep.
	Step string
}

// DefaultStep is the annotation that ends a training step unless
// Options.Step names another: PyTorch's optimizers record their step as
// "Optimizer.step#AdamW.step" and the like.
const DefaultStep = "Optimizer.step"

// MaxCurvePoints bounds the points of a Device's Curve.
const MaxCurvePoints = 600

// A Run is what diff keeps of one trace, device by device; not its events.
type Run struct {
	Trace string
	// Strategy is the full spec the trace was replayed with as it ran:
	// pytorch with its recorded settings.
	Strategy string
	Devices  []Device

	params *gpualloc.Params
}

// A Device holds the figures of one device of a run.
type Device struct {
	Device int

	// Over the replay as the trace ran, as simulate reports them: the
	// peaks of live (requested), allocated and reserved bytes, and the
	// successful device allocations.
	PeakLiveBytes      int64
	PeakAllocatedBytes int64
	PeakReservedBytes  int64
	DeviceAllocs       int64

	// At the first event after which the reserved bytes stood at their
	// peak (EventIndex), as simulate explain splits them: LiveBytes less
	// UnservedBytes, RoundingBytes, FragmentedBytes and CachedBytes add
	// up to PeakReservedBytes.
	EventIndex      int64
	LiveBytes       int64
	RoundingBytes   int64
	FragmentedBytes int64
	CachedBytes     int64
	UnservedBytes   int64

	// By is the grouping of Sites (by size for a trace without stacks);
	// Sites the live bytes at the peak by group, every group, in order of
	// MatchKey: they add up to LiveBytes.
	By    explain.By
	Sites []Site

	// Curve is the course of the device's memory over the trace, at most
	// MaxCurvePoints points, each the largest live bytes over its stretch
	// of events; Reserved is set where the replay's series tells the
	// device's reserved bytes (a trace of one device).
	Curve []CurvePoint
	// Steps are the device's steps, when its trace records them.
	Steps []Step
}

// A Site is a group of live allocations, matched across runs by its key.
type Site struct {
	Site  string
	Bytes int64
	Count int64
}

// A CurvePoint is the largest figures over a stretch of a trace: Frac is
// the stretch's start as a fraction of the trace's events, Step the
// stretch's start in steps (k plus the fraction of step k's events before
// it; -1 where the trace has no steps), Reserved -1 where unknown.
type CurvePoint struct {
	Frac     float64
	Step     float64
	Live     int64
	Reserved int64
}

// A Step is one step of a device: its events after the end of the
// previous step's annotation, up to the end of its own.
type Step struct {
	// Index counts the steps from 1.
	Index int
	// First and Last are the step's events (indexes in the trace).
	First, Last int64
	// PeakLiveBytes is the device's peak of live bytes within the step;
	// PeakReservedBytes its peak of reserved bytes, -1 when the replay
	// cannot tell it for the device (a trace of several devices).
	PeakLiveBytes     int64
	PeakReservedBytes int64
}

// Measure replays t as it ran (pytorch with its recorded settings) and
// keeps what comparisons need: see Run. Its cost is explain.AtPeak's,
// and, for a trace with steps, a series of one bucket per event.
func Measure(ctx context.Context, t *explain.Trace, o Options) (*Run, error) {
	p, err := explain.RecordedParams(t)
	if err != nil {
		return nil, err
	}
	eo := explain.Options{Capacity: o.Capacity, By: o.By, Top: math.MaxInt32, Strategy: p}
	ends := stepEnds(t, o.Step)
	buckets := 0
	if len(ends) > 0 {
		buckets = len(t.Events) + 2 // a bucket per event: each step's exact peak
	}
	reps, full, err := explain.AtPeak(ctx, t, eo, buckets)
	if err != nil {
		return nil, err
	}
	run := &Run{Trace: t.Name, Strategy: full.Strategy.Spec, params: p}
	for i := range reps {
		rep := &reps[i]
		fd := deviceOf(&full, rep.Device)
		d := Device{Device: rep.Device, PeakLiveBytes: fd.PeakRequestedBytes, PeakAllocatedBytes: fd.PeakAllocatedBytes,
			PeakReservedBytes: fd.PeakReservedBytes, DeviceAllocs: fd.DeviceMallocs, EventIndex: rep.EventIndex,
			LiveBytes: rep.LiveBytes, RoundingBytes: rep.RoundingBytes, FragmentedBytes: rep.FragmentedBytes,
			CachedBytes: rep.CachedBytes, UnservedBytes: rep.UnservedBytes, By: rep.By}
		d.Sites = matchSites(rep.Holders, rep.OtherBytes, rep.OtherCount)
		var series *sim.Series
		if len(full.Devices) == 1 {
			series = full.Series
		}
		d.Steps = steps(t.Events, d.Device, ends[d.Device], series)
		d.Curve = curve(t.Events, d.Device, d.Steps, series)
		run.Devices = append(run.Devices, d)
	}
	return run, nil
}

// deviceOf returns the figures of device d in r (zero when d has none).
func deviceOf(r *sim.Result, d int) sim.DeviceResult {
	for _, dr := range r.Devices {
		if dr.Device == d {
			return dr
		}
	}
	return sim.DeviceResult{Device: d}
}

// frameKey is a site or frame as explain names it, "file:line function".
var frameKey = regexp.MustCompile(`^(.*):[0-9]+ (.*)$`)

// MatchKey returns the key by which a group of live bytes is matched
// across runs: a site or frame, "file:line function", as "file:function",
// its line left out; any other group (a stream, a size, an annotation)
// as it is.
func MatchKey(group string) string {
	if m := frameKey.FindStringSubmatch(group); m != nil && !strings.HasPrefix(group, "(") {
		return m[1] + ":" + m[2]
	}
	return group
}

// matchSites returns the holders grouped by their MatchKey, in order of
// key; "other" holds what the holders leave out (none when Top took
// every group).
func matchSites(hs []explain.Holder, otherBytes, otherCount int64) []Site {
	idx := map[string]int{}
	var out []Site
	add := func(k string, b, c int64) {
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, Site{Site: k})
		}
		out[i].Bytes += b
		out[i].Count += c
	}
	for _, h := range hs {
		add(MatchKey(h.Site), h.Bytes, h.Count)
	}
	if otherCount > 0 {
		add("other", otherBytes, otherCount)
	}
	slices.SortFunc(out, func(a, b Site) int { return cmp.Compare(a.Site, b.Site) })
	return out
}

// stepEnds returns, by device, the end times of the ranges of t's
// annotations that name a step, in order; nil when t has none.
func stepEnds(t *explain.Trace, name string) map[int][]int64 {
	if t.Annotations == nil {
		return nil
	}
	if name == "" {
		name = DefaultStep
	}
	out := map[int][]int64{}
	for _, d := range traces.Devices(t.Events) {
		for _, s := range t.Annotations.Spans(d) {
			if strings.HasPrefix(s.Name, name) && s.EndUS != math.MaxInt64 {
				out[d] = append(out[d], s.EndUS)
			}
		}
		slices.Sort(out[d])
	}
	return out
}

// steps returns the steps of device d: step k holds the device's events
// of times after the (k-1)th end and up to the kth; the events after the
// last end are in no step. series, when not nil, is a series of the
// device alone with a bucket per event.
func steps(evs []traces.Event, d int, ends []int64, series *sim.Series) []Step {
	if len(ends) == 0 || len(evs) == 0 || evs[0].TimeUS == traces.NoTime {
		return nil
	}
	var reserved []int64 // by event, the reserved bytes after it and their peak within it
	if series != nil && series.Width() == 1 {
		reserved = make([]int64, 0, len(evs))
		for _, p := range series.All() {
			reserved = append(reserved, p.Reserved.Max)
		}
	}
	var out []Step
	var live int64
	k := 0
	cur := Step{Index: 1, First: -1, PeakReservedBytes: -1}
	for i := range evs {
		ev := &evs[i]
		for k < len(ends) && ev.TimeUS > ends[k] {
			if cur.First >= 0 {
				out = append(out, cur)
			}
			k++
			cur = Step{Index: k + 1, First: -1, PeakReservedBytes: -1}
		}
		if k == len(ends) {
			break
		}
		live += liveDelta(ev, d)
		if cur.First < 0 {
			cur.First = int64(i)
			cur.PeakLiveBytes = live
			if reserved != nil {
				cur.PeakReservedBytes = 0
			}
		}
		cur.Last = int64(i)
		cur.PeakLiveBytes = max(cur.PeakLiveBytes, live)
		if reserved != nil && i < len(reserved) {
			cur.PeakReservedBytes = max(cur.PeakReservedBytes, reserved[i])
		}
	}
	if k < len(ends) && cur.First >= 0 {
		out = append(out, cur)
	}
	return out
}

// curve returns the course of device d's memory: the largest live bytes
// over each stretch of events, and the largest reserved bytes where
// series tells them for the device.
func curve(evs []traces.Event, d int, steps []Step, series *sim.Series) []CurvePoint {
	if len(evs) == 0 {
		return nil
	}
	width := max((len(evs)+MaxCurvePoints-1)/MaxCurvePoints, 1)
	var out []CurvePoint
	var live int64
	for i := range evs {
		if i%width == 0 {
			out = append(out, CurvePoint{Frac: float64(i) / float64(len(evs)), Step: stepPos(steps, int64(i)), Live: live, Reserved: -1})
		}
		live += liveDelta(&evs[i], d)
		p := &out[len(out)-1]
		p.Live = max(p.Live, live)
	}
	if series != nil {
		w := int64(width)
		for _, p := range series.All() {
			for j := p.First / w; j <= p.Last/w && j < int64(len(out)); j++ {
				out[j].Reserved = max(out[j].Reserved, p.Reserved.Max)
			}
		}
	}
	return out
}

// liveDelta returns how ev changes the live bytes of device d.
func liveDelta(ev *traces.Event, d int) int64 {
	if int(ev.Device) != d {
		return 0
	}
	switch ev.Op {
	case traces.OpAlloc:
		return ev.Size
	case traces.OpFree:
		return -ev.Size
	}
	return 0
}

// stepPos returns where event i lies in steps: k-1 plus the fraction of
// step k's events before it, for an event of step k; -1 outside them.
func stepPos(steps []Step, i int64) float64 {
	for _, s := range steps {
		if i >= s.First && i <= s.Last {
			return float64(s.Index-1) + float64(i-s.First)/float64(s.Last-s.First+1)
		}
	}
	return -1
}
