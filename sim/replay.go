package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/pytorch/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// Config says how to replay a trace. The zero value of every field but the
// strategy (Params or Open) has a documented default.
type Config struct {
	// Trace is the trace's name, reported in Result.Trace and at the start
	// of errors. If empty, the name comes from the reader's Name method when
	// it has one.
	Trace string

	// Params is the strategy, every parameter resolved (see
	// [gpualloc.Resolve] and [gpualloc.Select]). Each device's allocator is
	// Params.Open(backend), and Result.Strategy is Params.String().
	Params *gpualloc.Params
	// Open, if not nil, builds each device's allocator instead of
	// Params.Open: for a strategy that is not registered.
	Open func(b gpualloc.Backend) (gpualloc.Allocator, error)
	// Strategy, if not empty, is reported in Result.Strategy instead of
	// Params.String() (or of the allocator's Spec method, when only Open is
	// given).
	Strategy string

	// Backend is the backend's name reported in Result.Backend; "" means
	// "sim".
	Backend string
	// Capacity is the size of each virtual device, and the capacity
	// reported; 0 means the device's memory where the reader knows it (a
	// traces.CapacityReporter), else [virtual.DefaultCapacity] (80 GiB). With
	// NewBackend and Capacity 0, the capacity reported is the total that
	// the first device's MemInfo gives.
	Capacity int64
	// NewBackend, if not nil, makes the backend of each device index that
	// the trace uses, when the device is first used. The default makes a
	// [virtual.Device] of Capacity bytes. After the replay, the engine closes each
	// device's allocator and then its backend if they implement io.Closer.
	NewBackend func(device int) (gpualloc.Backend, error)

	// SeriesBuckets bounds Result.Series: 0 means [DefaultSeriesBuckets],
	// a negative number means no series.
	SeriesBuckets int

	// Verify, when the allocator reports gpualloc.Stats, compares them with
	// what the engine measured after every event and at the end, and fails
	// the replay at the first difference: a check for strategy authors.
	Verify bool

	// MeasureTime times the replay's calls: each alloc of the allocator and
	// each Malloc and Free of the backend, for Result.AllocHitNSMean,
	// AllocDeviceNSMean and DeviceCallNSTotal. It is for real backends,
	// whose calls cost what the hardware makes them cost; on the virtual
	// device it measures the simulator. Off, the replay reads no clock per
	// event and those fields are nil.
	MeasureTime bool

	// Progress, if not nil, is called with the number of events replayed so
	// far every ProgressInterval events and once at the end, from the
	// goroutine running the replay.
	Progress func(events int64)

	// Snapshot, if not nil, records what the strategy did as a PyTorch
	// memory snapshot, which it is given at the end of a replay that
	// succeeded (from the goroutine running the replay); its error becomes
	// the replay's. The recording wraps the trace's reader (which then
	// hands the replay its events one at a time, noting each one's time),
	// each device's allocator and the backend the allocator is given: off,
	// the replay runs exactly as without it.
	Snapshot func(*snapshot.Snapshot) error
	// SnapshotEntries, if positive, keeps only the last SnapshotEntries
	// trace entries of each device in the snapshot, as PyTorch's
	// _record_memory_history(max_entries=N) does; the segments are still
	// those after the last event.
	SnapshotEntries int
}

// ProgressInterval is how many events pass between calls of
// Config.Progress; the context of [ReplayContext] is checked as often.
const ProgressInterval = 1 << 16

