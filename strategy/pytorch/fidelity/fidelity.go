// Package fidelity validates the pytorch strategy against PyTorch itself: it
// replays PyTorch memory snapshots through a model of PyTorch's CUDA caching
// allocator (the strategy, or a test's) and measures how often the model
// takes the decisions that the recorded allocator took: the address of each
// allocation, the segments taken from and given back to the device, and the
// allocations that failed.
//
// For each device of a snapshot, [Run] configures the allocator from the
// snapshot's allocator settings for that device (see
// [snapshot.Snapshot.DeviceConf]: expandable_segments is added when the
// device's segments show expandable segments, and torch_npu's rules,
// device:npu, when torch_npu wrote the snapshot) on a device of the memory that the settings record, or that
// the oom entries or the ranges of expandable segments tell, rebuilds the segments and blocks as they were when the
// device's trace began (see [snapshot.Snapshot.InitialStateWith]), hands
// them to the allocator, and replays the trace's entries in order:
//
//   - alloc: the allocator serves the request on the entry's stream; its
//     address is compared with the recorded one. Its backend hands out the
//     address of the segment_alloc recorded just before the alloc, if any,
//     and compares the size asked for with the recorded segment's size;
//     with expandable segments, it compares the pages mapped with those of
//     the segment_map entries recorded before the alloc. A segment or page
//     the allocator asks for that is not recorded, and a recorded one that
//     it does not ask for, are mismatches.
//   - free_completed: the block returned for the recorded address is freed.
//   - segment_free and segment_unmap: compared with what the allocator gave
//     back to its backend; when it has given back none of it, its
//     ReleaseAll (PyTorch's empty_cache) is called first, if it has one.
//     Those recorded just before an oom are the failed allocation's own
//     release and are compared after it; so are the segment_free entries
//     before the segment_alloc of an alloc where an allocation may free
//     some cached segments and not others (see releaseInAlloc); those
//     whose frames name empty_cache are never an allocation's. Those recorded right
//     after the segment_map entries of an alloc or oom, and before it,
//     are the release after a failed map (see mapFailed): its backend
//     refuses the allocation's next page once those segment_map entries
//     are mapped, and compares the allocator's own release and the
//     pages it maps afterwards with the record.
//   - oom: the allocator serves the request (the entry's size, which
//     PyTorch records rounded), following the record with a device that
//     refuses every allocation;
//     it matches when the allocator fails too (after a failed map, the
//     device serves the pages recorded before the map failed, then
//     refuses). A block that it serves from its cache instead is freed
//     again.
//
// The trace is replayed twice. Following the record, the allocator is
// compared at each allocation and then made to hold the recorded state
// (rebuilt, as at the start, from the state that the recorded decisions
// imply: see [snapshot.Tracker]) before the next entry, so that each
// divergence counts once: the decision rate; its device refuses memory
// where PyTorch's did, as said above. Free-running, the allocator goes on
// from its own decisions: one early divergence may move every later
// address, and the match rate counts them all. It runs as simulate's
// replay of the snapshot does (package sim, with the events of package
// traces' reader), so that the two give the same figures: on a device of
// the memory that the settings record or the oom entries tell (else
// virtual.DefaultCapacity), which refuses an allocation only past that
// memory; the releases that the reader yields (entries whose frames name
// empty_cache, and runs of segment_free and segment_unmap entries that no
// segment_alloc, segment_map or oom follows) are made at once, and the
// others are left to the allocation that follows them, which makes them
// or not as its device makes it, and are compared after it. In both, the
// segments of private pools (a CUDA graph's, a torch.cuda.MemPool's) are
// held apart from the allocator, with the allocations that lie in them,
// as a replay holds them: they are no decision of the default pools.
package fidelity

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/internal/torchsize"
	"github.com/gpualloc/gpualloc/snapshot"
)

// An Allocator is the model replayed: the pytorch strategy, or a test's.
type Allocator interface {
	AllocStream(size int64, stream uint64) (gpualloc.Block, error)
	Free(b gpualloc.Block) error
	// Restore makes the allocator hold segment s as if it had allocated it
	// from its backend, without calling the backend, and returns the live
	// blocks of s in address order.
	Restore(s snapshot.Segment) ([]gpualloc.Block, error)
}

// A NewFunc makes an allocator on backend b, configured by conf in
// PYTORCH_CUDA_ALLOC_CONF syntax.
type NewFunc func(b gpualloc.Backend, conf string) (Allocator, error)

// DefaultMaxMismatches is how many mismatches a [Result] lists by default.
const DefaultMaxMismatches = 5

// Options configure [Run].
type Options struct {
	// New makes the allocator; required.
	New NewFunc
	// MaxMismatches is how many mismatches to keep: 0 means
	// DefaultMaxMismatches, a negative number none.
	MaxMismatches int
	// Conf, when not nil, configures the allocator in place of the
	// snapshot's recorded settings (PYTORCH_CUDA_ALLOC_CONF given
	// explicitly); the state before the trace is still rebuilt with the
	// recorded ones, which made it.
	Conf *string
}

// A Mismatch is a decision of the model that differs from the recorded one.
type Mismatch struct {
	Device int    `json:"device"`
	Index  int    `json:"index"`  // of the entry in the device's trace
	Action string `json:"action"` // the entry's action
	Size   int64  `json:"size"`   // the entry's size
	Want   string `json:"want"`   // what was recorded
	Got    string `json:"got"`    // what the model did
}

func (m Mismatch) String() string {
	return fmt.Sprintf("device %d entry %d: %s of %d bytes: recorded %s, replayed %s", m.Device, m.Index, m.Action, m.Size, m.Want, m.Got)
}

// NoHistory is the Note of a Result whose device has no allocation in its
// trace: a state-only or legacy snapshot, with nothing to compare.
const NoHistory = "no allocation history: nothing to compare"

// A Result is the fidelity of the model on one device of a snapshot. Its
// counts, but for DecisionMatches, are those of the free-running replay;
// its mismatches, the first ones of that replay.
type Result struct {
	File   string `json:"file"`
	Device int    `json:"device"`
	Conf   string `json:"conf"` // the allocator's configuration
	// Allocator names the allocator that the model follows, when the
	// caller says (see [Models]): PyTorch's CUDA allocator of a release,
	// or torch_npu's.
	Allocator string `json:"allocator,omitempty"`
	Allocs    int64  `json:"allocs"`
	// AddressMatches counts the allocs at the recorded address.
	AddressMatches int64 `json:"address_matches"`
	// DecisionMatches counts the allocs at the recorded address, with the
	// recorded segment allocations or mappings, when the allocator starts
	// from the recorded state.
	DecisionMatches int64 `json:"decision_matches"`
	// SegmentAllocs counts the recorded segment_alloc and segment_map
	// entries, of which SegmentMatches the allocator asked for too.
	SegmentAllocs  int64 `json:"segment_allocs"`
	SegmentMatches int64 `json:"segment_matches"`
	// MatchRate is (AddressMatches + SegmentMatches + SegmentFreeMatches)
	// / (Allocs + SegmentAllocs + SegmentFrees), so that it is 1 only when
	// every address and every segment taken and given back matches;
	// DecisionRate is DecisionMatches / Allocs. Both are nil (null in JSON)
	// when there are no allocs.
	MatchRate    *float64 `json:"match_rate"`
	DecisionRate *float64 `json:"decision_rate"`
	// OOMs counts the recorded oom entries, of which OOMMatches failed in
	// the allocator too (following the record).
	OOMs       int64 `json:"ooms"`
	OOMMatches int64 `json:"oom_matches"`
	// ExtraMallocs counts the allocator's Mallocs with no recorded
	// segment_alloc, and its mapped pages with no recorded segment_map.
	ExtraMallocs int64 `json:"extra_mallocs"`
	// SegmentFrees counts the recorded segment_free and segment_unmap
	// entries, of which SegmentFreeMatches were given back by the
	// allocator too.
	SegmentFrees       int64 `json:"segment_frees"`
	SegmentFreeMatches int64 `json:"segment_free_matches"`
	// DeviceFrees counts the allocator's device frees: its Free calls,
	// and its Release calls of the pages of expandable segments.
	DeviceFrees int64 `json:"device_frees"`
	AllocErrors int64 `json:"alloc_errors"` // allocations the model failed
	// Figures of the device's memory, as recorded (the segments of the
	// state the trace starts from, then its segment entries: see
	// [snapshot.Snapshot.Figures]) and as the free-running replay held it
	// from its device, measured as package sim measures a replay of the
	// snapshot, so that simulate's replay gives the same figures: the
	// peak of reserved bytes (segments and mapped pages, the start
	// included); the device allocations made during the trace (segment_alloc
	// entries and the pages of segment_map entries, each one cuMemCreate,
	// against the allocator's Malloc and Create calls: the pages of a map
	// that the device refused part way are made and given back
	// unrecorded); and the largest difference of reserved bytes between
	// the two after any alloc, free_completed or oom entry (within an
	// allocation, the record and the model take and give back segments in
	// different orders).
	RecordedPeakReservedBytes int64 `json:"recorded_peak_reserved_bytes"`
	ReplayedPeakReservedBytes int64 `json:"replayed_peak_reserved_bytes"`
	RecordedDeviceMallocs     int64 `json:"recorded_device_mallocs"`
	ReplayedDeviceMallocs     int64 `json:"replayed_device_mallocs"`
	MaxReservedDiffBytes      int64 `json:"max_reserved_diff_bytes"`
	InitialLive               int64 `json:"initial_live"` // blocks live when the trace began
	InitialSegs               int64 `json:"initial_segments"`
	// Note says why the figures claim nothing (NoHistory), or is "".
	Note string `json:"note,omitempty"`
	// Error, set by a caller that compares several files, says why the
	// file could not be compared (it is no record of PyTorch's
	// allocator); its figures are then all zero.
	Error        string     `json:"error,omitempty"`
	Mismatches   []Mismatch `json:"mismatches"`
	mismatchesMx int
}

func (r *Result) mismatch(m Mismatch) {
	if len(r.Mismatches) < r.mismatchesMx {
		r.Mismatches = append(r.Mismatches, m)
	}
}

func rate(n, d int64) *float64 {
	if d == 0 {
		return nil
	}
	f := float64(n) / float64(d)
	return &f
}

// Run replays snapshot s, named name, through the allocators that opts.New
// makes, and returns one Result per device, in device order (one for device
// 0 when the snapshot names none). An error means that the snapshot is
// inconsistent (its trace does not fit its segments) or that the allocator
// failed in a way that ends the replay; it does not name the file.
func Run(s *snapshot.Snapshot, name string, opts Options) ([]*Result, error) {
	if opts.New == nil {
		return nil, errors.New("fidelity: no allocator")
	}
	mx := opts.MaxMismatches
	if mx == 0 {
		mx = DefaultMaxMismatches
	}
	devs := s.Devices()
	if len(devs) == 0 {
		devs = []int{0}
	}
	var out []*Result
	for _, d := range devs {
		conf := s.DeviceConf(d)
		rules, err := s.DeviceRules(d)
		if err != nil {
			return nil, err
		}
		if opts.Conf != nil {
			conf = *opts.Conf
			// Which allocator wrote the file is no setting: a conf given
			// keeps torch_npu's rules unless it names a device.
			if rules.Pad != 0 && !strings.Contains(conf, "device:") {
				conf = strings.TrimPrefix(conf+",device:npu", ",")
			}
		}
		res := &Result{File: name, Device: d, Conf: conf, Mismatches: []Mismatch{}, mismatchesMx: mx}
		if err := runDevice(s, d, conf, rules, opts.New, res); err != nil {
			return nil, err
		}
		res.MatchRate = rate(res.AddressMatches+res.SegmentMatches+res.SegmentFreeMatches, res.Allocs+res.SegmentAllocs+res.SegmentFrees)
		if res.Note == "" {
			res.DecisionRate = rate(res.DecisionMatches, res.Allocs)
		}
		if res.Allocs == 0 {
			res.MatchRate = nil
			res.Note = NoHistory
		}
		out = append(out, res)
	}
	return out, nil
}

func runDevice(s *snapshot.Snapshot, dev int, conf string, rules snapshot.Rules, newAlloc NewFunc, res *Result) error {
	st, err := s.InitialStateWith(dev, rules)
	if terr := s.Trace(dev).Err(); terr != nil {
		return terr // entries not read back, which the rebuild took for zero
	}
	if err != nil {
		// A record whose blocks PyTorch could not have made is replayed
		// from its own decisions alone (see finer).
		why := finer(s, dev)
		if why == "" || st == nil {
			return err
		}
		res.Note = why + ": replayed from its own decisions, not followed decision by decision (" + err.Error() + ")"
	}
	// The segment_alloc entries that the window cut off come first; entry
	// indexes stay those of the file. The trace itself is not copied
	// when there are none: the replays only read it.
	t := s.Trace(dev)
	if len(st.Fresh) > 0 {
		t = snapshot.TraceOf(append(append([]snapshot.TraceEntry(nil), st.Fresh...), t.Entries()...))
	}
	offset := len(st.Fresh)
	var top uint64
	for _, sg := range append(st.Segments, s.Segments...) {
		top = max(top, sg.Address+uint64(sg.TotalSize))
	}
	for i := range t.Len() {
		switch t.Action(i) {
		case snapshot.SegmentAlloc, snapshot.SegmentFree, snapshot.SegmentMap, snapshot.SegmentUnmap:
			e := t.At(i)
			top = max(top, e.Addr+uint64(e.Size))
		}
	}
	top = (top + 1<<30) &^ (1<<30 - 1)
	for _, sg := range st.Segments {
		res.RecordedPeakReservedBytes += sg.TotalSize
		res.InitialSegs++
		for _, b := range sg.Blocks {
			if b.Live() {
				res.InitialLive++
			}
		}
	}
	// The device's memory: what the snapshot records, or its oom entries
	// tell, else, free-running, the memory of a replay's device, and
	// following the record what the ranges of expandable segments tell.
	known := s.AllocatorSettings.DeviceMemory(dev)
	if known == 0 {
		known = snapshot.DeviceMemory(st, s.Trace(dev), rules)
	}
	capacity, total := known, known
	if known == 0 {
		capacity, total = virtual.DefaultCapacity, rangeTotal(st, t)
	}
	release := releaseInAlloc(s.AllocatorSettings, rules)
	ps := poolsOf(s, dev, st, t)
	free := &replay{res: res, dev: dev, trace: t, offset: offset, conf: conf, newAlloc: newAlloc, total: capacity, releaseInAlloc: release, pools: ps}
	follow := &replay{forced: true, res: &Result{mismatchesMx: -1}, dev: dev, trace: t, offset: offset, conf: conf, newAlloc: newAlloc, total: total,
		releaseInAlloc: release, pools: ps}
	if res.Note != "" {
		if err := free.start(st, top); err != nil {
			return err
		}
		if err := free.freeAll(nil); err != nil {
			return err
		}
		free.be.endAlloc()
	} else if err := runBoth(free, follow, st, top, func() *snapshot.Tracker { return snapshot.NewTracker(st, rules) }); err != nil {
		return err
	}
	res.ReplayedPeakReservedBytes, res.ReplayedDeviceMallocs = free.be.peak, free.be.mallocs
	for i := range t.Len() {
		switch t.Action(i) {
		case snapshot.SegmentAlloc:
			res.RecordedDeviceMallocs++
		case snapshot.SegmentMap:
			e := t.At(i)
			res.RecordedDeviceMallocs += int64(len(pages(&e)))
		}
	}
	if err := s.Trace(dev).Err(); err != nil {
		return err // entries not read back: the replays' figures are not the file's
	}
	if res.Note == "" {
		res.DecisionMatches = follow.decisions
		res.OOMs, res.OOMMatches = follow.res.OOMs, follow.res.OOMMatches
	}
	return nil
}

// finer returns what shows that the allocator that recorded device dev's
// trace makes blocks finer than PyTorch's: a block of the snapshot's
// segments, or an alloc entry, at an offset or of a size that is not a
// multiple of 512 bytes. PyTorch rounds every request to a multiple of
// kMinBlockSize, 512 (round_size in c10/cuda/CUDACachingAllocator.cpp),
// and splits blocks only at such multiples, so that its blocks lie at
// multiples of 512 from their segment's start. "" when nothing shows it.
func finer(s *snapshot.Snapshot, dev int) string {
	const unit = torchsize.MinBlockSize
	for _, sg := range s.Segments {
		if sg.Device != dev {
			continue
		}
		for _, b := range sg.Blocks {
			if (b.Address-sg.Address)%unit != 0 || b.Size%unit != 0 {
				return fmt.Sprintf("a block of %d bytes at %s, where PyTorch's blocks are multiples of %d bytes (kMinBlockSize): a modified allocator", b.Size, hex(b.Address), unit)
			}
		}
	}
	t := s.Trace(dev)
	for i := range t.Len() {
		if t.Action(i) != snapshot.Alloc {
			continue
		}
		if e := t.At(i); e.Addr%unit != 0 {
			return fmt.Sprintf("device_traces[%d][%d]: an alloc at %s, where PyTorch's blocks lie at multiples of %d bytes (kMinBlockSize): a modified allocator", dev, i, hex(e.Addr), unit)
		}
	}
	return ""
}

func hex(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }
