package diff

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/explain"
)

// A Pair compares a device of two runs, A and B: each difference is B's
// figure less A's. Its JSON names are those of simulate diff -f json.
type Pair struct {
	A      string `json:"a"`
	B      string `json:"b"`
	Device int    `json:"device"`
	// BDevice is B's device: Device but where each trace has one device,
	// which are matched whatever their indexes.
	BDevice    int    `json:"b_device"`
	AStrategy  string `json:"a_strategy"`
	BStrategy  string `json:"b_strategy"`
	AEventPeak int64  `json:"a_peak_event"`
	BEventPeak int64  `json:"b_peak_event"`

	APeakReservedBytes  int64 `json:"a_peak_reserved_bytes"`
	BPeakReservedBytes  int64 `json:"b_peak_reserved_bytes"`
	APeakLiveBytes      int64 `json:"a_peak_live_bytes"`
	BPeakLiveBytes      int64 `json:"b_peak_live_bytes"`
	APeakAllocatedBytes int64 `json:"a_peak_allocated_bytes"`
	BPeakAllocatedBytes int64 `json:"b_peak_allocated_bytes"`
	ADeviceAllocs       int64 `json:"a_device_allocs"`
	BDeviceAllocs       int64 `json:"b_device_allocs"`

	// The split of each run's peak of reserved bytes at that peak (see
	// Device).
	ALiveBytes       int64 `json:"a_live_bytes"`
	BLiveBytes       int64 `json:"b_live_bytes"`
	ARoundingBytes   int64 `json:"a_rounding_bytes"`
	BRoundingBytes   int64 `json:"b_rounding_bytes"`
	AFragmentedBytes int64 `json:"a_fragmented_bytes"`
	BFragmentedBytes int64 `json:"b_fragmented_bytes"`
	ACachedBytes     int64 `json:"a_cached_bytes"`
	BCachedBytes     int64 `json:"b_cached_bytes"`

	// DeltaReservedBytes, the difference of the peaks of reserved bytes,
	// is DeltaLiveBytes, the difference of the live bytes at the two
	// peaks (the program holds more), plus DeltaAllocatorBytes, that of
	// their rounding, fragmented and cached bytes (the allocator keeps
	// more; less the live bytes an out-of-memory error left without a
	// block, none but after one).
	DeltaReservedBytes  int64 `json:"delta_reserved_bytes"`
	DeltaLiveBytes      int64 `json:"delta_live_bytes"`
	DeltaAllocatorBytes int64 `json:"delta_allocator_bytes"`
	DeltaPeakLiveBytes  int64 `json:"delta_peak_live_bytes"`
	DeltaAllocatedBytes int64 `json:"delta_peak_allocated_bytes"`
	DeltaDeviceAllocs   int64 `json:"delta_device_allocs"`
	DeltaRoundingBytes  int64 `json:"delta_rounding_bytes"`
	DeltaFragmented     int64 `json:"delta_fragmented_bytes"`
	DeltaCachedBytes    int64 `json:"delta_cached_bytes"`

	// By is the grouping of Sites; Sites every group of either run, the
	// largest differences first: their DeltaBytes add up to
	// DeltaLiveBytes.
	By    explain.By `json:"by"`
	Sites []SiteDiff `json:"sites"`
	// Cross are the cross replays: A's trace with B's settings and B's
	// with A's, or both with Options.With.
	Cross []Cross `json:"cross"`
	// Steps compares the runs step by step, where both record steps.
	Steps []StepDiff `json:"steps"`
}

// The changes of a site from A to B.
const (
	Grown  = "grown"
	Shrunk = "shrunk"
	New    = "new"  // live in B only
	Gone   = "gone" // live in A only
	Same   = "same"
)

// A SiteDiff is a group of live allocations in each run at its peak.
type SiteDiff struct {
	Site       string `json:"site"`
	Change     string `json:"change"`
	ABytes     int64  `json:"a_bytes"`
	BBytes     int64  `json:"b_bytes"`
	DeltaBytes int64  `json:"delta_bytes"`
	ACount     int64  `json:"a_count"`
	BCount     int64  `json:"b_count"`
}

