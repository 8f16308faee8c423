package explain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// A Trace is what Explain reads: a trace's events in memory, with what its
// reader knows besides them.
type Trace struct {
	// Name names the trace in reports and errors.
	Name string
	// Format is the trace's format, as traces.FileReader names it: the
	// out-of-memory errors of a "PyTorch snapshot" are recorded ones.
	Format string
	// Events are the trace's events, as a traces.Reader yields them
	// (traces.ReadAll), held in memory; or Log holds them, in its place.
	Events []traces.Event
	// Log, when not nil, holds the trace's events in place of Events, in
	// pages that go to a temporary file past a bound (see EventLog):
	// Explain then holds O(live allocations) of its own, whatever the
	// length of the trace.
	Log *EventLog
	// Start is the reader's start state, for a trace that starts from a
	// recorded state of the allocator (a PyTorch snapshot's); nil for none.
	Start *traces.Start
	// Memory gives the memory of each device that the trace records (a
	// PyTorch snapshot with an out-of-memory error); nil for none.
	Memory sim.CapacityReporter
	// Snapshot is the PyTorch snapshot the events were read from, read with
	// its stacks, for the call sites; nil when the trace is none, or its
	// stacks were not read.
	Snapshot *snapshot.Snapshot
	// Annotations are the snapshot's annotations, for ByAnnotation; nil
	// when they were not read.
	Annotations *Annotations
}

// Options say what Explain looks at.
type Options struct {
	// Capacity is every device's memory; 0 means the memory that the trace
	// records for the device, else virtual.DefaultCapacity (80 GiB).
	Capacity int64
	// At, when set, is the moment to explain instead of the first OOM or
	// the peak: the state after an event.
	At *At
	// By groups the live bytes: BySite (the default), ByFrame, ByStream,
	// BySize or ByAnnotation.
	By By
	// Top is the number of groups listed before "other"; 0 means 10.
	Top int
	// Strategy is the allocator the trace ran with; nil means the pytorch
	// strategy with the settings that the trace records (PyTorch's
	// defaults when it records none).
	Strategy *gpualloc.Params
	// TimeLimit bounds the whole of Explain; 0 means 30 seconds. The
	// moments and their breakdowns come first; the rows of what would have
	// fit that it leaves no time for are marked TimedOut.
	TimeLimit time.Duration
	// Workers is the number of replays run at once; 0 means GOMAXPROCS.
	Workers int
	// Timeline asks for each report's Timeline, for figures.
	Timeline bool
}

// At names a moment: the state after event Event (from 0) or, when ByTime
// is set, after the last event whose time is at most TimeUS.
type At struct {
	Event  int64
	TimeUS int64
	ByTime bool
}

// By says how the live bytes are grouped.
type By string

// The groupings of the live bytes.
const (
	BySite   By = "site"   // the first frame outside PyTorch's own code and Python's interpreter (see Site)
	ByFrame  By = "frame"  // the innermost Python frame, PyTorch's included
	ByStream By = "stream" // the allocation's stream
	BySize   By = "size"   // the size requested
	// ByAnnotation groups by the annotation in force when the block was
	// allocated: its entry's user_metadata, else the innermost external
	// annotation (a record_function range) of its device at its time
	// (see Annotations).
	ByAnnotation By = "annotation"
)

// ParseBy returns the grouping named s.
func ParseBy(s string) (By, error) {
	switch b := By(s); b {
	case BySite, ByFrame, ByStream, BySize, ByAnnotation:
		return b, nil
	}
	return "", fmt.Errorf("%q: want site, frame, stream, size or annotation", s)
}

// The moments explained.
const (
	MomentOOM  = "oom"  // an allocation failed for want of memory
	MomentPeak = "peak" // reserved memory reached its peak
	MomentAt   = "at"   // the moment Options.At names
)

// The sources of a device's capacity.
const (
	CapacityRecorded = "recorded" // the memory the trace records for the device
	CapacityFlag     = "flag"     // Options.Capacity (simulate explain --capacity)
	CapacityDefault  = "default"  // virtual.DefaultCapacity
)

