// Package tune searches the settings of PyTorch's CUDA caching allocator
// (PYTORCH_CUDA_ALLOC_CONF) for the ones under which a trace needs the least
// memory: the lowest peak of reserved memory with no allocation failing for
// want of memory on a device of a given capacity, as the pytorch strategy
// replays it.
//
// The search is coarse to fine. A coarse grid crosses expandable_segments
// (False, True), max_split_size_mb (unlimited, 32, 128, 512) and
// roundup_power2_divisions (none, 2, 8), and, under a memory fraction,
// garbage_collection_threshold (off, 0.8). From the best setting found,
// each setting in turn then moves to its neighbours on a finer ladder
// (max_split_size_mb down to 20 MiB and up to 4 GiB in steps of about a
// half, roundup_power2_divisions through every power of two to 32, the
// threshold in tenths), as long as a move finds a better setting; then
// max_split_size_mb is bisected, to the MiB, between the best value and
// the ladder's next rungs. Each round's settings replay in parallel, from
// the trace decoded once into memory.
//
// Settings are ranked by: no OOM first; then lower peak reserved bytes (on
// a trace of several devices, the largest device's peak, each device being
// of the capacity given: never their sum; then the peak of the sum; or the
// figures of the one device that [Options].Device names); then
// fewer device allocations; then fewer settings away from PyTorch's
// defaults (a shorter conf to paste); then the conf's text. PyTorch's
// defaults are in the coarse grid, so the setting found is never worse
// than them.
//
// garbage_collection_threshold acts only under a per-process memory fraction
// (torch.cuda.set_per_process_memory_fraction; PyTorch's
// CUDACachingAllocator.cpp runs garbage_collect_cached_blocks only when a
// fraction is set), which PYTORCH_CUDA_ALLOC_CONF cannot give: it is
// searched only when [Options].MemoryFraction is set, and every setting
// then replays under that fraction.
//
// The package sits above sim, whose replays it drives, and registers the
// pytorch strategy that it tunes; package mincap beside it searches the
// smallest device instead.
package tune

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/internal/torchsize"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/pytorch" // the strategy tuned
	"github.com/gpualloc/gpualloc/traces"
)

// Options configure [Run]. The zero value tunes for an 80 GiB device on
// every core, without a memory fraction.
type Options struct {
	// Capacity is the device's size in bytes; 0 means that of Memory, else
	// virtual.DefaultCapacity (80 GiB).
	Capacity int64
	// MemoryFraction, if in (0, 1], caps reserved memory at this fraction
	// of Capacity in every replay (the pytorch strategy's memory_fraction,
	// torch.cuda.set_per_process_memory_fraction), and the search tries
	// garbage_collection_threshold too.
	MemoryFraction float64
	// Workers is the number of replays at once; 0 means
	// runtime.GOMAXPROCS(0).
	Workers int
	// Start is the recorded state the trace starts from (a PyTorch
	// snapshot's: see traces.Start), which every replay restores, as a
	// replay of the file does, and the settings it records, which
	// Report.Recorded replays with; nil for none.
	Start *traces.Start
	// Memory, with Capacity 0, gives each device of the trace the memory
	// that the trace records for it (sim.CapacityReporter: a PyTorch
	// snapshot's, a native trace's device_memory), as a replay of the file
	// without --capacity does; virtual.DefaultCapacity where it records
	// none.
	Memory sim.CapacityReporter
	// Device, when not nil, ranks the settings by that device of the trace
	// alone: its OOMs, its peak of reserved bytes and its device
	// allocations, for the best setting of one device of several (simulate
	// explain's row for each device). Every device still replays, on its
	// own capacity, as the start state and the other devices' events shape
	// nothing of this device's figures but the run's length.
	Device *int
	// Events, when not nil, reads the trace anew for each replay, in
	// place of Run's events (which may then be nil): a trace that is not
	// held in memory.
	Events func() traces.BatchReader
}

// A Setting is one combination of the allocator's settings that the
// search varies. The zero value is PyTorch's defaults.
type Setting struct {
	ExpandableSegments bool
	// MaxSplitMB is max_split_size_mb, 0 for unlimited (the default).
	MaxSplitMB int64
	// Divisions is roundup_power2_divisions for every size, 0 for none
	// (the default).
	Divisions int64
	// GCThreshold is garbage_collection_threshold, 0 for off (the default).
	GCThreshold float64
}

// Conf returns the setting in PYTORCH_CUDA_ALLOC_CONF syntax, the settings
// at their defaults left out: "" for PyTorch's defaults.
func (s Setting) Conf() string {
	var opts []string
	if s.MaxSplitMB > 0 {
		opts = append(opts, "max_split_size_mb:"+strconv.FormatInt(s.MaxSplitMB, 10))
	}
	if s.Divisions > 0 {
		opts = append(opts, "roundup_power2_divisions:"+strconv.FormatInt(s.Divisions, 10))
	}
	if s.GCThreshold > 0 {
		opts = append(opts, "garbage_collection_threshold:"+strconv.FormatFloat(s.GCThreshold, 'g', -1, 64))
	}
	if s.ExpandableSegments {
		opts = append(opts, "expandable_segments:True")
	}
	return strings.Join(opts, ",")
}

// changed counts the settings away from the defaults.
func (s Setting) changed() int {
	n := 0
	for _, c := range []bool{s.ExpandableSegments, s.MaxSplitMB > 0, s.Divisions > 0, s.GCThreshold > 0} {
		if c {
			n++
		}
	}
	return n
}

// A Trial is one setting replayed, and what the replay measured.
type Trial struct {
	Setting Setting
	Result  sim.Result
}

// Report is the outcome of [Run].
type Report struct {
	Trace string
	// Capacity and MemoryFraction are those the settings were tried at.
	Capacity       int64
	MemoryFraction float64
	// Best is the best setting found (with OOMs only when every setting
	// tried ran out of memory); Default is PyTorch's defaults.
	Best, Default Trial
	// Recorded is the replay with the settings that the trace records
	// (Options.Start's Conf, in RecordedConf), the run's own, when
	// they are not PyTorch's defaults; nil otherwise. The search does not
	// rank it: its settings may lie outside the search's (several
	// divisions per interval, max_non_split_rounding_mb).
	Recorded     *Trial
	RecordedConf string
	// Allocator are the pytorch strategy's parameters, besides the
	// setting's conf, that every replay has: the allocator the trace
	// records (device=npu for a snapshot that torch_npu wrote; see
	// pytorch.AllocatorParams), none for a trace that records none.
	Allocator []gpualloc.KeyValue
	// Front is the Pareto front of the settings tried without OOM, peak
	// reserved bytes (PeakReserved: the largest device's) against device
	// allocations: every setting that no other beats on one without losing
	// on the other, in increasing order of peak reserved bytes (the first
	// has the lowest peak; the last the fewest device allocations).
	Front []Trial
	// Tried is the number of distinct settings replayed.
	Tried int
	// SplitRange is the plateau of max_split_size_mb around Best's: the
	// lowest and highest values tried, the other settings as Best's, that
	// give Best's peaks of reserved bytes with no more OOMs, every value
	// tried between them giving it too; Best's value is one of them, the
	// one the ranking picked (fewer device allocations, then the conf's
	// text). It is zero when Best's max_split_size_mb is unlimited or no
	// other value tried gives its peaks.
	SplitRange [2]int64
}

// Spec returns the pytorch strategy's spec that replays setting s under
// the memory fraction f (0: none), the environment aside.
func Spec(s Setting, f float64) gpualloc.Spec {
	conf := s.Conf()
	if conf == "" {
		conf = "none"
	}
	sp := gpualloc.Spec{Name: "pytorch", Params: []gpualloc.KeyValue{{Key: "conf", Value: conf}}}
	if f > 0 {
		sp.Params = append(sp.Params, gpualloc.KeyValue{Key: "memory_fraction", Value: strconv.FormatFloat(f, 'g', -1, 64)})
	}
	return sp
}