// A Cross is a trace replayed with another's settings, or with
// Options.With.
type Cross struct {
	// Trace is the trace replayed, Side "a" or "b"; Spec the full spec it
	// was replayed with, Label what that is ("B's settings", or the
	// spec as Options.With gave it).
	Trace string `json:"trace"`
	Side  string `json:"side"`
	Spec  string `json:"spec"`
	Label string `json:"label"`
	// PeakReservedBytes is the device's peak of reserved bytes,
	// DeltaBytes that less the trace's own as it ran.
	PeakReservedBytes int64 `json:"peak_reserved_bytes"`
	DeltaBytes        int64 `json:"delta_bytes"`
}

// A StepDiff compares the kth step of each run.
type StepDiff struct {
	Step               int    `json:"step"`
	APeakLiveBytes     int64  `json:"a_peak_live_bytes"`
	BPeakLiveBytes     int64  `json:"b_peak_live_bytes"`
	DeltaLiveBytes     int64  `json:"delta_live_bytes"`
	APeakReservedBytes *int64 `json:"a_peak_reserved_bytes"`
	BPeakReservedBytes *int64 `json:"b_peak_reserved_bytes"`
	DeltaReservedBytes *int64 `json:"delta_reserved_bytes"`
}

// Compare returns a Pair of each device of a and b (see MatchDevices),
// without cross replays.
func Compare(a, b *Run) ([]Pair, error) {
	groups, err := MatchDevices([]*Run{a, b})
	if err != nil {
		return nil, err
	}
	var out []Pair
	for _, g := range groups {
		out = append(out, pair(a, b, &a.Devices[g[0]], &b.Devices[g[1]]))
	}
	return out, nil
}

// Two measures the traces a and b, compares them and runs the cross
// replays.
func Two(ctx context.Context, a, b *explain.Trace, o Options) ([]Pair, *Run, *Run, error) {
	ra, err := Measure(ctx, a, o)
	if err != nil {
		return nil, nil, nil, err
	}
	rb, err := Measure(ctx, b, o)
	if err != nil {
		return nil, nil, nil, err
	}
	pairs, err := Compare(ra, rb)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := CrossReplays(ctx, a, b, ra, rb, o, pairs); err != nil {
		return nil, nil, nil, err
	}
	return pairs, ra, rb, nil
}

// CrossReplays fills the Cross of each pair: a (measured as ra) replayed
// with b's recorded settings and b with a's, or both with o.With. A
// replay with the settings a trace ran with is the run itself, not
// replayed again.
func CrossReplays(ctx context.Context, a, b *explain.Trace, ra, rb *Run, o Options, pairs []Pair) error {
	eo := explain.Options{Capacity: o.Capacity}
	type job struct {
		t     *explain.Trace
		own   *Run
		side  string
		p     *gpualloc.Params
		label string
	}
	jobs := []job{{a, ra, "a", rb.params, "B's settings"}, {b, rb, "b", ra.params, "A's settings"}}
	if o.With != nil {
		label := o.WithSpec
		if label == "" {
			label = "the strategy given"
		}
		jobs = []job{{a, ra, "a", o.With, label}, {b, rb, "b", o.With, label}}
	}
	for _, j := range jobs {
		var peaks map[int]int64
		spec := ""
		if o.With == nil && sameSpec(j.p, j.own.params) {
			peaks, spec = map[int]int64{}, j.own.Strategy
			for _, d := range j.own.Devices {
				peaks[d.Device] = d.PeakReservedBytes
			}
		} else {
			res, err := explain.Replay(ctx, j.t, eo, j.p, -1)
			if err != nil {
				return fmt.Errorf("%s with %s: %w", j.t.Name, j.label, err)
			}
			peaks, spec = map[int]int64{}, res.Strategy.Spec
			for _, d := range res.Devices {
				peaks[d.Device] = d.PeakReservedBytes
			}
		}
		for i := range pairs {
			p := &pairs[i]
			dev, own := p.Device, p.APeakReservedBytes
			if j.side == "b" {
				dev, own = p.BDevice, p.BPeakReservedBytes
			}
			p.Cross = append(p.Cross, Cross{Trace: j.t.Name, Side: j.side, Spec: spec, Label: j.label,
				PeakReservedBytes: peaks[dev], DeltaBytes: peaks[dev] - own})
		}
	}
	return nil
}

// sameSpec reports whether two strategies are the same, every parameter
// resolved.
func sameSpec(a, b *gpualloc.Params) bool {
	return a != nil && b != nil && a.Spec().String() == b.Spec().String()
}

// pair compares device da of a with device db of b.
func pair(a, b *Run, da, db *Device) Pair {
	p := Pair{A: a.Trace, B: b.Trace, Device: da.Device, BDevice: db.Device, AStrategy: a.Strategy, BStrategy: b.Strategy,
		AEventPeak: da.EventIndex, BEventPeak: db.EventIndex,
		APeakReservedBytes: da.PeakReservedBytes, BPeakReservedBytes: db.PeakReservedBytes,
		APeakLiveBytes: da.PeakLiveBytes, BPeakLiveBytes: db.PeakLiveBytes,
		APeakAllocatedBytes: da.PeakAllocatedBytes, BPeakAllocatedBytes: db.PeakAllocatedBytes,
		ADeviceAllocs: da.DeviceAllocs, BDeviceAllocs: db.DeviceAllocs,
		ALiveBytes: da.LiveBytes, BLiveBytes: db.LiveBytes, ARoundingBytes: da.RoundingBytes, BRoundingBytes: db.RoundingBytes,
		AFragmentedBytes: da.FragmentedBytes, BFragmentedBytes: db.FragmentedBytes, ACachedBytes: da.CachedBytes, BCachedBytes: db.CachedBytes,
		By: da.By, Cross: []Cross{}, Steps: []StepDiff{},
	}
	if db.By != da.By {
		p.By = explain.BySize // one trace has no stacks: compare by size
	}
	p.DeltaReservedBytes = db.PeakReservedBytes - da.PeakReservedBytes
	p.DeltaLiveBytes = db.LiveBytes - da.LiveBytes
	p.DeltaAllocatorBytes = p.DeltaReservedBytes - p.DeltaLiveBytes
	p.DeltaPeakLiveBytes = db.PeakLiveBytes - da.PeakLiveBytes
	p.DeltaAllocatedBytes = db.PeakAllocatedBytes - da.PeakAllocatedBytes
	p.DeltaDeviceAllocs = db.DeviceAllocs - da.DeviceAllocs
	p.DeltaRoundingBytes = db.RoundingBytes - da.RoundingBytes
	p.DeltaFragmented = db.FragmentedBytes - da.FragmentedBytes
	p.DeltaCachedBytes = db.CachedBytes - da.CachedBytes
	if db.By == da.By {
		p.Sites = DiffSites(da.Sites, db.Sites)
	} else {
		// Sites of one, sizes of the other match nothing: the whole live
		// bytes as one group each, so that the sum still holds.
		p.Sites = DiffSites([]Site{{Site: "(all live bytes)", Bytes: da.LiveBytes, Count: count(da.Sites)}},
			[]Site{{Site: "(all live bytes)", Bytes: db.LiveBytes, Count: count(db.Sites)}})
	}
	p.Steps = diffSteps(da.Steps, db.Steps)
	return p
}

func count(s []Site) int64 {
	var n int64
	for _, x := range s {
		n += x.Count
	}
	return n
}

// DiffSites matches two site tables, each in order of key, and returns
// every site of either, the largest differences first (then by key).
func DiffSites(a, b []Site) []SiteDiff {
	out := []SiteDiff{}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var d SiteDiff
		switch {
		case j == len(b) || i < len(a) && a[i].Site < b[j].Site:
			d = SiteDiff{Site: a[i].Site, ABytes: a[i].Bytes, ACount: a[i].Count}
			i++
		case i == len(a) || b[j].Site < a[i].Site:
			d = SiteDiff{Site: b[j].Site, BBytes: b[j].Bytes, BCount: b[j].Count}
			j++
		default:
			d = SiteDiff{Site: a[i].Site, ABytes: a[i].Bytes, ACount: a[i].Count, BBytes: b[j].Bytes, BCount: b[j].Count}
			i++
			j++
		}
		d.DeltaBytes = d.BBytes - d.ABytes
		switch {
		case d.ACount == 0 && d.BCount > 0:
			d.Change = New
		case d.BCount == 0 && d.ACount > 0:
			d.Change = Gone
		case d.DeltaBytes > 0:
			d.Change = Grown
		case d.DeltaBytes < 0:
			d.Change = Shrunk
		default:
			d.Change = Same
		}
		out = append(out, d)
	}
	slices.SortStableFunc(out, func(x, y SiteDiff) int {
		if c := cmp.Compare(abs(y.DeltaBytes), abs(x.DeltaBytes)); c != 0 {
			return c
		}
		return strings.Compare(x.Site, y.Site)
	})
	return out
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// diffSteps compares the steps two runs have both.
func diffSteps(a, b []Step) []StepDiff {
	out := []StepDiff{}
	for k := range min(len(a), len(b)) {
		s := StepDiff{Step: k + 1, APeakLiveBytes: a[k].PeakLiveBytes, BPeakLiveBytes: b[k].PeakLiveBytes}
		s.DeltaLiveBytes = s.BPeakLiveBytes - s.APeakLiveBytes
		if ra, rb := a[k].PeakReservedBytes, b[k].PeakReservedBytes; ra >= 0 && rb >= 0 {
			d := rb - ra
			s.APeakReservedBytes, s.BPeakReservedBytes, s.DeltaReservedBytes = &ra, &rb, &d
		}
		out = append(out, s)
	}
	return out
}

// MatchDevices pairs the devices of runs: by index, every run with the
// same devices; or, where every run has one device, those devices
// whatever their indexes (rank k of a job records on its device k). It
// returns, for each device, the index in each run's Devices.
func MatchDevices(runs []*Run) ([][]int, error) {
	one := true
	for _, r := range runs {
		one = one && len(r.Devices) == 1
	}
	if one {
		g := make([]int, len(runs))
		return [][]int{g}, nil
	}
	first := runs[0]
	for _, r := range runs[1:] {
		if !slices.EqualFunc(first.Devices, r.Devices, func(x, y Device) bool { return x.Device == y.Device }) {
			return nil, fmt.Errorf("the devices do not match: %s has %s and %s %s", first.Trace, deviceList(first), r.Trace, deviceList(r))
		}
	}
	var out [][]int
	for i := range first.Devices {
		g := make([]int, len(runs))
		for k := range g {
			g[k] = i
		}
		out = append(out, g)
	}
	return out, nil
}

// deviceList names the devices of r.
func deviceList(r *Run) string {
	if len(r.Devices) == 0 {
		return "no device (no allocation)"
	}
	var s []string
	for _, d := range r.Devices {
		s = append(s, fmt.Sprint(d.Device))
	}
	if len(s) == 1 {
		return "device " + s[0]
	}
	return "devices " + strings.Join(s, ", ")
}

// Sentences says what the cross replays of p tell, for people: one
// sentence a replay.
func Sentences(p *Pair) []string {
	size, signed := gpualloc.FormatSize, Signed
	d := p.DeltaReservedBytes
	var out []string
	if len(p.Cross) == 2 && p.Cross[0].Label != "B's settings" {
		a, b := p.Cross[0], p.Cross[1]
		prog := b.PeakReservedBytes - a.PeakReservedBytes
		out = append(out, fmt.Sprintf("With %s, A would reserve %s and B %s (%s): the program explains %s of the %s, the settings %s.",
			a.Label, size(a.PeakReservedBytes), size(b.PeakReservedBytes), signed(prog), signed(prog), signed(d), signed(d-prog)))
		return out
	}
	for _, c := range p.Cross {
		if c.Side == "a" {
			if c.Spec == p.AStrategy {
				out = append(out, fmt.Sprintf("A and B ran with the same settings (%s): the settings explain none of the %s.", ShortSpec(c.Spec), signed(d)))
				return out
			}
			out = append(out, fmt.Sprintf("With B's settings, A would reserve %s (%s): the allocator explains %s of the %s.",
				size(c.PeakReservedBytes), signed(c.DeltaBytes), signed(c.DeltaBytes), signed(d)))
		} else {
			out = append(out, fmt.Sprintf("With A's settings, B would reserve %s (%s): the program explains %s of the %s.",
				size(c.PeakReservedBytes), signed(c.DeltaBytes), signed(c.PeakReservedBytes-p.APeakReservedBytes), signed(d)))
		}
	}
	return out
}

// Signed writes a difference of bytes with its sign: "+1.2 GiB", "-512
// KiB", "0 B".
func Signed(n int64) string {
	switch {
	case n > 0:
		return "+" + gpualloc.FormatSize(n)
	case n < 0:
		return "-" + gpualloc.FormatSize(-n)
	}
	return "0 B"
}

// ShortSpec writes a full spec without the parameters left at their
// defaults ("=auto"): "pytorch:conf=expandable_segments:True".
func ShortSpec(spec string) string {
	name, params, ok := strings.Cut(spec, ":")
	if !ok {
		return spec
	}
	var keep []string
	for _, p := range strings.Split(params, ",") {
		if !strings.HasSuffix(p, "=auto") {
			keep = append(keep, p)
		}
	}
	if len(keep) == 0 {
		return name
	}
	return name + ":" + strings.Join(keep, ",")
}
