package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/devicecost"
	"github.com/gpualloc/gpualloc/traces"
)

// Replay replays the events of r into a fresh allocator per device of the
// trace, as cfg says, and measures the result.
//
// Each device index in the trace gets its own backend and allocator, made
// when the index is first seen. Allocations go through the allocator's
// AllocCategory when it is a [gpualloc.CategoryAllocator], with the event's
// stream and category, else through its AllocStream when it is a
// [gpualloc.StreamAllocator], with the event's stream; which one is decided
// once per device. The engine measures everything itself, without trusting the
// allocator's own statistics: requested bytes from the events, allocated
// bytes from the sizes of the blocks it gets, reserved bytes and device
// calls from a counting wrapper around each backend.
//
// An alloc that fails with [gpualloc.ErrOutOfMemory] is counted and the
// replay goes on (the free of that allocation is skipped). Any other error of
// the allocator, or a block smaller than asked for, ends the replay with an
// error that names the event's index (from 0). An error of the reader is
// returned as the reader gave it. On error the Result holds what was
// measured up to that point.
func Replay(r traces.Reader, cfg Config) (Result, error) {
	return ReplayContext(context.Background(), r, cfg)
}

// ReplayContext is [Replay] that stops with ctx's error when ctx is done,
// checked every ProgressInterval events.
func ReplayContext(ctx context.Context, r traces.Reader, cfg Config) (res Result, err error) {
	e, err := newEngine(r, cfg)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if cerr := e.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	err = e.run(ctx, e.recording(r))
	if err == nil && cfg.Verify {
		for _, d := range e.devs {
			if d == nil {
				continue
			}
			if err = d.verify(); err != nil {
				err = fmt.Errorf("%sdevice %d: at the end: %w", e.prefix(), d.index, err)
				break
			}
		}
	}
	e.finish(r)
	if err == nil && e.rec != nil {
		err = e.snapshot()
	}
	return e.res, err
}

// slot states
const (
	slotFree   = iota // no live allocation
	slotLive          // block holds the live allocation
	slotFailed        // the alloc failed with out of memory; its free is skipped
	slotHeld          // a block of a private pool that the engine holds (see start.go)
)

// A slot is the engine's record of one live allocation, at index Event.Slot.
// It holds no pointers, so that writing one costs no write barrier and the
// slots are no work for the garbage collector.
type slot struct {
	block gpualloc.Block
	size  int64  // bytes requested by the event
	span  int32  // the ledger's range that holds the block, below -1 several, -1 none (see device.holdSlow); spanPending, spanOwn
	dev   uint16 // device index, in engine.devs (at most virtual.MaxIndex)
	state uint8
}

// An engine is the state of one replay.
type engine struct {
	cfg      Config
	costs    *devicecost.Model // Config.DeviceCosts, or devicecost.H200
	devs     []*device         // by device index; nil where not used yet
	slots    []slot
	series   *Series
	strategy string // short name for errors

	memory CapacityReporter // the trace's devices' memory, with no Config.Capacity
	// plan is the recorded state that the trace starts from and its
	// private pools (Config.Start, or the reader's traces.Start); nil for any
	// other trace (see start.go).
	plan   *startPlan
	hinted bool // a device took its capacity from memory

	// Sums over devices.
	requested, allocated, reserved int64
	peakReq, peakAlloc, peakRes    int64
	resLo, resHi                   int64 // extremes of reserved during the current event
	mallocs, frees                 int64 // device allocations and frees
	refused                        bool  // a device allocation failed with out of memory
	live                           int64 // the trace's live allocations

	// Where the memory goes (see ledger): the split of reserved bytes at
	// the peak (splitAfter as device's), and whether the engine's or a
	// device's split is still that of a moment inside an event.
	split      split
	splitAfter bool
	unsettled  bool
	// watch is peakSeen, or -1 while unsettled: the one figure the step
	// compares with the peak to know that afterPeak has work to do.
	watch int64

	// Free space just after the event at which reserved memory reached
	// its peak (see Result.LargestFreeBytes).
	peakSeen              int64 // the peak of reserved when free space was last taken
	freeKnown             bool  // every device reports its free space
	largestFree, freeSize int64

	// With Config.MeasureTime: nanoseconds spent in allocs that hit the
	// cache and in allocs that called the device, and how many of those.
	measure         bool
	hitNS, deviceNS int64
	deviceAllocs    int64

	rec *snapRecorder // with Config.Snapshot, else nil

	res Result
}

func newEngine(r traces.Reader, cfg Config) (*engine, error) {
	if cfg.Params == nil && cfg.Open == nil {
		return nil, errors.New("sim: no strategy: Config.Params and Config.Open are both nil")
	}
	if cfg.Capacity < 0 {
		return nil, fmt.Errorf("sim: negative capacity %d", cfg.Capacity)
	}
	if cfg.Trace == "" {
		if n, ok := r.(interface{ Name() string }); ok {
			cfg.Trace = n.Name()
		}
	}
	if cfg.Start == nil {
		cfg.Start = traces.StartOf(r)
	}
	var recorded bool
	cfg.Params, recorded = recordedParams(cfg.Start, cfg.Params, cfg.Trace)
	e := &engine{cfg: cfg, measure: cfg.MeasureTime, costs: cfg.DeviceCosts}
	if e.costs == nil {
		e.costs = devicecost.H200
	}
	e.res.Trace = cfg.Trace
	if cfg.Start != nil {
		e.res.Release, e.res.ReleaseWhy = cfg.Start.Release, cfg.Start.ReleaseWhy
	}
	if recorded {
		e.res.SettingsFrom = cfg.Trace
	}
	e.res.Backend = cfg.Backend
	if e.res.Backend == "" {
		e.res.Backend = "sim"
	}
	switch {
	case cfg.Strategy != "":
		e.res.Strategy = strategyOfSpec(cfg.Strategy)
	case cfg.Params != nil:
		e.res.Strategy = StrategyOf(cfg.Params)
	}
	e.strategy = e.res.Strategy.Name
	e.res.CapacityBytes = cfg.Capacity
	if cfg.NewBackend == nil && cfg.Capacity == 0 {
		e.res.CapacityBytes = virtual.DefaultCapacity
		e.memory, _ = r.(CapacityReporter)
	}
	if cfg.Start != nil {
		e.plan = planOf(cfg.Start)
	}

	if cfg.SeriesBuckets >= 0 {
		n := cfg.SeriesBuckets
		if n == 0 {
			n = DefaultSeriesBuckets
		}
		e.series = newSeries(n)
		e.res.Series = e.series
	}
	if cfg.Snapshot != nil || cfg.SnapshotStream != nil {
		e.rec = newSnapRecorder(&cfg)
		e.rec.frames, e.rec.stacks = traces.StacksOf(r)
	}
	return e, nil
}

// run is the replay loop. It allocates nothing per event once the slots and
// devices it needs exist. A reader that is a [traces.BatchReader] (events
// in memory) is read a batch at a time, in place; any other is read ahead
// on a goroutine of its own (see prefetch), which the loop then reads the
// same way.
func (e *engine) run(ctx context.Context, r traces.Reader) (err error) {
	progress := e.cfg.Progress
	var n int64
	start := time.Now()
	defer func() {
		if p := e.plan; p != nil && p.starting {
			// The trace ended within its start events.
			p.starting = false
			e.endStart()
		}
		elapsed := time.Since(start)
		e.res.Events = n
		e.res.ElapsedNS = elapsed.Nanoseconds()
		if s := elapsed.Seconds(); s > 0 {
			e.res.EventsPerSec = float64(n) / s
		}
		if progress != nil {
			progress(n)
		}
	}()
	var br interface {
		Batch() []traces.Event
		Err() error
	}
	if b, ok := r.(traces.BatchReader); ok {
		br = b
	} else {
		p := prefetch(r)
		defer p.stop()
		br = p
	}
	for {
		batch := br.Batch()
		if len(batch) == 0 {
			break
		}
		// Chosen once a batch: stepSpecial, while it is needed, goes on
		// correctly past the event that ends the need.
		if e.plan != nil && e.plan.active {
			n, err = e.stepsSpecial(ctx, batch, n)
		} else {
			n, err = e.steps(ctx, batch, n)
		}
		if err != nil {
			return err
		}
	}
	return br.Err()
}

// steps replays the events of batch, the first of which is event n, and
// returns the number of the event after them. It is the loop of a trace
// with no start state and no private pools; stepsSpecial is the same
// through stepSpecial. Each runs tick every ProgressInterval events.
func (e *engine) steps(ctx context.Context, batch []traces.Event, n int64) (int64, error) {
	for i := range batch {
		if err := e.step(&batch[i], n); err != nil {
			return n, err
		}
		if n++; n%ProgressInterval == 0 {
			if err := e.tick(ctx, n); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (e *engine) stepsSpecial(ctx context.Context, batch []traces.Event, n int64) (int64, error) {
	for i := range batch {
		if err := e.stepSpecial(&batch[i], n); err != nil {
			return n, err
		}
		if n++; n%ProgressInterval == 0 {
			if err := e.tick(ctx, n); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// tick returns ctx's error when it is done, else reports progress, after
// n events.
func (e *engine) tick(ctx context.Context, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.cfg.Progress != nil {
		e.cfg.Progress(n)
	}
	return nil
}

// stepSpecial replays event n of a trace that starts from a recorded
// state or has allocations in private pools (see start.go): the plan says
// what the event may take (a block of the start state, or of a private
// pool), step replays it, and the block that the alloc took from the start
// state or a private pool is made the engine's (held) or the recorder's.
// The loop calls it, in place of step, while the plan is active: until
// the start events are past, or for the whole trace when it has private
// pools; so the step of a trace with neither looks at none of this, at a
// cost of one branch an alloc.
func (e *engine) stepSpecial(ev *traces.Event, n int64) error {
	p := e.plan
	if p.starting && n >= p.initial {
		e.endStart()
	}
	if err := p.next(e, ev, n); err != nil {
		return e.eventError(n, *ev, err)
	}
	err := e.step(ev, n)
	took := p.took
	p.from, p.took = fromStrategy, tookNone
	if err != nil || took == tookNone {
		return err
	}
	s := &e.slots[ev.Slot]
	if s.state != slotLive {
		return nil
	}
	if took == tookHeld {
		s.state = slotHeld
	} else if e.rec != nil {
		// A block of the restored state, or one that a private pool
		// served (AllocPool), which the recorder's allocator did not hand
		// out: recorded as allocated here.
		e.rec.begin(ev.Stream, ev.Category)
		e.rec.alloc(int(s.dev), s.block, ev.Size)
	}
	return nil
}

// step replays event n.
func (e *engine) step(ev *traces.Event, n int64) error {
	e.resLo, e.resHi = e.reserved, e.reserved
	var d *device
	var err error
	switch ev.Op {
	case traces.OpAlloc:
		d, err = e.alloc(ev)
	case traces.OpFree:
		d, err = e.free(ev)
	case traces.OpRelease:
		d, err = e.release(ev)
	default:
		err = fmt.Errorf("unknown op %d", ev.Op)
	}
	if err != nil {
		return e.eventError(n, *ev, err)
	}
	if e.cfg.Verify && d != nil {
		if err := d.verify(); err != nil {
			return e.eventError(n, *ev, err)
		}
	}
	if e.series != nil {
		e.series.add(n, ev.TimeUS, e.requested, e.allocated, e.resLo, e.resHi, e.reserved)
	}
	if e.cfg.Observe != nil {
		if err := e.cfg.Observe(n, ev, e.deviceBytes(int(ev.Device))); err != nil {
			return err
		}
	}
	if e.peakRes != e.watch {
		e.afterPeak()
	}
	return nil
}

// deviceBytes returns what device i holds now: nothing when the trace
// has not used it yet.
func (e *engine) deviceBytes(i int) DeviceBytes {
	if uint(i) >= uint(len(e.devs)) || e.devs[i] == nil {
		return DeviceBytes{}
	}
	d := e.devs[i]
	return DeviceBytes{Requested: d.lower, Allocated: d.allocated, Reserved: d.reserved}
}

func (e *engine) alloc(ev *traces.Event) (*device, error) {
	if ev.Slot < 0 {
		return nil, fmt.Errorf("negative slot %d", ev.Slot)
	}
	if int(ev.Slot) >= len(e.slots) {
		e.growSlots(int(ev.Slot))
	}
	s := &e.slots[ev.Slot]
	if s.state != slotFree {
		return nil, fmt.Errorf("slot %d is already in use", ev.Slot)
	}
	if ev.Size <= 0 {
		return nil, fmt.Errorf("bad size %d", ev.Size)
	}
	var d *device
	if i := int(ev.Device); uint(i) < uint(len(e.devs)) && e.devs[i] != nil {
		d = e.devs[i] // the common case, without a call
	} else {
		var err error
		if d, err = e.device(ev.Device); err != nil {
			return nil, err
		}
	}
	var err error
	e.res.Allocs++
	e.live++
	d.allocs++
	// The lower bound is the trace's: an allocation the strategy could not
	// serve still counts, so that every strategy is measured against the
	// same bound.
	e.requested += ev.Size
	e.peakReq = max(e.peakReq, e.requested)
	d.lower += ev.Size
	d.peakLower = max(d.peakLower, d.lower)
	before, freesBefore := e.mallocs, e.frees
	e.refused = false
	var b gpualloc.Block
	var t0 time.Time
	if e.measure {
		t0 = time.Now()
	}
	switch {
	case d.cat != nil:
		b, err = d.cat.AllocCategory(ev.Size, ev.Stream, ev.Category)
	case d.stream != nil:
		b, err = d.stream.AllocStream(ev.Size, ev.Stream)
	default:
		b, err = d.alloc.Alloc(ev.Size)
	}
	var ns int64
	if e.measure {
		ns = int64(time.Since(t0))
	}
	if e.refused || e.frees != freesBefore {
		e.res.DeviceFullAllocs++
		d.fullAllocs++
	}
	if err != nil {
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			e.res.OOMs++
			d.ooms++
			*s = slot{size: ev.Size, dev: uint16(ev.Device), state: slotFailed}
			return d, nil
		}
		return d, err
	}
	if b.Size < ev.Size {
		return d, fmt.Errorf("block of %d bytes at %#x handed out for %d bytes", b.Size, b.Addr, ev.Size)
	}
	// Field by field: a composite literal would build the slot aside and
	// copy it, on the hottest line of the replay.
	s.block, s.size, s.dev, s.state = b, ev.Size, uint16(ev.Device), slotLive
	d.okAllocs++
	// The block is counted in its device allocation only when a split
	// needs it (see ledger.go): most blocks are freed before. A block
	// that made a device allocation is counted now, where its region is
	// the last one made, so that the device free of the region finds it
	// through the block (see free).
	if e.mallocs == before {
		e.res.CacheHits++
		d.hits++
		e.hitNS += ns
		s.span = spanPending
		if l := &d.led; l.npend < maxPending {
			l.pending[l.npend] = ev.Slot
			l.npend++
		} else {
			l.overflow = true
		}
	} else {
		e.deviceAllocs++
		e.deviceNS += ns
		if l := &d.led; l.freshSize == b.Size && l.freshAddr == b.Addr {
			// The block fills the region made for it (the last one
			// made, the only one with no record): the region needs no
			// record while the block lives (see free).
			l.freshSize = 0
			s.span = spanOwn
		} else {
			s.span = d.holdBlock(b.Addr, b.End(), b.Size)
		}
	}
	e.allocated += b.Size
	e.peakAlloc = max(e.peakAlloc, e.allocated)
	d.requested += ev.Size
	d.allocated += b.Size
	d.peakReq = max(d.peakReq, d.requested)
	d.peakAlloc = max(d.peakAlloc, d.allocated)
	return d, nil
}

func (e *engine) free(ev *traces.Event) (*device, error) {
	if ev.Slot < 0 || int(ev.Slot) >= len(e.slots) {
		return nil, fmt.Errorf("free of slot %d, which holds no allocation", ev.Slot)
	}
	s := &e.slots[ev.Slot]
	if s.state != slotLive {
		return e.freeOther(ev, s)
	}
	d := e.devs[s.dev]
	if ev.Size != s.size {
		return d, fmt.Errorf("free of %d bytes, allocated with %d", ev.Size, s.size)
	}
	// A block counted in the ledger leaves it first (see device.unledger);
	// a block still pending was never counted; the region of a block that
	// fills it is noted, for the device free that may follow. The slot is
	// free before the strategy's Free, so that a split inside it does not
	// count the block.
	if sp := s.span; sp != spanPending {
		if sp == spanOwn {
			d.led.own, d.led.owning = s.block.Addr, true
		} else {
			d.unledger(s)
		}
	}
	s.state = slotFree // the rest is overwritten by the next alloc of the slot
	if err := d.alloc.Free(s.block); err != nil {
		return d, err
	}
	if d.led.owning {
		// The strategy kept the region the block filled (a device free
		// of it ends owning: see regionFreed).
		d.ownFreed(s.block.Addr, s.block.Size)
	}
	e.unserve(d, s)
	return d, nil
}

// freeOther is free for a slot that holds no block of the strategy: an
// error for a free slot; the end of an allocation that failed for out of
// memory; the free of a block of a private pool, which goes back to the
// pool, which keeps its memory: the strategy never had it.
func (e *engine) freeOther(ev *traces.Event, s *slot) (*device, error) {
	d := e.devs[s.dev]
	switch s.state {
	case slotFree:
		return nil, fmt.Errorf("free of slot %d, which holds no allocation", ev.Slot)
	case slotFailed:
		e.requested -= s.size
		e.live--
		e.res.Frees++
		d.frees++
		d.lower -= s.size
		*s = slot{}
		return nil, nil
	}
	if ev.Size != s.size {
		return d, fmt.Errorf("free of %d bytes, allocated with %d", ev.Size, s.size)
	}
	if s.span != spanPending {
		d.unledger(s)
	}
	s.state = slotFree
	e.unserve(d, s)
	return d, nil
}

// unserve counts the free of the block of slot s, on device d.
func (e *engine) unserve(d *device, s *slot) {
	e.res.Frees++
	e.live--
	d.frees++
	d.okFrees++
	e.requested -= s.size
	e.allocated -= s.block.Size
	d.lower -= s.size
	d.requested -= s.size
	d.allocated -= s.block.Size
}

// release empties the cache of the allocator of the event's device, when
// it is a gpualloc.Releaser; a device the trace has not used yet holds
// nothing to release.
func (e *engine) release(ev *traces.Event) (*device, error) {
	e.res.Releases++
	i := int(ev.Device)
	if uint(i) >= uint(len(e.devs)) || e.devs[i] == nil {
		return nil, nil
	}
	d := e.devs[i]
	d.releases++
	if r, ok := d.alloc.(gpualloc.Releaser); ok {
		return d, r.ReleaseAll()
	}
	return d, nil
}

func (e *engine) growSlots(i int) {
	n := max(i+1, 2*len(e.slots), 64)
	e.slots = append(e.slots, make([]slot, n-len(e.slots))...)
}

// eventError describes the failure of event n.
func (e *engine) eventError(n int64, ev traces.Event, err error) error {
	var so *startOOM
	if errors.As(err, &so) {
		return fmt.Errorf("%s%w", e.prefix(), so)
	}
	return fmt.Errorf("%sevent %d: %s of %d bytes (id %d, device %d): %w",
		e.prefix(), n, ev.Op, ev.Size, ev.ID, ev.Device, err)
}

// prefix returns "TRACE: STRATEGY: " for errors, without the parts that are
// unknown.
func (e *engine) prefix() string {
	return jobPrefix(Config{Trace: e.cfg.Trace, Strategy: e.strategy})
}

// takeFreeSpace notes the free space of every device, at a new peak of
// reserved memory.
func (e *engine) takeFreeSpace() {
	e.peakSeen = e.peakRes
	e.freeKnown, e.largestFree, e.freeSize = true, 0, 0
	for _, d := range e.devs {
		if d == nil {
			continue
		}
		if d.free == nil {
			e.freeKnown = false
			return
		}
		largest, total := d.free.FreeSpace()
		e.largestFree = max(e.largestFree, largest)
		e.freeSize += total
	}
}

// close closes every device's allocator and backend that are io.Closers.
func (e *engine) close() error {
	var errs []error
	for _, d := range e.devs {
		if d == nil {
			continue
		}
		if c, ok := d.alloc.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("device %d: closing the allocator: %w", d.index, err))
			}
		}
		if c, ok := d.backend.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("device %d: closing the backend: %w", d.index, err))
			}
		}
	}
	return errors.Join(errs...)
}
