// Package fidelity validates the pytorch strategy against PyTorch itself: it
// replays PyTorch memory snapshots through a model of PyTorch's CUDA caching
// allocator (the strategy, or a test's) and measures how often the model
// takes the decisions that the recorded allocator took: the address of each
// allocation, the segments taken from and given back to the device, and the
// allocations that failed.
//
// For each device of a snapshot, [Run] configures the allocator from the
// snapshot's allocator settings (see [snapshot.AllocatorSettings.AllocConf];
// expandable_segments is added when the snapshot shows expandable
// segments) on a device of the memory that the settings record, or that
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
//     just before an alloc where an allocation may free some cached
//     segments and not others (see releaseInAlloc). Those recorded right
//     after the segment_map entries of an alloc or oom, and before it,
//     are the release after a failed map (see mapFailed): its backend
//     refuses the allocation's next page once those segment_map entries
//     are mapped, and compares the allocator's own release and the
//     pages it maps afterwards with the record.
//   - oom: the allocator serves the request (the entry's size, which
//     PyTorch records rounded) with a device that refuses every allocation;
//     it matches when the allocator fails too (after a failed map, the
//     device serves the pages recorded before the map failed, then
//     refuses). A block that it serves from its cache instead is freed
//     again.
//
// The trace is replayed twice. Free-running, the allocator goes on from its
// own decisions: one early divergence may move every later address, and
// the match rate counts them all. Following the record, the allocator is
// compared at each allocation and then made to hold the recorded state
// (rebuilt, as at the start, from the state that the recorded decisions
// imply: see [snapshot.Tracker]) before the next entry, so that each
// divergence counts once: the decision rate.
package fidelity

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
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
	Allocs int64  `json:"allocs"`
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
	// DeviceFrees counts the allocator's Free and Unmap calls to its
	// backend.
	DeviceFrees int64 `json:"device_frees"`
	AllocErrors int64 `json:"alloc_errors"` // allocations the model failed
	InitialLive int64 `json:"initial_live"` // blocks live when the trace began
	InitialSegs int64 `json:"initial_segments"`
	// Note says why the figures claim nothing (NoHistory), or is "".
	Note         string     `json:"note,omitempty"`
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
	conf := s.AllocatorSettings.AllocConf()
	rules, err := s.AllocatorSettings.Rules()
	if err != nil {
		return nil, err
	}
	if expandable(s) && !rules.Expandable {
		rules.Expandable = true
		conf = strings.TrimPrefix(conf+",expandable_segments:True", ",")
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
		res := &Result{File: name, Device: d, Conf: conf, Mismatches: []Mismatch{}, mismatchesMx: mx}
		if err := runDevice(s, d, conf, rules, opts.New, res); err != nil {
			return nil, err
		}
		res.MatchRate = rate(res.AddressMatches+res.SegmentMatches+res.SegmentFreeMatches, res.Allocs+res.SegmentAllocs+res.SegmentFrees)
		res.DecisionRate = rate(res.DecisionMatches, res.Allocs)
		if res.Allocs == 0 {
			res.MatchRate = nil
			res.Note = NoHistory
		}
		out = append(out, res)
	}
	return out, nil
}

// expandable reports whether the snapshot shows expandable segments.
func expandable(s *snapshot.Snapshot) bool {
	for _, sg := range s.Segments {
		if sg.IsExpandable {
			return true
		}
	}
	for _, t := range s.DeviceTraces {
		for _, e := range t {
			if e.Action == snapshot.SegmentMap || e.Action == snapshot.SegmentUnmap {
				return true
			}
		}
	}
	return false
}

func runDevice(s *snapshot.Snapshot, dev int, conf string, rules snapshot.Rules, newAlloc NewFunc, res *Result) error {
	st, err := s.InitialStateWith(dev, rules)
	if err != nil {
		return err
	}
	// The segment_alloc entries that the window cut off come first; entry
	// indexes stay those of the file.
	t := append(append([]snapshot.TraceEntry(nil), st.Fresh...), s.Trace(dev)...)
	offset := len(st.Fresh)
	var top uint64
	for _, sg := range append(st.Segments, s.Segments...) {
		top = max(top, sg.Address+uint64(sg.TotalSize))
	}
	for i := range t {
		switch t[i].Action {
		case snapshot.SegmentAlloc, snapshot.SegmentFree, snapshot.SegmentMap, snapshot.SegmentUnmap:
			top = max(top, t[i].Addr+uint64(t[i].Size))
		}
	}
	top = (top + 1<<30) &^ (1<<30 - 1)
	for _, sg := range st.Segments {
		res.InitialSegs++
		for _, b := range sg.Blocks {
			if b.Live() {
				res.InitialLive++
			}
		}
	}
	total := s.AllocatorSettings.DeviceMemory(dev)
	if total == 0 {
		total = deviceTotal(st, t, rules)
	}
	release := releaseInAlloc(s.AllocatorSettings, rules)
	free := &replay{res: res, dev: dev, trace: t, offset: offset, conf: conf, newAlloc: newAlloc, total: total, releaseInAlloc: release}
	if err := free.run(st, top, nil); err != nil {
		return err
	}
	follow := &replay{res: &Result{mismatchesMx: -1}, dev: dev, trace: t, offset: offset, conf: conf, newAlloc: newAlloc, total: total,
		releaseInAlloc: release}
	if err := follow.run(st, top, snapshot.NewTracker(st, rules)); err != nil {
		return fmt.Errorf("following the record: %w", err)
	}
	res.DecisionMatches = follow.decisions
	res.OOMs, res.OOMMatches = follow.res.OOMs, follow.res.OOMMatches
	return nil
}

// deviceTotal returns the device's memory as the trace's oom entries tell
// it (see [snapshot.DeviceMemory]), else as the ranges of expandable
// segments do, else 2^62. The allocator sizes the ranges of expandable
// segments from it, as PyTorch does from the device's memory.
func deviceTotal(st *snapshot.State, t []snapshot.TraceEntry, rules snapshot.Rules) int64 {
	if total := snapshot.DeviceMemory(st, t, rules); total > 0 {
		return total
	}
	return rangeTotal(st, t)
}

// rangeTotal returns the device's memory as the ranges of expandable
// segments tell it, 2^62 when they do not. PyTorch reserves a range of 1
// 1/8 times the device's memory, in whole pages, for each stream and pool
// (and another when it is full), and CUDA reserves ranges one after the
// other: a range ends at the latest where the next one starts (see
// ranges). The bound of a range of the large pool is taken first.
func rangeTotal(st *snapshot.State, t []snapshot.TraceEntry) int64 {
	rs := ranges(st, t)
	var best int64
	bestSmall := true
	for _, r := range rs {
		var next uint64
		for _, o := range rs {
			if o.base > r.base && (next == 0 || o.base < next) {
				next = o.base
			}
		}
		if next == 0 {
			continue
		}
		size := int64(next-r.base) / r.page() * r.page()
		if best == 0 || (bestSmall && !r.small) || (bestSmall == r.small && size < best) {
			best, bestSmall = size, r.small
		}
	}
	if best == 0 {
		return 1 << 62
	}
	return best / 9 * 8
}

// A xrange is a range of an expandable segment, as the snapshot shows it:
// the lowest address it names, and whether the state at the trace's start
// has mapped memory in it.
type xrange struct {
	stream  uint64
	small   bool
	base    uint64
	initial bool
}

func (r xrange) page() int64 {
	if r.small {
		return smallBuffer
	}
	return largeBuffer
}

// ranges returns the ranges of expandable segments that the state at the
// trace's start and the trace's segment_map and segment_unmap entries show,
// by stream, pool and address. Two addresses of a stream's pool that are
// not a whole number of pages apart lie in two ranges.
func ranges(st *snapshot.State, t []snapshot.TraceEntry) []xrange {
	var seen []xrange
	for _, sg := range st.Segments {
		if sg.IsExpandable {
			seen = append(seen, xrange{sg.Stream, sg.SegmentType == "small", sg.Address, true})
		}
	}
	for i := range t {
		if e := &t[i]; e.Action == snapshot.SegmentMap || e.Action == snapshot.SegmentUnmap {
			seen = append(seen, xrange{e.Stream, e.Size%largeBuffer != 0, e.Addr, false})
		}
	}
	sort.Slice(seen, func(i, j int) bool {
		a, b := seen[i], seen[j]
		if a.stream != b.stream {
			return a.stream < b.stream
		}
		if a.small != b.small {
			return a.small
		}
		return a.base < b.base
	})
	var out []xrange
	for _, r := range seen {
		if n := len(out); n > 0 {
			if p := &out[n-1]; p.stream == r.stream && p.small == r.small && (r.base-p.base)%uint64(r.page()) == 0 {
				p.initial = p.initial || r.initial
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// A RangeRestorer is an allocator with expandable segments that can hold a
// range before its mapped parts are restored, so that its start is where
// the snapshot shows it (see the pytorch strategy's RestoreRange).
type RangeRestorer interface {
	RestoreRange(stream uint64, small bool, base uint64) error
}

// releaseInAlloc reports whether an allocation may free some cached
// segments and not others before it allocates one, so that the
// segment_free entries recorded just before an alloc are its own, not an
// empty_cache's: PyTorch's release_available_cached_blocks, with a
// max_split_size and without expandable segments, and its
// garbage_collect_cached_blocks, with a garbage_collection_threshold and a
// memory fraction.
func releaseInAlloc(s *snapshot.AllocatorSettings, r snapshot.Rules) bool {
	if s != nil && s.GarbageCollectionThreshold > 0 && s.MemoryFraction() > 0 {
		return true
	}
	return r.MaxSplitSize != snapshot.NoMaxSplitSize && !r.Expandable
}

// replay is one replay of a device's trace.
type replay struct {
	res      *Result
	dev      int
	trace    []snapshot.TraceEntry
	offset   int // entries of trace before the file's first (State.Fresh)
	conf     string
	newAlloc NewFunc
	total    int64 // the device's memory
	// releaseInAlloc: see the function of that name.
	releaseInAlloc bool

	a    Allocator
	be   *backend
	live map[uint64]gpualloc.Block // recorded address -> the model's block
	// failed are the recorded addresses whose allocation the model failed.
	failed map[uint64]bool
	// released: ReleaseAll was called since the last alloc or free. A
	// free may make a segment whole, which the next release gives back.
	released  bool
	decisions int64 // allocs that matched wholly
}

// start makes a new allocator that holds the segments of st.
func (r *replay) start(st *snapshot.State, top uint64) error {
	r.be = newBackend(r.res, r.dev, top, r.total)
	a, err := r.newAlloc(r.be, r.conf)
	if err != nil {
		return err
	}
	r.a, r.live, r.failed, r.released = a, map[uint64]gpualloc.Block{}, map[uint64]bool{}, false
	if rr, ok := a.(RangeRestorer); ok {
		for _, x := range ranges(st, r.trace) {
			if x.initial {
				r.be.held[x.base] = rangeSize(r.total, x.page())
				if err := rr.RestoreRange(x.stream, x.small, x.base); err != nil {
					return err
				}
			}
		}
	}
	for _, sg := range st.Segments {
		blocks, err := a.Restore(sg)
		if err != nil {
			return fmt.Errorf("restoring the segment at %s: %w", hex(sg.Address), err)
		}
		n := 0
		for _, b := range sg.Blocks {
			if b.Live() {
				if n >= len(blocks) {
					return fmt.Errorf("restoring the segment at %s: %d live blocks returned, more expected", hex(sg.Address), len(blocks))
				}
				r.live[b.Address] = blocks[n]
				n++
			}
		}
	}
	return nil
}

// run replays the trace from st, following the record of tr if it is not
// nil.
func (r *replay) run(st *snapshot.State, top uint64, tr *snapshot.Tracker) error {
	if err := r.start(st, top); err != nil {
		return err
	}
	for i := range r.trace {
		e := &r.trace[i]
		be := r.be
		at := i - r.offset // the entry's index in the file
		be.index = at
		be.ahead = r.trace[i:]
		ok, err := r.entry(e, i, at)
		if err != nil {
			return err
		}
		if tr == nil {
			continue
		}
		if err := tr.Apply(e); err != nil {
			return fmt.Errorf("device_traces[%d][%d]: %w", r.dev, at, err)
		}
		ok = ok && be.clean(at)
		if e.Action == snapshot.Alloc && ok {
			r.decisions++
		}
		if !ok {
			// Hold the recorded state again.
			if err := r.start(tr.State(r.dev), top); err != nil {
				return fmt.Errorf("device_traces[%d][%d]: %w", r.dev, at, err)
			}
		}
	}
	r.be.endAlloc()
	return nil
}

// entry replays entry e, the i-th of r.trace and the at-th of the file, and
// reports whether the model took the recorded decision, as far as the entry
// itself shows.
func (r *replay) entry(e *snapshot.TraceEntry, i, at int) (bool, error) {
	res, be, dev := r.res, r.be, r.dev
	switch e.Action {
	case snapshot.SegmentAlloc, snapshot.SegmentMap:
		res.SegmentAllocs++
		if (i == 0 || !isSegmentGrowth(r.trace[i-1].Action)) && be.failAt == 0 {
			be.endAlloc()
		}
		be.pending = append(be.pending, e)
	case snapshot.Alloc:
		res.Allocs++
		r.released = false
		b, err := r.a.AllocStream(e.Size, e.Stream)
		be.endAlloc()
		be.endReleases()
		if err != nil {
			res.AllocErrors++
			r.failed[e.Addr] = true
			res.mismatch(Mismatch{dev, at, "alloc", e.Size, hex(e.Addr), "error: " + err.Error()})
			return false, nil
		}
		delete(r.failed, e.Addr)
		r.live[e.Addr] = b
		if b.Addr != e.Addr {
			res.mismatch(Mismatch{dev, at, "alloc", e.Size, hex(e.Addr), hex(b.Addr)})
			return false, nil
		}
		res.AddressMatches++
	case snapshot.FreeCompleted:
		be.endAlloc()
		r.released = false
		b, ok := r.live[e.Addr]
		if !ok {
			if r.failed[e.Addr] {
				delete(r.failed, e.Addr)
				return true, nil
			}
			return false, fmt.Errorf("device_traces[%d][%d]: free_completed of %s never allocated", dev, at, hex(e.Addr))
		}
		delete(r.live, e.Addr)
		if err := r.a.Free(b); err != nil {
			return false, fmt.Errorf("device_traces[%d][%d]: free_completed of %s: %w", dev, at, hex(e.Addr), err)
		}
	case snapshot.SegmentFree, snapshot.SegmentUnmap:
		res.SegmentFrees++
		if be.failAt == 0 && i > 0 && r.trace[i-1].Action == snapshot.SegmentMap && r.mapFailed(i) {
			// The alloc that mapped the pages recorded before ran out
			// of memory: its device refuses the next page once those
			// are mapped, and it gives back what it caches, these.
			be.failAt = len(be.pending)
		}
		if be.failAt > 0 {
			be.releases = append(be.releases, e)
			return true, nil
		}
		be.endAlloc()
		if r.oomFollows(i) || e.Action == snapshot.SegmentFree && r.releaseInAlloc && r.allocFollows(i) {
			// Freed by the next alloc or oom, which its device refuses
			// until then.
			be.releases = append(be.releases, e)
			return true, nil
		}
		if !be.gaveBack(e) && !r.released {
			if rel, ok := r.a.(gpualloc.Releaser); ok {
				r.released = true
				if err := rel.ReleaseAll(); err != nil {
					return false, fmt.Errorf("device_traces[%d][%d]: releasing cached segments: %w", dev, at, err)
				}
			}
		}
		if be.takeBack(e) {
			res.SegmentFreeMatches++
			return true, nil
		}
		res.mismatch(Mismatch{dev, at, string(e.Action), e.Size, hex(e.Addr), "kept"})
		return false, nil
	case snapshot.OutOfMemory:
		// Failed after mapping pages (see mapFailed), the allocation
		// gets the memory recorded before its failure; else none.
		failing := be.failAt > 0
		if !failing {
			be.endAlloc()
		}
		res.OOMs++
		be.full, be.oom = !failing, true
		b, err := r.a.AllocStream(e.Size, e.Stream)
		be.full, be.oom = false, false
		be.endAlloc()
		be.endReleases()
		if err != nil {
			if !errors.Is(err, gpualloc.ErrOutOfMemory) {
				return false, fmt.Errorf("device_traces[%d][%d]: oom of %d bytes: %w", dev, at, e.Size, err)
			}
			res.OOMMatches++
			return true, nil
		}
		res.mismatch(Mismatch{dev, at, "oom", e.Size, "out of memory", hex(b.Addr)})
		if err := r.a.Free(b); err != nil {
			return false, fmt.Errorf("device_traces[%d][%d]: oom of %d bytes: %w", dev, at, e.Size, err)
		}
		return false, nil
	}
	return true, nil
}

// oomFollows reports whether the segment_free and segment_unmap entries
// from the i-th on lead to an oom. They are the failed allocation's own:
// PyTorch's malloc releases cached segments (release_available_cached_blocks
// with a max_split_size, then release_cached_blocks) before it gives up and
// records the oom, so an oom that follows frees of a release, an
// empty_cache's included, holds no cached segment that the release could
// give back. Given back before the oom instead, by ReleaseAll, they would
// miss the blocks freed since the last release.
func (r *replay) oomFollows(i int) bool {
	for _, e := range r.trace[i+1:] {
		switch e.Action {
		case snapshot.SegmentFree, snapshot.SegmentUnmap:
		case snapshot.OutOfMemory:
			return true
		default:
			return false
		}
	}
	return false
}

// mapFailed reports whether the segment_free and segment_unmap entries
// from the i-th on, which follow segment_map entries, are those of the
// failed map of an allocation that then succeeded or failed: they lead to
// an alloc or oom with only segment_map and segment_alloc entries between.
// PyTorch's malloc (alloc_block, try_allocate_expandable_block) maps the
// missing pages of an expandable segment block by block (map_block, each
// one ExpandableSegment::map, which records a segment_map); when the
// device refuses a page (cuMemCreate), the pages of that map are given
// back unrecorded and the allocation fails, keeping the blocks mapped
// before; malloc then releases every cached segment and page
// (release_cached_blocks), those just mapped included, and retries
// (alloc_block again), mapping anew what it needs.
func (r *replay) mapFailed(i int) bool {
	for j := i + 1; j < len(r.trace); j++ {
		switch r.trace[j].Action {
		case snapshot.SegmentFree, snapshot.SegmentUnmap:
			if isSegmentGrowth(r.trace[j-1].Action) {
				return false
			}
		case snapshot.SegmentMap, snapshot.SegmentAlloc:
		case snapshot.Alloc, snapshot.OutOfMemory:
			return true
		default:
			return false
		}
	}
	return false
}

// allocFollows reports whether the segment_free entries from the i-th on
// lead to an alloc or oom, with only segment_alloc entries between.
func (r *replay) allocFollows(i int) bool {
	for _, e := range r.trace[i+1:] {
		switch e.Action {
		case snapshot.SegmentFree, snapshot.SegmentAlloc:
		case snapshot.Alloc, snapshot.OutOfMemory:
			return true
		default:
			return false
		}
	}
	return false
}

func isSegmentGrowth(a snapshot.Action) bool {
	return a == snapshot.SegmentAlloc || a == snapshot.SegmentMap
}

// backend is the replay's device: Malloc hands out the recorded segments,
// Reserve and Map the recorded mapped ranges.
type backend struct {
	res     *Result
	dev     int
	index   int                    // of the current entry
	pending []*snapshot.TraceEntry // segment_alloc and segment_map entries recorded before the current alloc
	taken   bool                   // a segment_alloc of pending was taken by a Malloc
	mapped  []uint64               // pages mapped for the current alloc, by address
	full    bool                   // every allocation fails
	// failAt, when not 0, is the number of entries of pending recorded
	// before the current alloc's failed map (see mapFailed): once their
	// pages are mapped, the device refuses the next page.
	failAt int
	// refused: the device refused the current alloc's page at failAt.
	refused bool
	oom     bool  // the current allocation is recorded as failed
	total   int64 // the device's memory
	// releases are the segment_free and segment_unmap entries recorded
	// just before the current alloc or oom, which it must free before it
	// gets memory (see allocFollows and oomFollows).
	releases []*snapshot.TraceEntry
	// ahead are the trace's entries from the current one on.
	ahead []snapshot.TraceEntry
	// held are the ranges of expandable segments reserved (or restored),
	// their size by their address.
	held    map[uint64]int64
	next    uint64          // address of the next segment not in the trace
	dirty   int             // index of the last entry with a mismatch of the backend, or noEntry
	freed   map[uint64]bool // segments freed and pages unmapped, by address
	handles uint64          // handles created
}

func newBackend(res *Result, dev int, top uint64, total int64) *backend {
	return &backend{res: res, dev: dev, next: top, total: total, dirty: noEntry, freed: map[uint64]bool{}, held: map[uint64]int64{}}
}

// noEntry is no entry's index: the implied entries of State.Fresh have
// negative ones.
const noEntry = math.MinInt

// clean reports whether the backend saw no mismatch at entry i.
func (b *backend) clean(i int) bool { return b.dirty != i }

func (b *backend) mismatch(m Mismatch) {
	b.dirty = b.index
	b.res.mismatch(m)
}

func (b *backend) Malloc(size int64) (uint64, error) {
	if size <= 0 {
		return 0, gpualloc.ErrInvalidSize
	}
	if b.full || b.releasing() {
		return 0, gpualloc.ErrOutOfMemory
	}
	for _, p := range b.pending {
		if p.Action != snapshot.SegmentAlloc || b.taken {
			continue
		}
		b.taken = true
		if size == p.Size {
			b.res.SegmentMatches++
		} else {
			b.mismatch(Mismatch{b.dev, b.index - 1, "segment_alloc", p.Size, fmt.Sprintf("%d bytes", p.Size), fmt.Sprintf("%d bytes", size)})
		}
		delete(b.freed, p.Addr)
		return p.Addr, nil
	}
	b.res.ExtraMallocs++
	b.mismatch(Mismatch{b.dev, b.index, "segment_alloc", size, "none", fmt.Sprintf("%d bytes", size)})
	return b.fresh(size), nil
}

// releasing reports whether a segment or page that the current alloc must
// free first is still held.
func (b *backend) releasing() bool {
	for _, e := range b.releases {
		if e.Action == snapshot.SegmentFree && !b.freed[e.Addr] {
			return true
		}
		if e.Action == snapshot.SegmentUnmap {
			for _, p := range pages(e) {
				if !b.freed[p] {
					return true
				}
			}
		}
	}
	return false
}

// fresh returns an address for size bytes that no recorded segment uses.
func (b *backend) fresh(size int64) uint64 {
	a := b.next
	b.next += uint64(size+smallBuffer-1) / smallBuffer * smallBuffer
	return a
}

func (b *backend) Free(addr uint64, size int64) error {
	b.res.DeviceFrees++
	b.freed[addr] = true
	return nil
}

func (b *backend) MemInfo() (free, total int64) { return b.total, b.total }

// Granularity is that of CUDA's virtual memory on current GPUs, 2 MiB.
func (b *backend) Granularity() int64 { return smallBuffer }

// Reserve places a new range where the first segment_map recorded before
// the current alloc says PyTorch's was, since PyTorch maps a new range
// from its start. A range reserved with no map recorded (its first map
// refused, as in an oom) is placed where the first later segment_map of
// the entry's stream and pool that lies in no range held is: PyTorch
// keeps such a range, and its stream and pool map their next new pages
// in it, from its start.
func (b *backend) Reserve(size int64) (uint64, error) {
	base, ok := uint64(0), false
	for _, p := range b.pending {
		if p.Action == snapshot.SegmentMap {
			base, ok = p.Addr, true
			break
		}
	}
	if !ok {
		base, ok = b.nextRange()
	}
	if !ok {
		base = b.fresh(size)
	}
	b.held[base] = size
	return base, nil
}

// nextRange returns the address of the first segment_map after the
// current entry, of its stream and pool, that lies in no range held.
func (b *backend) nextRange() (uint64, bool) {
	if len(b.ahead) == 0 {
		return 0, false
	}
	e := &b.ahead[0]
	if e.Action != snapshot.Alloc && e.Action != snapshot.OutOfMemory {
		return 0, false
	}
	small := e.Size <= smallSize
	for i := 1; i < len(b.ahead); i++ {
		m := &b.ahead[i]
		if m.Action != snapshot.SegmentMap || m.Stream != e.Stream || (m.Size%largeBuffer != 0) != small {
			continue
		}
		in := false
		for base, size := range b.held {
			in = in || m.Addr >= base && m.Addr < base+uint64(size)
		}
		if !in {
			return m.Addr, true
		}
	}
	return 0, false
}

// rangeSize is the size of a range of expandable segments of pages of
// page bytes on a device of total bytes, as the pytorch strategy reserves
// it: 1 1/8 times the memory, in whole pages.
func rangeSize(total, page int64) int64 {
	want := total + total/8
	if want <= 0 || want > 1<<56 {
		want = 1 << 56
	}
	return (want + page - 1) / page * page
}

func (b *backend) Unreserve(addr uint64, size int64) error {
	delete(b.held, addr)
	return nil
}

func (b *backend) Create(size int64) (uint64, error) {
	if b.full {
		return 0, gpualloc.ErrOutOfMemory
	}
	if b.failAt > 0 && b.covered(b.pending[:b.failAt]) {
		b.refuse()
		return 0, gpualloc.ErrOutOfMemory
	}
	b.handles++
	return b.handles, nil
}

func (b *backend) Release(handle uint64) error { return nil }

func (b *backend) Map(addr uint64, handle uint64) error {
	if b.refused {
		// The retry after the failed map: the releases between are
		// done, and a page they gave back may be mapped again.
		b.endReleases()
	}
	b.mapped = append(b.mapped, addr)
	delete(b.freed, addr)
	return nil
}

func (b *backend) Unmap(addr uint64, size int64) error {
	b.res.DeviceFrees++
	b.freed[addr] = true
	return nil
}

// pages returns the addresses of the pages of a segment_map or
// segment_unmap entry: the large pool's when its size is a multiple of
// them, else the small pool's.
func pages(e *snapshot.TraceEntry) []uint64 {
	page := int64(largeBuffer)
	if e.Size%page != 0 {
		page = smallBuffer
	}
	var out []uint64
	for off := int64(0); off < e.Size; off += page {
		out = append(out, e.Addr+uint64(off))
	}
	return out
}

// gaveBack reports whether the allocator gave back some of what entry e,
// a segment_free or segment_unmap, records.
func (b *backend) gaveBack(e *snapshot.TraceEntry) bool {
	if e.Action == snapshot.SegmentFree {
		return b.freed[e.Addr]
	}
	for _, p := range pages(e) {
		if b.freed[p] {
			return true
		}
	}
	return false
}

// takeBack reports whether the allocator gave back all that entry e
// records, and forgets it.
func (b *backend) takeBack(e *snapshot.TraceEntry) bool {
	if e.Action == snapshot.SegmentFree {
		ok := b.freed[e.Addr]
		delete(b.freed, e.Addr)
		return ok
	}
	ok := true
	for _, p := range pages(e) {
		ok = ok && b.freed[p]
		delete(b.freed, p)
	}
	return ok
}

// covered reports whether every page of the segment_map entries of es is
// mapped for the current alloc.
func (b *backend) covered(es []*snapshot.TraceEntry) bool {
	mapped := map[uint64]bool{}
	for _, a := range b.mapped {
		mapped[a] = true
	}
	for _, e := range es {
		if e.Action != snapshot.SegmentMap {
			continue
		}
		for _, p := range pages(e) {
			if !mapped[p] {
				return false
			}
		}
	}
	return true
}

// refuse closes the entries of pending recorded before the current
// alloc's failed map, as endAlloc does, and leaves those after it to its
// retry; a recorded oom refuses the retry too.
func (b *backend) refuse() {
	after := append([]*snapshot.TraceEntry(nil), b.pending[b.failAt:]...)
	b.pending = b.pending[:b.failAt]
	b.endAlloc()
	b.pending = append(b.pending, after...)
	b.refused = true
	b.full = b.oom
}

// endAlloc closes the recorded segment_alloc and segment_map entries of the
// alloc just replayed: a segment that the allocator did not ask for, a
// recorded range it did not map and a page it mapped that no entry
// records are mismatches.
func (b *backend) endAlloc() {
	mapped := map[uint64]bool{}
	for _, a := range b.mapped {
		mapped[a] = true
	}
	for _, p := range b.pending {
		switch {
		case p.Action == snapshot.SegmentAlloc && !b.taken:
			b.mismatch(Mismatch{b.dev, b.index, "segment_alloc", p.Size, fmt.Sprintf("%d bytes", p.Size), "none (served from the cache)"})
		case p.Action == snapshot.SegmentMap:
			all := true
			for _, a := range pages(p) {
				all = all && mapped[a]
				delete(mapped, a)
			}
			if all {
				b.res.SegmentMatches++
			} else {
				b.mismatch(Mismatch{b.dev, b.index, "segment_map", p.Size, hex(p.Addr), "not mapped"})
			}
		}
	}
	if len(mapped) > 0 {
		var extra []uint64
		for a := range mapped {
			extra = append(extra, a)
		}
		sort.Slice(extra, func(i, j int) bool { return extra[i] < extra[j] })
		b.res.ExtraMallocs += int64(len(extra))
		b.mismatch(Mismatch{b.dev, b.index, "segment_map", 0, "none", fmt.Sprintf("%d pages from %s", len(extra), hex(extra[0]))})
	}
	b.pending, b.taken, b.mapped = b.pending[:0], false, b.mapped[:0]
	b.failAt, b.refused = 0, false
}

// endReleases closes the segment_free and segment_unmap entries recorded
// before the alloc or oom just replayed: a segment or page that the
// allocator kept is a mismatch.
func (b *backend) endReleases() {
	for _, e := range b.releases {
		if b.takeBack(e) {
			b.res.SegmentFreeMatches++
		} else {
			b.mismatch(Mismatch{b.dev, b.index, string(e.Action), e.Size, hex(e.Addr), "kept"})
		}
	}
	b.releases = b.releases[:0]
}

// PyTorch's segment and page sizes: addresses made up for unrecorded
// segments are aligned to the first.
const (
	smallBuffer = 2 << 20
	largeBuffer = 20 << 20
	smallSize   = 1 << 20 // the largest request of the small pool
)

func hex(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }
