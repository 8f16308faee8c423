package planned

import (
	"errors"
	"fmt"
	"math"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/traces"
)

// pool is what the allocator needs of its fallback.
type pool interface {
	gpualloc.Allocator
	gpualloc.StatsReporter
	gpualloc.Releaser
	gpualloc.FreeSpaceReporter
}

// An Allocator serves the requests of a step from a plan and the others
// from its fallback; see the package documentation.
type Allocator struct {
	c   Config
	dev gpualloc.Backend
	fb  pool
	tr  *tracker // the fallback's device

	// Recording, while no plan is in use.
	rec       *recorder
	nextCheck int  // requests recorded at the next look for a step
	declined  bool // a step was found whose plan would cost memory: no more learning
	dropped   bool // a plan was dropped: settle gives its memory back
	waitB     int  // the step found, [waitB, waitB+waitP): planned once
	waitP     int  // waitB+2*waitP requests are recorded (0: none found)

	// The plan in use, or nil.
	plan    *stepPlan
	planned int  // positions of plan with an offset
	ti      int  // index of the next event in the step's tokens
	synced  bool // ti is known
	run     int  // events in a row with the token planned at their index
	ring    ring
	seen    int // events since the plan's start
	hits    int // served from the plan since the last check
	strikes int // checks in a row with too few hits
	reg     region

	// Counters of what the fallback's Stats do not see.
	plannedAllocs, plannedFrees, plannedHits   int64
	regionMallocs, regionFrees, regionBytes    int64
	extraOOMs                                  int64
	peakRequested, peakAllocated, peakReserved int64
	plans                                      int64
}

// New returns a planned allocator on b. With a profile file, it reads the
// file, finds its step and plans it before it returns; an error names the
// file. A configuration out of range is an error wrapping a
// *gpualloc.ParamError.
func New(b gpualloc.Backend, c Config) (*Allocator, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	a := &Allocator{c: c, dev: b, tr: &tracker{Backend: b}, rec: newRecorder(), ring: newRing(c.Window), reg: newRegion()}
	var err error
	switch c.Fallback {
	case FallbackBestFit:
		a.fb, err = bestfit.New(a.tr, bestfit.DefaultConfig())
	default:
		a.fb, err = pytorch.New(a.tr, pytorch.DefaultConfig())
	}
	if err != nil {
		return nil, err
	}
	if c.Profile != Auto {
		sp, err := a.profileFile()
		if err != nil {
			return nil, err
		}
		a.use(sp, 0, true)
	}
	return a, nil
}

// profileFile plans the step of the profile file: the last whole step of
// its recurring suffix whose requests are freed in the recording.
func (a *Allocator) profileFile() (*stepPlan, error) {
	c := a.c
	r, err := traces.Open(c.Profile, traces.Options{})
	if err != nil {
		return nil, fmt.Errorf("%s: profile: %w", name, err)
	}
	defer r.Close()
	rec := a.rec
	for r.Scan() {
		ev := r.Event()
		if int(ev.Device) != c.Device {
			continue
		}
		switch ev.Op {
		case traces.OpAlloc:
			rec.alloc(ev.ID, ev.Size)
		case traces.OpFree:
			rec.free(ev.ID)
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("%s: profile: %w", name, err)
	}
	n := len(rec.reqs)
	s, p, ok := rec.period(c.MinStep)
	if ok && !rec.periodic(s, p) {
		ok = false
	}
	if !ok {
		return nil, fmt.Errorf("%s: profile %s: no step found on device %d: no run of at least %d requests (min_step) "+
			"recurs twice in a row with most of its memory freed within a step (%d requests read)",
			name, c.Profile, c.Device, c.MinStep, n)
	}
	lo := max(s, n-3*p)
	hi := min(lo+p, n-2*p+1)
	b := rec.boundary(lo, hi)
	sp, err := rec.build(b-(b-s)/p*p, b, p, c.Window, c.TimeLimit, int64(c.MinShare*float64(rec.peak())), math.MaxInt64)
	if errors.Is(err, errSmall) {
		return nil, fmt.Errorf("%s: profile %s: no step found on device %d: the run of %d requests that recurs at its end "+
			"peaks below min_share (%g) of the profile's peak: not a step of the whole program", name, c.Profile, c.Device, p, c.MinShare)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: profile %s: %w", name, c.Profile, err)
	}
	rec.reset()
	return sp, nil
}

// use starts serving from sp, the next event being at token ti of the
// step if synced.
func (a *Allocator) use(sp *stepPlan, ti int, synced bool) {
	a.plan, a.ti, a.synced, a.run = sp, ti, synced, 0
	a.reg.layout(sp.cut, sp.height)
	if synced {
		a.run = a.c.Window
	}
	a.planned = 0
	for _, off := range sp.off[sp.pre:] {
		if off >= 0 {
			a.planned++
		}
	}
	a.ring = newRing(a.c.Window)
	a.seen, a.hits, a.strikes = 0, 0, 0
	a.plans++
}

// drop stops using the plan; the region goes back to the device once no
// planned block is live, and recording starts afresh.
//
// The memory goes back on the next Free (see settle), so that no
// allocation gives memory back unless the device is full: a replay counts
// such an allocation as one that met the device's capacity.
func (a *Allocator) drop() {
	a.plan, a.synced = nil, false
	if a.c.Reuse {
		a.reg.pool()
	}
	a.rec.reset()
	a.nextCheck, a.waitP = 0, 0
	a.dropped = true
}

// settle does, on a Free, what a dropped plan or a step found leaves to
// do: a dropped plan's region goes back to the device if no block is live
// in it, and what the fallback cached beside the plan is given back, so
// that the requests to come fill the region's gaps first; a step whose
// requests are all recorded is planned.
func (a *Allocator) settle() {
	if a.dropped {
		a.dropped = false
		a.freeRegionIfEmpty()
		_ = a.fb.ReleaseAll()
	}
	if a.waitP > 0 && len(a.rec.reqs) >= a.waitB+2*a.waitP {
		a.activate()
	}
}

// freeRegionIfEmpty gives back each part of the region that is held and
// has no live block; it reports whether it gave any back.
func (a *Allocator) freeRegionIfEmpty() bool {
	freed := false
	for i := range a.reg.parts {
		p := &a.reg.parts[i]
		if p.size == 0 || p.live > 0 {
			continue
		}
		if a.dev.Free(p.base, p.size) == nil {
			a.regionFrees++
		}
		*p = part{}
		freed = true
		if i == 1 {
			a.reg.gaps = nil
		}
	}
	return freed
}

// Alloc serves a request from the plan when it is the request the plan
// expects at this position of the step, at the size planned, and its
// planned memory is free; otherwise from the fallback.
func (a *Allocator) Alloc(size int64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, gpualloc.ErrInvalidSize
	}
	if a.plan != nil {
		if k := a.position(size); k >= 0 {
			if b, ok := a.servePlanned(k, size); ok {
				a.observe()
				return b, nil
			}
		}
	}
	if a.c.Reuse && a.reg.gaps != nil {
		if b, ok := a.takeGap(size); ok {
			return b, nil
		}
	}
	b, err := a.fb.Alloc(size)
	if errors.Is(err, gpualloc.ErrOutOfMemory) && a.reg.held() > 0 {
		// The plan's memory must not cost the fallback a request: the
		// plan is dropped, what of the region holds no block goes back
		// and the fallback tries again; else the request is served from
		// a free gap of the region's part 1, if one holds it.
		a.extraOOMs++
		if a.plan != nil {
			a.drop()
			a.dropped = false
		}
		if a.freeRegionIfEmpty() {
			b, err = a.fb.Alloc(size)
		} else if a.reg.pool(); a.reg.gaps != nil {
			if g, ok := a.takeGap(size); ok {
				return g, nil
			}
			a.extraOOMs-- // the request fails once
		} else {
			a.extraOOMs--
		}
	}
	if err == nil {
		a.tr.block(b.Addr, 1)
	}
	if err == nil && a.learning() {
		a.rec.alloc(b.Addr, size)
		a.learn()
	}
	a.observe()
	return b, err
}

// takeGap serves a request from a free gap of a dropped plan's region.
func (a *Allocator) takeGap(size int64) (gpualloc.Block, bool) {
	s, ok := a.reg.take(size)
	if !ok {
		return gpualloc.Block{}, false
	}
	a.plannedAllocs++
	a.plannedHits++
	a.observe()
	return gpualloc.Block{Addr: a.reg.addr(s.off), Size: s.size, Requested: size, Handle: s.k}, true
}

// position returns the request's position in the step if the plan covers
// it at this size, else -1. See step for the events.
func (a *Allocator) position(size int64) int {
	i := a.step(size)
	if i < 0 {
		return -1
	}
	p := a.plan
	k := p.sync.pos[i]
	if !a.synced || a.run < a.c.Window || k < 0 || p.off[k] < 0 {
		return -1
	}
	return int(k)
}

// step follows an event (tok: +size for an allocation, -size for a free)
// through the step's events and returns its token index, or -1 when the
// plan is dropped. Every event moves the index on by one, matching or not
// (an event of another size takes the planned one's place, as when shapes
// change); a run of window events that occurs once in the step sets it.
// An allocation is served from the plan only after window events in a row
// that the plan expects: a request that takes a planned request's place
// but not its lifetime (an optimizer's state allocated in the first step,
// where later steps allocate a temporary of its size) is left out so.
// Once a step, the share of the plan's requests served is checked.
func (a *Allocator) step(tok int64) int {
	p := a.plan
	n := len(p.sync.tokens) - p.sync.pre
	if a.ti >= p.sync.pre && a.seen > 0 && a.seen%n == 0 {
		if float64(a.hits) < a.c.MinHit*float64(a.planned) {
			a.strikes++
		} else {
			a.strikes = 0
		}
		a.hits = 0
		if a.strikes >= 2 {
			a.drop()
			return -1
		}
	}
	if a.ti >= p.sync.pre {
		a.seen++
	}
	a.ring.push(tok, p.sync.pow)
	i := a.ti
	if j, ok := p.sync.locate(&a.ring); ok && tok > 0 {
		i, a.synced, a.run = j, true, a.c.Window-1
	}
	a.ti = p.sync.next(i)
	if p.sync.tokens[i] != tok {
		a.run = 0
		return i
	}
	a.run++
	return i
}

// servePlanned hands out position k at its planned offset, taking the
// region from the device first if it is not held; false if the region
// cannot be had or the planned memory is in use.
func (a *Allocator) servePlanned(k int, size int64) (gpualloc.Block, bool) {
	p := a.plan
	s := span{off: p.off[k], size: p.rsize[k], req: size, k: uint64(k)}
	fresh := false
	if i := a.reg.partOf(s.off); a.reg.parts[i].size == 0 {
		lo, hi := a.reg.bounds(i)
		addr, err := a.dev.Malloc(hi - lo)
		if err != nil {
			return gpualloc.Block{}, false
		}
		a.reg.parts[i] = part{base: addr, size: hi - lo}
		a.regionMallocs++
		a.regionBytes += hi - lo
		fresh = true
	}
	if !a.reg.fits(s.off, s.size) {
		return gpualloc.Block{}, false
	}
	a.reg.insert(s)
	a.plannedAllocs++
	a.hits++
	if !fresh {
		a.plannedHits++
	}
	return gpualloc.Block{Addr: a.reg.addr(s.off), Size: s.size, Requested: size, Handle: s.k}, true
}

// learning reports whether requests are recorded: while no plan is in use,
// none was declined, and no region is held (a dropped plan's region is
// given back once its blocks are freed; one region at a time).
func (a *Allocator) learning() bool {
	return a.plan == nil && !a.declined && a.reg.held() == 0
}

// learn looks for a step in the recording, every max(min_step, n/16)
// requests (O(n) each: O(16) a request in all), and plans it once the
// requests of the step and the next one are recorded.
func (a *Allocator) learn() {
	n := len(a.rec.reqs)
	if a.waitP > 0 {
		return // settle plans it
	}
	if n >= a.c.MaxProfile {
		a.rec.reset()
		a.nextCheck = 0
		return
	}
	if n < a.nextCheck {
		return
	}
	a.nextCheck = n + max(a.c.MinStep, n/16)
	s, p, ok := a.rec.period(a.c.MinStep)
	if !ok || !a.rec.periodic(s, p) {
		return
	}
	a.waitB, a.waitP = a.rec.boundary(s, s+p), p
}

// activate plans the step found, whose requests and those of the next step
// are recorded, if the step recurred unchanged, and serves the next request
// from the plan.
func (a *Allocator) activate() {
	b, p := a.waitB, a.waitP
	q := a.rec.reqs
	for i := b; i < b+p; i++ {
		if q[i].size != q[i+p].size {
			a.waitP = 0
			return
		}
	}
	fs := a.fb.Stats()
	// What the fallback keeps after giving back its free segments, and
	// the plan, must stay within what the run has needed so far, else the
	// plan would cost memory (the fallback's cache lies in segments that
	// also hold blocks that stay, such as weights): the run goes on with
	// the fallback alone. The plan's lower bound tells before it is solved.
	room := fs.PeakReserved - (fs.Reserved - a.tr.releasable())
	sp, err := a.rec.build(0, b, p, a.c.Window, a.c.TimeLimit, int64(a.c.MinShare*float64(fs.Reserved)), room)
	if errors.Is(err, errCostly) || err == nil && sp.height > room {
		a.waitP, a.declined = 0, true
		a.rec.reset()
		return
	}
	if err != nil {
		a.waitP = 0
		return
	}
	// The steps served while profiling leave cached memory in the
	// fallback that the plan now takes over, as a profiling iteration's
	// cache is emptied (torch.cuda.empty_cache) before the planned ones.
	_ = a.fb.ReleaseAll()
	a.freeRegionIfEmpty()
	base := a.rec.reqs[b].alloc
	a.use(sp, int((a.rec.events-base)%int64(len(sp.sync.tokens))), true)
	a.rec.reset()
	a.waitP = 0
}

// Free returns a block to the plan's region or to the fallback.
func (a *Allocator) Free(b gpualloc.Block) error {
	if off, ok := a.reg.find(b.Addr); ok {
		s := span{off: off, size: b.Size, req: b.Requested, k: b.Handle}
		if !a.reg.remove(s) {
			return fmt.Errorf("%s: free of %#x: %w", name, b.Addr, gpualloc.ErrInvalidFree)
		}
		a.plannedFrees++
		if a.plan != nil {
			a.step(-b.Requested)
		}
		if a.plan == nil {
			a.freeRegionIfEmpty()
		}
		a.settle()
		a.observe()
		return nil
	}
	if err := a.fb.Free(b); err != nil {
		return err
	}
	a.tr.block(b.Addr, -1)
	if a.plan != nil {
		a.step(-b.Requested)
	}
	if a.learning() {
		a.rec.free(b.Addr)
	}
	a.settle()
	a.observe()
	return nil
}

// ReleaseAll returns the fallback's cached memory, and the plan's region
// if no planned block is live (it is taken again at the next planned
// request).
func (a *Allocator) ReleaseAll() error {
	err := a.fb.ReleaseAll()
	a.freeRegionIfEmpty()
	a.observe()
	return err
}

// observe updates the peaks after an operation.
//
// While the region holds nothing, the totals are the fallback's, whose own
// peaks Stats takes: so only moments with a region are observed.
func (a *Allocator) observe() {
	if a.reg.held() == 0 {
		return
	}
	s := a.Stats()
	a.peakRequested = max(a.peakRequested, s.Requested)
	a.peakAllocated = max(a.peakAllocated, s.Allocated)
	a.peakReserved = max(a.peakReserved, s.Reserved)
}

// Stats adds the plan's region and blocks to the fallback's counters.
func (a *Allocator) Stats() gpualloc.Stats {
	s := a.fb.Stats()
	s.Requested += a.reg.requested
	s.Allocated += a.reg.allocated
	s.Reserved += a.reg.held()
	s.Allocs += a.plannedAllocs
	s.Frees += a.plannedFrees
	s.DeviceMallocs += a.regionMallocs
	s.DeviceFrees += a.regionFrees
	s.DeviceMallocBytes += a.regionBytes
	s.CacheHits += a.plannedHits
	s.OOMs -= a.extraOOMs
	s.PeakRequested = max(a.peakRequested, s.PeakRequested, s.Requested)
	s.PeakAllocated = max(a.peakAllocated, s.PeakAllocated, s.Allocated)
	s.PeakReserved = max(a.peakReserved, s.PeakReserved, s.Reserved)
	return s
}

// FreeSpace reports the largest free block and the free bytes of the
// fallback's memory and of the plan's region together: O(n) for n live
// planned blocks.
func (a *Allocator) FreeSpace() (largest, total int64) {
	largest, total = a.fb.FreeSpace()
	for i, p := range a.reg.parts {
		if p.size == 0 {
			continue
		}
		end, hi := a.reg.bounds(i)
		gap := func(to int64) {
			largest = max(largest, to-end)
			total += to - end
		}
		a.reg.live.AscendRange(span{off: end}, span{off: hi}, func(s span) bool {
			gap(s.off)
			end = s.off + s.size
			return true
		})
		gap(hi)
	}
	return largest, total
}

// Config returns the allocator's configuration.
func (a *Allocator) Config() Config { return a.c }

// Spec returns the allocator's spec with every parameter.
func (a *Allocator) Spec() string {
	c := a.c
	return fmt.Sprintf("%s:profile=%s,device=%d,fallback=%s,time_limit=%s,window=%d,min_step=%d,min_hit=%g,reuse=%t,min_share=%g,max_profile=%d",
		name, c.Profile, c.Device, c.Fallback, c.TimeLimit, c.Window, c.MinStep, c.MinHit, c.Reuse, c.MinShare, c.MaxProfile)
}

// PlanInfo describes the plan an [Allocator] serves from.
type PlanInfo struct {
	Prefix   int   // requests planned before the steps (profile files only)
	Requests int   // requests in a step
	Planned  int   // of them, those the plan places
	Height   int64 // bytes of the plan's region
	Optimal  bool  // plan.Solve proved the placement optimal
	Synced   bool  // the position of the next request in the step is known
	Plans    int64 // plans made so far
}

// Plan describes the plan in use, and false if none is.
func (a *Allocator) Plan() (PlanInfo, bool) {
	if a.plan == nil {
		return PlanInfo{Plans: a.plans}, false
	}
	return PlanInfo{
		Prefix: a.plan.pre, Requests: len(a.plan.size) - a.plan.pre, Planned: a.planned, Height: a.plan.height,
		Optimal: a.plan.solved.Optimal, Synced: a.synced, Plans: a.plans,
	}, true
}

// Planned reports whether b was served from the plan's region.
func (a *Allocator) Planned(b gpualloc.Block) bool {
	_, ok := a.reg.find(b.Addr)
	return ok
}