// Line returns the line a user sets for setting s on the allocator of
// the report's replays, "VARIABLE=conf" (pytorch.PasteLine):
// PYTORCH_NPU_ALLOC_CONF for torch_npu's, else PYTORCH_CUDA_ALLOC_CONF.
func (r *Report) Line(s Setting) string {
	return pytorch.PasteLine(r.withAllocator(s.Conf()))
}

// withAllocator returns conf with the settings of the allocator that the
// report's replays model (Allocator) after it.
func (r *Report) withAllocator(conf string) string {
	for _, kv := range r.Allocator {
		conf = strings.TrimPrefix(conf+","+kv.Key+":"+kv.Value, ",")
	}
	return conf
}

// allocator returns the pytorch parameters of the allocator that the
// trace records (see Report.Allocator).
func (t *tuner) allocator() []gpualloc.KeyValue {
	return pytorch.AllocatorParams(t.recordedConf())
}

// Ladders of the fine search, in increasing order; 0 is the default.
var (
	splitLadder     = []int64{20, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096, 0}
	divisionsLadder = []int64{0, 1, 2, 4, 8, 16, 32}
	gcLadder        = []float64{0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95}
)

// coarse grid
var (
	coarseSplit     = []int64{0, 32, 128, 512}
	coarseDivisions = []int64{0, 2, 8}
	coarseGC        = []float64{0, 0.8}
)

// maxRounds bounds the rounds of the fine search.
const maxRounds = 16

// Run searches the settings for the trace of events, named name (events as
// a [traces.Reader] yields them; [traces.ReadAll] reads them from a file).
// It fails only when a replay fails for another reason than memory, or
// when ctx is done.
func Run(ctx context.Context, name string, events []traces.Event, opts Options) (*Report, error) {
	if opts.Capacity == 0 && opts.Memory == nil {
		opts.Capacity = virtual.DefaultCapacity
	}
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("tune: negative capacity %d", opts.Capacity)
	}
	if !(opts.MemoryFraction >= 0 && opts.MemoryFraction <= 1) {
		return nil, fmt.Errorf("tune: memory fraction %v: want a number in (0, 1], or 0 for none", opts.MemoryFraction)
	}
	if capBytes := int64(opts.MemoryFraction * float64(opts.Capacity)); opts.MemoryFraction > 0 && capBytes < torchsize.SmallBuffer {
		// PyTorch caps at the fraction even when the cap rounds to 0
		// bytes: no setting could allocate anything.
		return nil, fmt.Errorf("tune: memory fraction %v of %s caps reserved memory at %s, under PyTorch's smallest segment (%s): every allocation fails whatever the setting",
			opts.MemoryFraction, gpualloc.FormatSize(opts.Capacity), gpualloc.FormatSize(capBytes), gpualloc.FormatSize(torchsize.SmallBuffer))
	}
	t := &tuner{ctx: ctx, name: name, events: events, opts: opts, seen: map[Setting]*Trial{}}

	var grid []Setting
	gcs := []float64{0}
	if opts.MemoryFraction > 0 {
		gcs = coarseGC
	}
	for _, exp := range []bool{false, true} {
		for _, ms := range coarseSplit {
			for _, d := range coarseDivisions {
				for _, gc := range gcs {
					grid = append(grid, Setting{ExpandableSegments: exp, MaxSplitMB: ms, Divisions: d, GCThreshold: gc})
				}
			}
		}
	}
	if err := t.try(grid); err != nil {
		return nil, err
	}
	for range maxRounds {
		before := t.best()
		if err := t.try(t.neighbours(before.Setting)); err != nil {
			return nil, err
		}
		if t.best() == before {
			break
		}
	}
	if err := t.bisectSplit(); err != nil {
		return nil, err
	}

	r := &Report{Trace: name, Capacity: opts.Capacity, MemoryFraction: opts.MemoryFraction,
		Best: *t.best(), Default: *t.seen[Setting{}], Tried: len(t.seen), Allocator: t.allocator()}
	if r.Capacity == 0 {
		r.Capacity = r.Default.Result.CapacityBytes // the largest device's
	}
	var err error
	if r.Recorded, r.RecordedConf, err = t.recorded(); err != nil {
		return nil, err
	}
	r.Front = t.front(t.trials())
	r.SplitRange = t.splitRange(&r.Best)
	return r, nil
}

// splitRange returns the plateau of max_split_size_mb around best's (see
// Report.SplitRange).
func (t *tuner) splitRange(best *Trial) [2]int64 {
	s := best.Setting
	if s.MaxSplitMB == 0 {
		return [2]int64{}
	}
	var same []*Trial // the settings as s's but for a finite max_split_size_mb
	for x, tr := range t.seen {
		if x.ExpandableSegments == s.ExpandableSegments && x.Divisions == s.Divisions && x.GCThreshold == s.GCThreshold && x.MaxSplitMB > 0 {
			same = append(same, tr)
		}
	}
	slices.SortFunc(same, func(a, b *Trial) int { return cmp.Compare(a.Setting.MaxSplitMB, b.Setting.MaxSplitMB) })
	flat := func(tr *Trial) bool {
		a, b := t.score(tr.Result), t.score(best.Result)
		return a.ooms <= b.ooms && a.peak == b.peak && a.whole == b.whole
	}
	i := slices.IndexFunc(same, func(tr *Trial) bool { return tr.Setting.MaxSplitMB == s.MaxSplitMB })
	lo, hi := i, i
	for lo > 0 && flat(same[lo-1]) {
		lo--
	}
	for hi+1 < len(same) && flat(same[hi+1]) {
		hi++
	}
	if lo == hi {
		return [2]int64{}
	}
	return [2]int64{same[lo].Setting.MaxSplitMB, same[hi].Setting.MaxSplitMB}
}

type tuner struct {
	ctx    context.Context
	name   string
	events []traces.Event
	opts   Options
	seen   map[Setting]*Trial
}

// try replays the settings not tried yet, in parallel.
func (t *tuner) try(settings []Setting) error {
	var todo []Setting
	for _, s := range settings {
		if _, ok := t.seen[s]; !ok && !slices.Contains(todo, s) {
			todo = append(todo, s)
		}
	}
	specs := make([]gpualloc.Spec, len(todo))
	for i, s := range todo {
		specs[i] = Spec(s, t.opts.MemoryFraction)
		specs[i].Params = append(specs[i].Params, t.allocator()...)
	}
	results, err := t.replay(specs)
	if err != nil {
		return err
	}
	for i, r := range results {
		t.seen[todo[i]] = &Trial{Setting: todo[i], Result: r}
	}
	return nil
}

// replay replays the trace with each spec, in parallel.
func (t *tuner) replay(specs []gpualloc.Spec) ([]sim.Result, error) {
	jobs := make([]sim.Job, len(specs))
	for i, sp := range specs {
		p, err := gpualloc.Resolve(sp, nil)
		if err != nil {
			return nil, err
		}
		jobs[i] = sim.Job{
			Open: func() (traces.Reader, io.Closer, error) {
				return startReader{t.open(), t.opts.Memory}, nil, nil
			},
			Config: sim.Config{Trace: t.name, Params: p, Capacity: t.opts.Capacity, SeriesBuckets: -1, Start: t.opts.Start},
		}
	}
	out := make([]sim.Result, len(jobs))
	for i, o := range sim.RunAll(t.ctx, jobs, t.opts.Workers) {
		if o.Err != nil {
			return nil, o.Err
		}
		out[i] = o.Result
	}
	return out, nil
}

// recorded replays the trace with the settings it records, when they are
// not PyTorch's defaults.
func (t *tuner) recorded() (*Trial, string, error) {
	conf := t.recordedConf()
	if conf == "" {
		return nil, "", nil
	}
	sp := Spec(Setting{}, t.opts.MemoryFraction)
	sp.Params[0].Value = conf
	res, err := t.replay([]gpualloc.Spec{sp})
	if err != nil {
		return nil, "", err
	}
	return &Trial{Result: res[0]}, conf, nil
}

// recordedConf returns the settings that Options.Start records, "" for
// none.
func (t *tuner) recordedConf() string {
	if t.opts.Start == nil {
		return ""
	}
	return t.opts.Start.Conf
}

// A startReader reads the events, on the devices that the file they were
// decoded from records (the start state is Options.Start, given to each
// replay).
type startReader struct {
	traces.BatchReader
	memory sim.CapacityReporter
}

// open returns a reader of the trace: Options.Events', else one of the
// events in memory.
func (t *tuner) open() traces.BatchReader {
	if t.opts.Events != nil {
		return t.opts.Events()
	}
	return traces.NewSliceReader(t.name, t.events)
}

// DeviceCapacity is that of Options.Memory (see sim.CapacityReporter).
func (r startReader) DeviceCapacity(device int) int64 {
	if r.memory == nil {
		return 0
	}
	return r.memory.DeviceCapacity(device)
}

// trials returns every trial, in the order of rank.
func (t *tuner) trials() []*Trial {
	all := make([]*Trial, 0, len(t.seen))
	for _, tr := range t.seen {
		all = append(all, tr)
	}
	slices.SortFunc(all, t.compare)
	return all
}

func (t *tuner) best() *Trial { return t.trials()[0] }

// compare ranks trials as the package documentation says.
func (t *tuner) compare(a, b *Trial) int {
	x, y := t.score(a.Result), t.score(b.Result)
	return cmp.Or(
		cmp.Compare(min(x.ooms, 1), min(y.ooms, 1)),
		cmp.Compare(x.ooms, y.ooms),
		cmp.Compare(x.peak, y.peak),
		cmp.Compare(x.whole, y.whole),
		cmp.Compare(x.mallocs, y.mallocs),
		cmp.Compare(a.Setting.changed(), b.Setting.changed()),
		strings.Compare(a.Setting.Conf(), b.Setting.Conf()),
	)
}

// A score is what the ranking reads of a replay.
type score struct {
	ooms    int64
	peak    int64 // the peak of reserved bytes that a device must hold
	whole   int64 // the peak of the sum over the devices ranked
	mallocs int64
}

// score returns r's figures for the ranking: the whole trace's, its peak
// the largest device's, or those of Options.Device alone (zero when that
// device has no event).
func (t *tuner) score(r sim.Result) score {
	d := t.opts.Device
	if d == nil || len(r.Devices) == 0 {
		return score{r.OOMs, PeakReserved(r), r.PeakReservedBytes, r.DeviceMallocs}
	}
	for _, dr := range r.Devices {
		if dr.Device == *d {
			return score{dr.OOMs, dr.PeakReservedBytes, dr.PeakReservedBytes, dr.DeviceMallocs}
		}
	}
	return score{}
}

// PeakReserved returns the largest of the peaks of reserved bytes of r's
// devices: what each device of the capacity a trial ran on must hold, which
// the sum over the devices of a trace of several (r.PeakReservedBytes) is
// not. For a trace of one device it is r.PeakReservedBytes.
func PeakReserved(r sim.Result) int64 {
	return largest(r, r.PeakReservedBytes, func(d sim.DeviceResult) int64 { return d.PeakReservedBytes })
}

// PeakRequested returns the largest of the peaks of live requested bytes
// of r's devices: the lower bound of each device, as PeakReserved is its
// peak.
func PeakRequested(r sim.Result) int64 {
	return largest(r, r.PeakRequestedBytes, func(d sim.DeviceResult) int64 { return d.PeakRequestedBytes })
}

// largest returns the largest of figure over r's devices, or whole, r's own
// figure, for a trace of one device.
func largest(r sim.Result, whole int64, figure func(sim.DeviceResult) int64) int64 {
	if len(r.Devices) < 2 {
		return whole
	}
	var peak int64
	for _, d := range r.Devices {
		peak = max(peak, figure(d))
	}
	return peak
}

// neighbours returns the settings one step from s on each ladder.
func (t *tuner) neighbours(s Setting) []Setting {
	var out []Setting
	x := s
	x.ExpandableSegments = !s.ExpandableSegments
	out = append(out, x)
	for _, v := range adjacent(splitLadder, s.MaxSplitMB) {
		x := s
		x.MaxSplitMB = v
		out = append(out, x)
	}
	for _, v := range adjacent(divisionsLadder, s.Divisions) {
		x := s
		x.Divisions = v
		out = append(out, x)
	}
	if t.opts.MemoryFraction > 0 {
		for _, v := range adjacent(gcLadder, s.GCThreshold) {
			x := s
			x.GCThreshold = v
			out = append(out, x)
		}
	}
	return out
}

// adjacent returns the rungs next to v on a ladder; for a value between
// rungs, the rungs around it.
func adjacent[T cmp.Ordered](ladder []T, v T) []T {
	i, found := slices.BinarySearch(ladder, v)
	if ladder[len(ladder)-1] == v { // the default at the top of the split ladder
		i, found = len(ladder)-1, true
	}
	var out []T
	if i > 0 {
		out = append(out, ladder[i-1])
	}
	next := i
	if found {
		next = i + 1
	}
	if next < len(ladder) {
		out = append(out, ladder[next])
	}
	return out
}

// bisectSplit refines max_split_size_mb, to the MiB, between the best
// value and the ladder's rungs on either side of it.
func (t *tuner) bisectSplit() error {
	for range maxRounds {
		best := t.best().Setting
		var try []Setting
		for _, side := range t.bracket(best) {
			if mid := (best.MaxSplitMB + side) / 2; mid != best.MaxSplitMB && mid != side {
				x := best
				x.MaxSplitMB = mid
				try = append(try, x)
			}
		}
		if len(try) == 0 {
			return nil
		}
		if err := t.try(try); err != nil {
			return err
		}
	}
	return nil
}

// bracket returns the nearest values of max_split_size_mb tried on either
// side of s's, the others settings as s's (unlimited aside: it has no
// finite value to bisect towards).
func (t *tuner) bracket(s Setting) []int64 {
	if s.MaxSplitMB == 0 {
		return nil
	}
	lo, hi := int64(0), int64(0)
	for x := range t.seen {
		if x.ExpandableSegments != s.ExpandableSegments || x.Divisions != s.Divisions || x.GCThreshold != s.GCThreshold || x.MaxSplitMB == 0 {
			continue
		}
		if x.MaxSplitMB < s.MaxSplitMB && x.MaxSplitMB > lo {
			lo = x.MaxSplitMB
		}
		if x.MaxSplitMB > s.MaxSplitMB && (hi == 0 || x.MaxSplitMB < hi) {
			hi = x.MaxSplitMB
		}
	}
	var out []int64
	if lo > 0 {
		out = append(out, lo)
	}
	if hi > 0 {
		out = append(out, hi)
	}
	return out
}

// front returns the Pareto front of the trials without OOM, ranked, in
// increasing order of peak reserved bytes.
func (t *tuner) front(ranked []*Trial) []Trial {
	var out []Trial
	var last int64
	for _, tr := range ranked {
		sc := t.score(tr.Result)
		if sc.ooms > 0 {
			continue
		}
		// In rank order, peaks (the largest device's, or Options.Device's)
		// never decrease: a trial is on the front when it makes fewer
		// device allocations than every one before.
		if len(out) == 0 || sc.mallocs < last {
			out = append(out, *tr)
			last = sc.mallocs
		}
	}
	return out
}