// The verdicts.
const (
	LiveBound          = "live-bound"          // the live bytes alone exceed the device
	FragmentationBound = "fragmentation-bound" // free memory there was, in pieces too small
	CacheBound         = "cache-bound"         // cached segments held what the request needed
	Fits               = "fits"                // the run fits the device as it ran
)

// A Report explains one device of a trace. Its JSON names are those of
// simulate explain -f json.
type Report struct {
	Trace  string `json:"trace"`
	Device int    `json:"device"`
	// Strategy is the full spec of the allocator the trace ran with.
	Strategy string `json:"strategy"`

	// Moment is MomentOOM, MomentPeak or MomentAt; EventIndex the event
	// (from 0) of the failing request, or the event after which the state
	// is taken; TimeUS its time, or traces.NoTime.
	Moment     string `json:"moment"`
	EventIndex int64  `json:"event_index"`
	TimeUS     int64  `json:"time_us"`
	// SinceStartUS is TimeUS less the time of the trace's first event.
	SinceStartUS int64 `json:"since_start_us"`
	// Recorded says that the moment is an out-of-memory error that the
	// trace records, not one a replay met.
	Recorded bool `json:"recorded"`

	CapacityBytes  int64  `json:"capacity_bytes"`
	CapacitySource string `json:"capacity_source"`
	// RequestBytes is the request that failed, for an OOM; else 0.
	RequestBytes int64 `json:"request_bytes"`

	// LiveBytes are the bytes the trace's live allocations of the device
	// asked for at the moment; ReservedBytes what the allocator held from
	// the device; FreeBytes the capacity less the bytes of the blocks
	// handed out: the free blocks of the segments and the memory the
	// device still had, in FreePieces pieces (each free block, and the
	// device's unreserved memory as one), the largest LargestFreeBytes.
	LiveBytes        int64 `json:"live_bytes"`
	ReservedBytes    int64 `json:"reserved_bytes"`
	FreeBytes        int64 `json:"free_bytes"`
	FreePieces       int64 `json:"free_pieces"`
	LargestFreeBytes int64 `json:"largest_free_bytes"`

	// Where the reserved bytes went: LiveBytes less UnservedBytes, plus
	// RoundingBytes (the blocks' bytes beyond what was asked),
	// FragmentedBytes (free bytes in segments holding a live block) and
	// CachedBytes (segments holding none) is ReservedBytes. UnservedBytes
	// are live allocations that an earlier OOM left without a block: 0
	// but at a moment after an OOM.
	RoundingBytes   int64 `json:"rounding_bytes"`
	FragmentedBytes int64 `json:"fragmented_bytes"`
	CachedBytes     int64 `json:"cached_bytes"`
	UnservedBytes   int64 `json:"unserved_bytes"`

	// PeakLiveBytes is the device's peak of live requested bytes over the
	// trace: what any allocator needs at least.
	PeakLiveBytes int64 `json:"peak_live_bytes"`

	// By is how Holders group the live bytes: as Options.By asks, but by
	// size where it asks for sites or frames of a trace without stacks, or
	// for annotations of a trace whose annotations were not read;
	// Frames says whether the trace records stacks. Holders are the largest groups, largest first, and
	// OtherBytes the rest of the live bytes: with them, the live bytes.
	By         By       `json:"by"`
	Frames     bool     `json:"frames"`
	Holders    []Holder `json:"holders"`
	OtherBytes int64    `json:"other_bytes"`
	OtherCount int64    `json:"other_count"`

	// Verdict is LiveBound, FragmentationBound, CacheBound or Fits, and
	// Sentence says it for people. Suggestion is the line to paste
	// (PYTORCH_ALLOC_CONF=... or GPUALLOC_POOL_TYPE=...), "" when no
	// change is needed or none fits; HeadroomBytes the capacity less the
	// peak reserved bytes of the run as it ran (fits) or with the
	// suggestion.
	Verdict       string `json:"verdict"`
	Sentence      string `json:"sentence"`
	Suggestion    string `json:"suggestion"`
	HeadroomBytes *int64 `json:"headroom_bytes"`

	// Alternatives are what would have fit, each replayed on the device.
	Alternatives []Alternative `json:"alternatives"`
	// OfflineBytes is the memory of the offline plan of the device's
	// allocations (package plan: its heuristics, then its exact search),
	// nil when the time ran out before any plan. When the search ran out
	// of time before it proved the plan the lowest, the offline row is
	// TimedOut and this is the best plan found.
	OfflineBytes *int64 `json:"offline_bytes"`
	// OfflineProvenBytes is the least memory that any placement of the
	// device's allocations needs, as plan's search proved it
	// (plan.Solution.ProvenBound, at least their peak of live bytes): what
	// no allocator beats. It equals OfflineBytes when the plan is proven
	// the lowest; nil with OfflineBytes.
	OfflineProvenBytes *int64 `json:"offline_proven_bytes"`

	// Timeline is the course of the device's memory, when
	// Options.Timeline asks for it.
	Timeline *Timeline `json:"-"`
}

// A Holder is a group of live allocations.
type Holder struct {
	Site  string `json:"site"`
	Bytes int64  `json:"bytes"`
	Count int64  `json:"count"`
}

// An Alternative is the trace replayed with another allocator, on the same
// device.
type Alternative struct {
	// Label says what the row is ("as recorded", "PyTorch defaults", ...);
	// Spec is the full spec replayed, or "offline" for the offline plan.
	Label string `json:"label"`
	Spec  string `json:"spec"`
	// Suggestion is the line that selects the allocator.
	Suggestion string `json:"-"`
	// PeakReservedBytes is the device's peak of reserved bytes, Fits
	// whether no allocation failed, MinCapacityBytes the smallest device,
	// a multiple of 1 MiB, with no OOM (and one 1 MiB below); nil where
	// the time limit ran out first, which TimedOut says. The offline
	// plan's row may be TimedOut with its figures: those of the best plan
	// found when the time ran out before the search proved it the lowest.
	PeakReservedBytes *int64 `json:"peak_reserved_bytes"`
	Fits              *bool  `json:"fits"`
	MinCapacityBytes  *int64 `json:"min_capacity_bytes"`
	TimedOut          bool   `json:"timed_out"`

	params  *gpualloc.Params
	written gpualloc.Spec // the spec as the row was made, its defaults left out
	from    *sim.Result   // the replay at the capacity, nil where none ran
}

// DefaultTimeLimit is the time Explain takes at most when Options gives
// none.
const DefaultTimeLimit = 30 * time.Second

// Explain explains each device of t, in increasing order of index. It
// fails when a replay fails for another reason than memory, when an
// Options.At names no event, or when ctx ends.
func Explain(ctx context.Context, t *Trace, o Options) ([]Report, error) {
	if o.TimeLimit <= 0 {
		o.TimeLimit = DefaultTimeLimit
	}
	start := time.Now()
	deadline := start.Add(o.TimeLimit)
	x, devs, err := newExplainer(t, o)
	if err != nil {
		return nil, err
	}
	reps, full, err := x.moments(ctx, devs, sim.Config{Trace: t.Name, Params: x.o.Strategy})
	if err != nil {
		return nil, err
	}
	// What would have fit, within what is left of the time.
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := x.alternatives(ctx, rctx, reps, &full); err != nil {
		return nil, err
	}
	for i := range reps {
		verdict(&reps[i])
	}
	return reps, nil
}

// An explainer holds what Explain shares between its devices.
type explainer struct {
	t      *Trace
	ev     eventSource // t's events
	o      Options
	caps   map[int]int64 // each device's capacity
	src    map[int]string
	stacks *stackMap
	// reserved follows each device's reserved bytes in the replay as the
	// trace ran, for the figures of a trace of several devices; nil
	// otherwise.
	reserved *deviceReserved
	// recorded is the strategy with the trace's recorded settings, when
	// Options gave none.
	recorded *gpualloc.Params
	// peakOnly takes every device's moment at the peak of its reserved
	// bytes, whatever out-of-memory errors come first (AtPeak).
	peakOnly bool
	// ooms holds the event of each device's first recorded out-of-memory
	// error (findOOMs).
	ooms map[int]int
}

// newExplainer returns the explainer of t, Options' defaults filled in,
// and t's devices, having checked that each holds its recorded start
// state.
func newExplainer(t *Trace, o Options) (*explainer, []int, error) {
	if o.Top <= 0 {
		o.Top = 10
	}
	if o.By == "" {
		o.By = BySite
	}
	x, devs, err := newReplayer(t, o)
	if err != nil {
		return nil, nil, err
	}
	if o.Strategy == nil {
		p, err := RecordedParams(t)
		if err != nil {
			return nil, nil, err
		}
		x.o.Strategy, x.recorded = p, p
	}
	if x.stacks, err = newStackMap(t, x.ev); err != nil {
		return nil, nil, err
	}
	return x, devs, nil
}

// newReplayer returns the explainer of t that replays it, with each
// device's capacity, and t's devices, having checked that each holds its
// recorded start state.
func newReplayer(t *Trace, o Options) (*explainer, []int, error) {
	x := &explainer{t: t, ev: t.events(), o: o, caps: map[int]int64{}, src: map[int]string{}}
	devs, err := devicesOf(x.ev)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range devs {
		x.caps[d], x.src[d] = x.capacity(d)
	}
	if err := x.startFits(devs); err != nil {
		return nil, nil, err
	}
	return x, devs, nil
}

// moments replays the trace as it ran, with cfg, and explains each of
// devs at its moment, with its timeline when Options asks for one. It
// returns the reports and that replay. With its series, the peak of a
// trace of one device is the event of the series' largest reserved
// bytes.
func (x *explainer) moments(ctx context.Context, devs []int, cfg sim.Config) ([]Report, sim.Result, error) {
	if x.o.Timeline && len(devs) > 1 {
		// Each device's own reserved bytes for its figure: the series
		// sums the devices.
		x.reserved = newDeviceReserved(x.ev.Len())
		cfg.Observe = x.reserved.observe
	}
	full, err := sim.ReplayContext(ctx, x.reader(x.ev.Len(), x.capOf), cfg)
	if err != nil {
		return nil, full, err
	}
	if !x.peakOnly {
		if err := x.findOOMs(); err != nil {
			return nil, full, err
		}
	}
	var reps []Report
	for _, d := range devs {
		rep, err := x.moment(ctx, d, &full)
		if err != nil {
			return nil, full, err
		}
		if x.o.Timeline {
			if rep.Timeline, err = x.timeline(d, &rep, &full); err != nil {
				return nil, full, err
			}
		}
		reps = append(reps, rep)
	}
	return reps, full, nil
}

func (x *explainer) capOf(d int) int64 { return x.caps[d] }

// startFits checks that each device holds the segments of the recorded
// state its trace starts from, which a replay restores before its first
// event.
func (x *explainer) startFits(devs []int) error {
	if x.t.Start == nil {
		return nil
	}
	for _, d := range devs {
		st := x.t.Start.State(d)
		if st == nil {
			continue
		}
		var held int64
		for _, sg := range st.Segments {
			held += sg.TotalSize
		}
		if held > x.caps[d] {
			return fmt.Errorf("%s: device %d: the recorded state the trace starts from holds %s in %d segments, more than the device's %s: a replay cannot start (give a larger capacity)",
				x.t.Name, d, gpualloc.FormatSize(held), len(st.Segments), gpualloc.FormatSize(x.caps[d]))
		}
	}
	return nil
}

// capacity returns device d's capacity and where it comes from.
func (x *explainer) capacity(d int) (int64, string) {
	if x.o.Capacity > 0 {
		return x.o.Capacity, CapacityFlag
	}
	if x.t.Memory != nil {
		if m := x.t.Memory.DeviceCapacity(d); m > 0 {
			return m, CapacityRecorded
		}
	}
	return virtual.DefaultCapacity, CapacityDefault
}

// pytorchParams returns the pytorch strategy with the settings conf, in
// PYTORCH_CUDA_ALLOC_CONF syntax ("" for PyTorch's defaults), whatever
// the environment says.
func pytorchParams(conf string) (*gpualloc.Params, error) {
	if conf == "" {
		conf = "none"
	}
	return gpualloc.Resolve(gpualloc.Spec{Name: "pytorch", Params: []gpualloc.KeyValue{{Key: "conf", Value: conf}}}, nil)
}

// A prefixReader reads the first events of a trace, from the trace's
// start state, on devices of the given capacities.
type prefixReader struct {
	traces.BatchReader
	start *traces.Start
	caps  func(dev int) int64
}

func (r prefixReader) DeviceCapacity(dev int) int64 { return r.caps(dev) }

func (r prefixReader) Start() *traces.Start { return r.start }

// reader returns a reader of the first n events of the trace, from its
// start state, each device d of capacity caps(d).
func (x *explainer) reader(n int, caps func(int) int64) prefixReader {
	return prefixReader{x.ev.Reader(x.t.Name, n), x.t.Start, caps}
}

// replay replays the first n events of the trace with p, each device d of
// capacity caps(d), and hands snap the state at the end when it is not nil:
// its segments, with no more than the last entry of each device's trace,
// so that the recording holds what is live, not an entry an event.
func (x *explainer) replay(ctx context.Context, p *gpualloc.Params, n int, caps func(int) int64, snap func(*snapshot.Snapshot) error) (sim.Result, error) {
	cfg := sim.Config{Trace: x.t.Name, Params: p, SeriesBuckets: -1, Snapshot: snap}
	if snap != nil {
		cfg.SnapshotEntries = 1
	}
	return sim.ReplayContext(ctx, x.reader(n, caps), cfg)
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

// firstPrefix returns the smallest n in [lo, hi] for which the replay of
// the first n events with the trace's strategy makes ok true of device d,
// given that it is true of hi and, once true, stays true for longer
// prefixes.
func (x *explainer) firstPrefix(ctx context.Context, d, lo, hi int, ok func(sim.DeviceResult) bool) (int, error) {
	for lo < hi {
		mid := lo + (hi-lo)/2
		r, err := x.replay(ctx, x.o.Strategy, mid, x.capOf, nil)
		if err != nil {
			return 0, err
		}
		if ok(deviceOf(&r, d)) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// moment finds the moment of device d and explains the state then; full
// is the replay of the whole trace as it ran.
func (x *explainer) moment(ctx context.Context, d int, full *sim.Result) (Report, error) {
	t, n := x.t, x.ev.Len()
	fd := deviceOf(full, d)
	rep := Report{Trace: t.Name, Device: d, Strategy: full.Strategy.Spec, CapacityBytes: x.caps[d], CapacitySource: x.src[d],
		PeakLiveBytes: fd.PeakRequestedBytes, By: x.o.By, TimeUS: traces.NoTime}
	initial := 0
	if t.Start != nil {
		initial = min(t.Start.Initial, n)
	}
	// prefix is the number of events whose state is explained.
	var prefix int
	switch {
	case x.o.At != nil:
		i, err := x.atEvent()
		if err != nil {
			return rep, err
		}
		rep.Moment, rep.EventIndex, prefix = MomentAt, int64(i), i+1
	case !x.peakOnly && x.src[d] == CapacityRecorded && x.recordedOOM(d) >= 0: // on another device, the replay's OOM matters
		i := x.recordedOOM(d)
		rep.Moment, rep.EventIndex, rep.Recorded, prefix = MomentOOM, int64(i), true, i
	case !x.peakOnly && fd.OOMs > 0:
		k, err := x.firstPrefix(ctx, d, max(initial, 1), n, func(r sim.DeviceResult) bool { return r.OOMs > 0 })
		if err != nil {
			return rep, err
		}
		rep.Moment, rep.EventIndex, prefix = MomentOOM, int64(k-1), k-1
	case len(full.Devices) == 1 && full.Series != nil && peakEvent(full.Series) >= 0:
		// The state restored from a recording is there from the first
		// event, its live blocks from the last of their allocations.
		i := max(peakEvent(full.Series), int64(initial)-1)
		rep.Moment, rep.EventIndex, prefix = MomentPeak, i, int(i)+1
	default:
		k, err := x.firstPrefix(ctx, d, max(initial, 1), n, func(r sim.DeviceResult) bool {
			return r.PeakReservedBytes >= fd.PeakReservedBytes
		})
		if err != nil {
			return rep, err
		}
		rep.Moment, rep.EventIndex, prefix = MomentPeak, int64(k-1), k
	}
	if i := rep.EventIndex; i >= 0 && i < int64(n) {
		ev, err := x.ev.At(int(i))
		if err != nil {
			return rep, err
		}
		if rep.Moment == MomentOOM {
			rep.RequestBytes = ev.Size
		}
		rep.TimeUS = ev.TimeUS
		if rep.TimeUS != traces.NoTime {
			first, err := x.ev.At(0)
			if err != nil {
				return rep, err
			}
			rep.SinceStartUS = rep.TimeUS - first.TimeUS
		}
	}
	if err := x.state(ctx, d, prefix, &rep); err != nil {
		return rep, err
	}
	return rep, x.holders(d, prefix, &rep)
}

// peakEvent returns the event at which the reserved bytes of a series
// first reached their peak, -1 for an empty series.
func peakEvent(s *sim.Series) int64 {
	var peak, at int64 = -1, -1
	for _, p := range s.All() {
		if p.Reserved.Max > peak {
			peak, at = p.Reserved.Max, p.Reserved.MaxEvent
		}
	}
	return at
}

// atEvent returns the index of the event that Options.At names: O(log n)
// events read, for a time.
func (x *explainer) atEvent() (int, error) {
	at, n := x.o.At, x.ev.Len()
	if n == 0 {
		return 0, fmt.Errorf("%s: --at: the trace has no event", x.t.Name)
	}
	if !at.ByTime {
		if at.Event < 0 || at.Event >= int64(n) {
			return 0, fmt.Errorf("%s: --at %d: the trace has events 0 to %d", x.t.Name, at.Event, n-1)
		}
		return int(at.Event), nil
	}
	first, err := x.ev.At(0)
	if err != nil {
		return 0, err
	}
	if first.TimeUS == traces.NoTime {
		return 0, fmt.Errorf("%s: --at %dus: the trace records no times; name an event instead", x.t.Name, at.TimeUS)
	}
	var rerr error
	i := sort.Search(n, func(i int) bool {
		ev, err := x.ev.At(i)
		if err != nil && rerr == nil {
			rerr = err
		}
		return ev.TimeUS > at.TimeUS
	}) - 1
	if rerr != nil {
		return 0, rerr
	}
	if i < 0 {
		return 0, fmt.Errorf("%s: --at %dus: the trace starts at %dus", x.t.Name, at.TimeUS, first.TimeUS)
	}
	return i, nil
}

// state replays the first n events and explains device d's memory after
// them.
func (x *explainer) state(ctx context.Context, d, n int, rep *Report) error {
	var snap *snapshot.Snapshot
	res, err := x.replay(ctx, x.o.Strategy, n, x.capOf, func(s *snapshot.Snapshot) error { snap = s; return nil })
	if err != nil {
		return err
	}
	dr := deviceOf(&res, d)
	rep.LiveBytes = dr.RequestedBytes
	var allocated, served, pieces, largest int64
	for _, sg := range snap.Segments {
		if sg.Device != d {
			continue
		}
		rep.ReservedBytes += sg.TotalSize
		live := false
		for _, b := range sg.Blocks {
			if b.Live() {
				live = true
				allocated += b.Size
				served += b.RequestedSize
				continue
			}
			pieces++
			largest = max(largest, b.Size)
		}
		if !live {
			rep.CachedBytes += sg.TotalSize
		}
	}
	if rep.ReservedBytes != dr.ReservedBytes || allocated != dr.AllocatedBytes {
		return fmt.Errorf("%s: device %d: the state after event %d holds %d bytes in %d of blocks, the replay %d in %d",
			x.t.Name, d, n-1, rep.ReservedBytes, allocated, dr.ReservedBytes, dr.AllocatedBytes)
	}
	if unreserved := rep.CapacityBytes - rep.ReservedBytes; unreserved > 0 {
		pieces++
		largest = max(largest, unreserved)
	}
	rep.FreeBytes = rep.CapacityBytes - allocated
	rep.FreePieces, rep.LargestFreeBytes = pieces, largest
	rep.RoundingBytes = allocated - served
	rep.FragmentedBytes = rep.ReservedBytes - allocated - rep.CachedBytes
	rep.UnservedBytes = rep.LiveBytes - served
	return nil
}

// isOutOfMemory reports whether a replay failed for want of memory: a
// recorded start state whose segments that hold live blocks the device
// cannot hold.
func isOutOfMemory(err error) bool { return errors.Is(err, gpualloc.ErrOutOfMemory) }