// Result is what a replay measured: one row of the simulator's output. The
// JSON field names are those of the result schema of the command line tool.
//
// Counts: Events = Allocs + Frees + Releases, the trace's events by kind.
// An alloc that failed with out of memory counts in Allocs and OOMs; the
// free of that allocation is skipped but still counts in Frees.
type Result struct {
	Trace         string `json:"trace"`
	Strategy      string `json:"strategy"` // full spec, every parameter's effective value
	Backend       string `json:"backend"`
	CapacityBytes int64  `json:"capacity_bytes"`
	// Device, when not nil, is the index of the one device whose figures
	// the Result holds (see [Result.PerDevice]); nil, the figures are the
	// trace's, summed over its devices.
	Device *int `json:"device,omitempty"`

	Events int64 `json:"events"`
	Allocs int64 `json:"allocs"`
	Frees  int64 `json:"frees"`
	// Releases counts the trace's release events (the program emptied
	// the allocator's cache); each calls the device's allocator's
	// ReleaseAll when it is a gpualloc.Releaser.
	Releases int64 `json:"releases"`

	// Peaks, over the replay, of the sums across devices of: the bytes
	// asked for by live allocations (the lower bound any strategy needs);
	// the bytes of the blocks handed out for them; the bytes held from the
	// devices.
	PeakRequestedBytes int64 `json:"peak_requested_bytes"`
	PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64 `json:"peak_reserved_bytes"`

	// Overhead is PeakReservedBytes / PeakRequestedBytes, Fragmentation
	// 1 - PeakRequestedBytes / PeakReservedBytes; each is 0 when its
	// denominator is. After out-of-memory failures the reserved peak can
	// stay below the lower bound: Overhead is then below 1 and
	// Fragmentation negative, and OOMs says why.
	Overhead      float64 `json:"overhead"`
	Fragmentation float64 `json:"fragmentation"`

	// Device allocations are the backend's Malloc calls and, on a
	// gpualloc.VirtualMemory backend, its Create calls of physical memory;
	// device frees its Free and Release calls. DeviceMaps and DeviceUnmaps
	// count the Map and Unmap calls of a VirtualMemory backend (0 for the
	// strategies that do not use it).
	DeviceMallocs     int64 `json:"device_mallocs"`      // successful device allocations
	DeviceFrees       int64 `json:"device_frees"`        // successful device frees
	DeviceMallocBytes int64 `json:"device_malloc_bytes"` // bytes of all successful device allocations
	DeviceMaps        int64 `json:"device_maps"`         // successful Map calls
	DeviceUnmaps      int64 `json:"device_unmaps"`       // successful Unmap calls

	CacheHits int64 `json:"cache_hits"` // successful allocs during which no device allocation succeeded
	OOMs      int64 `json:"ooms"`       // allocs that failed with gpualloc.ErrOutOfMemory

	// DeviceFullAllocs counts the allocs during which the device refused
	// memory (a Malloc or Create failed with out of memory) or the
	// strategy gave memory back to the device (MXNet's reserve rule, a
	// release and retry, PyTorch's garbage collection): the strategy met
	// the device's capacity, and its figures change with it. When it is 0
	// the replay never touched the capacity (a strategy that sizes its
	// blocks from the device's free memory, as dualcursor with block=0
	// does, depends on it all the same).
	DeviceFullAllocs int64 `json:"device_full_allocs"`

	// LiveAtEnd and LiveBytesAtEnd are the allocations of the trace still
	// live after its last event, and their requested bytes: a leak, or a
	// trace that ended in the middle of a step.
	LiveAtEnd      int64 `json:"live_at_end"`
	LiveBytesAtEnd int64 `json:"live_bytes_at_end"`

	ElapsedNS    int64   `json:"elapsed_ns"`     // time of the replay loop, reading the trace included
	EventsPerSec float64 `json:"events_per_sec"` // Events per second of ElapsedNS

	// LargestFreeBytes and FreeFragmentation describe the strategy's free
	// space (free blocks inside reserved memory) just after the event at
	// which reserved memory reached its peak: the largest free block (the
	// largest over devices) and 1 - largest / total free bytes, RMM's and
	// TensorFlow's fragmentation (0 when the free space is one block or
	// none). They are nil (null in JSON, empty in CSV) for strategies that
	// do not implement gpualloc.FreeSpaceReporter.
	LargestFreeBytes  *int64   `json:"largest_free_bytes"`
	FreeFragmentation *float64 `json:"free_fragmentation"`

	// Skipped is the number of bad events a lenient reader skipped, when
	// the reader has a Skipped() int64 method.
	Skipped int64 `json:"skipped"`

	// Timings, when Config.MeasureTime is set (else nil, null in JSON,
	// empty in CSV), in nanoseconds of wall-clock time: the mean time of a
	// successful alloc served from the strategy's cache (no device
	// allocation during it: the CacheHits), the mean time of a successful
	// alloc during which the device allocated (its device calls included),
	// each 0 when there was no such alloc, and the total time spent in the
	// backend's calls (Malloc and Free, and those of a
	// gpualloc.VirtualMemory), failed ones included.
	AllocHitNSMean    *float64 `json:"alloc_hit_ns_mean"`
	AllocDeviceNSMean *float64 `json:"alloc_device_ns_mean"`
	DeviceCallNSTotal *int64   `json:"device_call_ns_total"`

	// OfflineBytes is the memory of the offline placement of the trace's
	// allocations (package plan: every lifetime known in advance; the sum
	// over devices), the same for every strategy on a trace; nil (null in
	// JSON, empty in CSV) unless it was asked for (simulate --offline).
	// The engine does not compute it.
	OfflineBytes *int64 `json:"offline_bytes"`
	// MinCapacityBytes is the smallest device capacity, a multiple of 1
	// MiB, on which the strategy replays the trace without an OOM, with one
	// 1 MiB below (simulate --min-capacity); nil unless asked for, and on a
	// device's row (the capacity is that of every device of the replay).
	// The engine does not compute it.
	MinCapacityBytes *int64 `json:"min_capacity_bytes"`

	// Devices breaks the figures down by device index, in increasing order
	// of index, for the devices the trace used.
	Devices []DeviceResult `json:"-"`
	// Series is the course of requested, allocated and reserved bytes over
	// the replay; nil when Config.SeriesBuckets is negative.
	Series *Series `json:"-"`
}

// DeviceResult is the part of a [Result] that belongs to one device. Its
// fields mean what the Result's fields of the same names mean, for this
// device alone; Allocs and Frees count the events of the device's
// allocations. PeakRequestedBytes and RequestedBytes are the trace's, as the
// Result's are: an allocation that failed with out of memory counts until
// its free, so the device's lower bound is the same for every strategy (the
// allocator's own Stats count only what it served).
type DeviceResult struct {
	Device int // device index

	// OfflineBytes is the offline plan of the device's allocations, when
	// the Result has one (see Result.OfflineBytes).
	OfflineBytes *int64

	Allocs    int64
	Frees     int64
	CacheHits int64
	OOMs      int64

	PeakRequestedBytes int64
	PeakAllocatedBytes int64
	PeakReservedBytes  int64

	DeviceMallocs     int64
	DeviceFrees       int64
	DeviceMallocBytes int64
	DeviceMaps        int64
	DeviceUnmaps      int64

	// DeviceFullAllocs and Releases count the device's allocs that met its
	// capacity and the releases of its cache (see Result's).
	DeviceFullAllocs int64
	Releases         int64

	// Live figures at the end of the replay: LiveAtEnd allocations of the
	// trace not freed (failed ones included, as in RequestedBytes).
	LiveAtEnd      int64
	RequestedBytes int64
	AllocatedBytes int64
	ReservedBytes  int64

	// Stats are the allocator's own counters at the end, nil if it keeps
	// none (see [gpualloc.StatsReporter]).
	Stats *gpualloc.Stats
}

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
)

// A slot is the engine's record of one live allocation, at index Event.Slot.
// It holds no pointers, so that writing one costs no write barrier and the
// slots are no work for the garbage collector.
type slot struct {
	block gpualloc.Block
	size  int64 // bytes requested by the event
	dev   int32 // device index, in engine.devs
	state uint8
}

// An engine is the state of one replay.
type engine struct {
	cfg      Config
	devs     []*device // by device index; nil where not used yet
	slots    []slot
	series   *Series
	strategy string // short name for errors

	memory traces.CapacityReporter // the trace's devices' memory, with no Config.Capacity
	hinted bool                    // a device took its capacity from memory

	// Sums over devices.
	requested, allocated, reserved int64
	peakReq, peakAlloc, peakRes    int64
	resLo, resHi                   int64 // extremes of reserved during the current event
	mallocs, frees                 int64 // device allocations and frees
	refused                        bool  // a device allocation failed with out of memory
	live                           int64 // the trace's live allocations

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

// A device is one device of the trace: its allocator, and the counting
// wrapper around its backend that the allocator is given.
type device struct {
	e       *engine
	index   int
	backend gpualloc.Backend
	alloc   gpualloc.Allocator
	stream  gpualloc.StreamAllocator
	cat     gpualloc.CategoryAllocator
	stats   gpualloc.StatsReporter
	free    gpualloc.FreeSpaceReporter

	requested, allocated, reserved int64 // of the blocks served
	peakReq, peakAlloc, peakRes    int64
	lower, peakLower               int64 // live requested bytes of the trace, failed allocations included
	allocs, frees                  int64 // events
	okAllocs, okFrees              int64 // successful calls
	hits, ooms                     int64
	fullAllocs, releases           int64
	mallocs, mfrees, mallocBytes   int64
	maps, unmaps                   int64
	callNS                         int64 // time in backend calls, with Config.MeasureTime
}

// Malloc, Free and MemInfo make a device the counting wrapper of its
// backend.

func (d *device) Malloc(size int64) (uint64, error) {
	if d.e.measure {
		return d.timedMalloc(size)
	}
	addr, err := d.backend.Malloc(size)
	return d.malloced(addr, size, err)
}

func (d *device) timedMalloc(size int64) (uint64, error) {
	t0 := time.Now()
	addr, err := d.backend.Malloc(size)
	d.callNS += int64(time.Since(t0))
	return d.malloced(addr, size, err)
}

// malloced counts a Malloc of the backend.
func (d *device) malloced(addr uint64, size int64, err error) (uint64, error) {
	if err != nil {
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			d.e.refused = true
		}
		return addr, err
	}
	d.mallocs++
	d.mallocBytes += size
	d.reserved += size
	d.peakRes = max(d.peakRes, d.reserved)
	e := d.e
	e.mallocs++
	e.reserved += size
	e.peakRes = max(e.peakRes, e.reserved)
	e.resHi = max(e.resHi, e.reserved)
	return addr, nil
}

func (d *device) Free(addr uint64, size int64) error {
	var err error
	if d.e.measure {
		t0 := time.Now()
		err = d.backend.Free(addr, size)
		d.callNS += int64(time.Since(t0))
	} else {
		err = d.backend.Free(addr, size)
	}
	if err != nil {
		return err
	}
	d.freed(size)
	return nil
}

// freed counts a device free of size bytes.
func (d *device) freed(size int64) {
	d.mfrees++
	d.reserved -= size
	e := d.e
	e.frees++
	e.reserved -= size
	e.resLo = min(e.resLo, e.reserved)
}

func (d *device) MemInfo() (free, total int64) { return d.backend.MemInfo() }

// A vmDevice is the counting wrapper of a backend that is a
// gpualloc.VirtualMemory: the allocator is given one in place of the
// device, so that it finds the interface only when the backend has it.
// Physical memory counts as reserved memory from Create to Release, a
// Create as a device allocation and a Release as a device free; Map and
// Unmap are counted apart. Reserve and Unreserve hold no memory and are
// not counted.
type vmDevice struct {
	*device
	vm    gpualloc.VirtualMemory
	sizes map[uint64]int64 // live physical memory: handle -> bytes
}

func (v *vmDevice) Granularity() int64 { return v.vm.Granularity() }

// timed runs f, timing it with Config.MeasureTime.
func (v *vmDevice) timed(f func() error) error {
	if !v.e.measure {
		return f()
	}
	t0 := time.Now()
	err := f()
	v.callNS += int64(time.Since(t0))
	return err
}

func (v *vmDevice) Reserve(size int64) (addr uint64, err error) {
	err = v.timed(func() (err error) { addr, err = v.vm.Reserve(size); return err })
	return addr, err
}

func (v *vmDevice) Unreserve(addr uint64, size int64) error {
	return v.timed(func() error { return v.vm.Unreserve(addr, size) })
}

func (v *vmDevice) Create(size int64) (h uint64, err error) {
	err = v.timed(func() (err error) { h, err = v.vm.Create(size); return err })
	if err == nil {
		v.sizes[h] = size
	}
	_, err = v.malloced(0, size, err)
	return h, err
}

func (v *vmDevice) Release(h uint64) error {
	if err := v.timed(func() error { return v.vm.Release(h) }); err != nil {
		return err
	}
	v.freed(v.sizes[h])
	delete(v.sizes, h)
	return nil
}

func (v *vmDevice) Map(addr uint64, h uint64) error {
	err := v.timed(func() error { return v.vm.Map(addr, h) })
	if err == nil {
		v.maps++
	}
	return err
}

func (v *vmDevice) Unmap(addr uint64, size int64) error {
	err := v.timed(func() error { return v.vm.Unmap(addr, size) })
	if err == nil {
		v.unmaps++
	}
	return err
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
	e := &engine{cfg: cfg, measure: cfg.MeasureTime}
	e.res.Trace = cfg.Trace
	e.res.Backend = cfg.Backend
	if e.res.Backend == "" {
		e.res.Backend = "sim"
	}
	switch {
	case cfg.Strategy != "":
		e.res.Strategy = cfg.Strategy
	case cfg.Params != nil:
		e.res.Strategy = cfg.Params.String()
	}
	e.strategy, _, _ = strings.Cut(e.res.Strategy, ":")
	e.res.CapacityBytes = cfg.Capacity
	if cfg.NewBackend == nil && cfg.Capacity == 0 {
		e.res.CapacityBytes = virtual.DefaultCapacity
		e.memory, _ = r.(traces.CapacityReporter)
	}
	if cfg.SeriesBuckets >= 0 {
		n := cfg.SeriesBuckets
		if n == 0 {
			n = DefaultSeriesBuckets
		}
		e.series = newSeries(n)
		e.res.Series = e.series
	}
	if cfg.Snapshot != nil {
		e.rec = newSnapRecorder(cfg.SnapshotEntries)
	}
	return e, nil
}

// run is the replay loop. It allocates nothing per event once the slots and
// devices it needs exist. A reader that is a [traces.BatchReader] (events
// in memory) is read a batch at a time, in place; any other is read ahead
// on a goroutine of its own (see prefetch), which the loop then reads the
// same way.
func (e *engine) run(ctx context.Context, r traces.Reader) (err error) {
	done := ctx.Done()
	progress := e.cfg.Progress
	var n int64
	start := time.Now()
	defer func() {
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
		for i := range batch {
			if err := e.step(&batch[i], n); err != nil {
				return err
			}
			n++
			if n%ProgressInterval == 0 {
				select {
				case <-done:
					return ctx.Err()
				default:
				}
				if progress != nil {
					progress(n)
				}
			}
		}
	}
	return br.Err()
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
	if err == nil && e.cfg.Verify && d != nil {
		err = d.verify()
	}
	if err != nil {
		return e.eventError(n, *ev, err)
	}
	if e.series != nil {
		e.series.add(n, ev.TimeUS, e.requested, e.allocated, e.resLo, e.resHi, e.reserved)
	}
	if e.peakRes != e.peakSeen {
		e.takeFreeSpace()
	}
	return nil
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
			*s = slot{size: ev.Size, dev: ev.Device, state: slotFailed}
			return d, nil
		}
		return d, err
	}
	if b.Size < ev.Size {
		return d, fmt.Errorf("block of %d bytes at %#x handed out for %d bytes", b.Size, b.Addr, ev.Size)
	}
	// Field by field: a composite literal would build the slot aside and
	// copy it, on the hottest line of the replay.
	s.block, s.size, s.dev, s.state = b, ev.Size, ev.Device, slotLive
	d.okAllocs++
	if e.mallocs == before {
		e.res.CacheHits++
		d.hits++
		e.hitNS += ns
	} else {
		e.deviceAllocs++
		e.deviceNS += ns
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
	switch s.state {
	case slotFree:
		return nil, fmt.Errorf("free of slot %d, which holds no allocation", ev.Slot)
	case slotFailed:
		d := e.devs[s.dev]
		e.requested -= s.size
		e.live--
		e.res.Frees++
		d.frees++
		d.lower -= s.size
		*s = slot{}
		return nil, nil
	}
	d := e.devs[s.dev]
	if ev.Size != s.size {
		return d, fmt.Errorf("free of %d bytes, allocated with %d", ev.Size, s.size)
	}
	e.res.Frees++
	e.live--
	d.frees++
	if err := d.alloc.Free(s.block); err != nil {
		return d, err
	}
	d.okFrees++
	e.requested -= s.size
	e.allocated -= s.block.Size
	d.lower -= s.size
	d.requested -= s.size
	d.allocated -= s.block.Size
	s.state = slotFree // the rest is overwritten by the next alloc of the slot
	return d, nil
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

// device returns the device of index i, made on first use.
func (e *engine) device(i int32) (*device, error) {
	if i >= 0 && int(i) < len(e.devs) && e.devs[i] != nil {
		return e.devs[i], nil
	}
	if i < 0 || i > virtual.MaxIndex {
		return nil, fmt.Errorf("device index %d out of range [0, %d]", i, virtual.MaxIndex)
	}
	if int(i) >= len(e.devs) {
		e.devs = append(e.devs, make([]*device, int(i)+1-len(e.devs))...)
	}
	d := &device{e: e, index: int(i)}
	var err error
	if e.cfg.NewBackend != nil {
		d.backend, err = e.cfg.NewBackend(int(i))
	} else {
		d.backend, err = virtual.New(virtual.Options{Index: int(i), Capacity: e.deviceCapacity(int(i))})
	}
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", i, err)
	}
	if d.backend == nil {
		return nil, fmt.Errorf("device %d: no backend", i)
	}
	if e.res.CapacityBytes == 0 {
		_, e.res.CapacityBytes = d.backend.MemInfo()
	}
	var b gpualloc.Backend = d
	if vm, ok := d.backend.(gpualloc.VirtualMemory); ok {
		b = &vmDevice{device: d, vm: vm, sizes: make(map[uint64]int64)}
	}
	if e.rec != nil {
		b = e.rec.backend(d, b)
	}
	if e.cfg.Open != nil {
		d.alloc, err = e.cfg.Open(b)
	} else {
		d.alloc, err = e.cfg.Params.Open(b)
	}
	if err == nil && d.alloc == nil {
		err = errors.New("no allocator")
	}
	if err != nil {
		if c, ok := d.backend.(io.Closer); ok {
			c.Close()
		}
		return nil, fmt.Errorf("device %d: %w", i, err)
	}
	d.stream, _ = d.alloc.(gpualloc.StreamAllocator)
	d.cat, _ = d.alloc.(gpualloc.CategoryAllocator)
	d.stats, _ = d.alloc.(gpualloc.StatsReporter)
	d.free, _ = d.alloc.(gpualloc.FreeSpaceReporter)
	if e.res.Strategy == "" {
		if sp, ok := d.alloc.(gpualloc.Specer); ok {
			e.res.Strategy = sp.Spec()
			if e.strategy == "" {
				e.strategy, _, _ = strings.Cut(e.res.Strategy, ":")
			}
		}
	}
	if e.rec != nil {
		e.rec.open(d, e.res.Strategy)
		e.rec.deviceMemory(int(i), d.backend)
	}
	e.devs[i] = d
	return d, nil
}

// eventError describes the failure of event n.
func (e *engine) eventError(n int64, ev traces.Event, err error) error {
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

// finish fills in the Result's derived fields.
func (e *engine) finish(r traces.Reader) {
	res := &e.res
	res.PeakRequestedBytes = e.peakReq
	res.PeakAllocatedBytes = e.peakAlloc
	res.PeakReservedBytes = e.peakRes
	res.LiveAtEnd, res.LiveBytesAtEnd = e.live, e.requested
	res.Overhead = ratio(e.peakRes, e.peakReq)
	if e.peakRes > 0 {
		res.Fragmentation = 1 - ratio(e.peakReq, e.peakRes)
	}
	if sk, ok := r.(interface{ Skipped() int64 }); ok {
		res.Skipped = sk.Skipped()
	}
	if e.freeKnown {
		largest, frag := e.largestFree, 0.0
		if e.freeSize > 0 {
			frag = 1 - ratio(e.largestFree, e.freeSize)
		}
		res.LargestFreeBytes, res.FreeFragmentation = &largest, &frag
	}
	var callNS int64
	for _, d := range e.devs {
		if d == nil {
			continue
		}
		callNS += d.callNS
		res.DeviceMallocs += d.mallocs
		res.DeviceFrees += d.mfrees
		res.DeviceMallocBytes += d.mallocBytes
		res.DeviceMaps += d.maps
		res.DeviceUnmaps += d.unmaps
		dr := DeviceResult{
			Device: d.index,
			Allocs: d.allocs, Frees: d.frees, CacheHits: d.hits, OOMs: d.ooms,
			PeakRequestedBytes: d.peakLower, PeakAllocatedBytes: d.peakAlloc, PeakReservedBytes: d.peakRes,
			DeviceMallocs: d.mallocs, DeviceFrees: d.mfrees, DeviceMallocBytes: d.mallocBytes,
			DeviceMaps: d.maps, DeviceUnmaps: d.unmaps,
			DeviceFullAllocs: d.fullAllocs, Releases: d.releases, LiveAtEnd: d.allocs - d.frees,
			RequestedBytes: d.lower, AllocatedBytes: d.allocated, ReservedBytes: d.reserved,
		}
		if d.stats != nil {
			st := d.stats.Stats()
			dr.Stats = &st
		}
		res.Devices = append(res.Devices, dr)
	}
	if e.measure {
		hit, dev := 0.0, 0.0
		if res.CacheHits > 0 {
			hit = float64(e.hitNS) / float64(res.CacheHits)
		}
		if e.deviceAllocs > 0 {
			dev = float64(e.deviceNS) / float64(e.deviceAllocs)
		}
		res.AllocHitNSMean, res.AllocDeviceNSMean, res.DeviceCallNSTotal = &hit, &dev, &callNS
	}
}

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
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

// verify compares the allocator's own statistics with the engine's.
func (d *device) verify() error {
	if d.stats == nil {
		return nil
	}
	s := d.stats.Stats()
	for _, c := range [...]struct {
		name       string
		have, want int64
	}{
		{"Requested", s.Requested, d.requested},
		{"Allocated", s.Allocated, d.allocated},
		{"Reserved", s.Reserved, d.reserved},
		{"PeakRequested", s.PeakRequested, d.peakReq},
		{"PeakAllocated", s.PeakAllocated, d.peakAlloc},
		{"PeakReserved", s.PeakReserved, d.peakRes},
		{"Allocs", s.Allocs, d.okAllocs},
		{"Frees", s.Frees, d.okFrees},
		{"DeviceMallocs", s.DeviceMallocs, d.mallocs},
		{"DeviceFrees", s.DeviceFrees, d.mfrees},
		{"DeviceMallocBytes", s.DeviceMallocBytes, d.mallocBytes},
		{"DeviceMaps", s.DeviceMaps, d.maps},
		{"DeviceUnmaps", s.DeviceUnmaps, d.unmaps},
		{"CacheHits", s.CacheHits, d.hits},
		{"OOMs", s.OOMs, d.ooms},
	} {
		if c.have != c.want {
			return fmt.Errorf("allocator's Stats.%s is %d, the replay measured %d", c.name, c.have, c.want)
		}
	}
	return nil
}
