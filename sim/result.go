package sim

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/satsum"
	"github.com/gpualloc/gpualloc/traces"
)

// Result is what a replay measured: one row of the simulator's output. The
// JSON field names are those of the result schema of the command line tool.
//
// Counts: Events = Allocs + Frees + Releases, the trace's events by kind.
// An alloc that failed with out of memory counts in Allocs and OOMs; the
// free of that allocation is skipped but still counts in Frees.
type Result struct {
	Trace         string   `json:"trace"`
	Strategy      Strategy `json:"strategy"` // written as its full spec, every parameter's effective value
	Backend       string   `json:"backend"`
	CapacityBytes int64    `json:"capacity_bytes"`
	// SettingsFrom names the trace whose recorded allocator settings the
	// strategy replayed with, given no parameter of its own (see
	// traces.Start.Conf); "" when it replayed with its own.
	SettingsFrom string `json:"-"`
	// Release and ReleaseWhy are the release of PyTorch that recorded the
	// trace and what shows it, as its start state says
	// (traces.Start.Release); "" for a trace that says nothing of it.
	Release, ReleaseWhy string `json:"-"`
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

	// Where the memory goes: PeakReservedBytes split, at the first event
	// after which reserved memory was at its peak (the state after it),
	// into four parts that add up to it exactly:
	//
	//   - AtPeakLiveBytes, the bytes requested by the live allocations
	//     the strategy served;
	//   - AtPeakRoundingBytes, their rounding: the bytes of the blocks
	//     handed out for them less AtPeakLiveBytes;
	//   - AtPeakFragmentedBytes, the free bytes inside the device
	//     allocations (regions of the backend's Malloc, physical memory
	//     of a gpualloc.VirtualMemory, mapped wherever) that hold a live
	//     block: reserved less handed out less cached;
	//   - AtPeakCachedBytes, the bytes of the device allocations that hold
	//     no live block, which the strategy could give back whole.
	//
	// An allocation that failed with out of memory is in none of them
	// (PeakRequestedBytes counts it). When reserved memory reached its
	// peak only for a moment inside an event (a strategy took memory from
	// the device and gave some back within one call) and never stood at
	// it after one, the split is that of that moment, the device
	// allocation just made counted as cached. All four are 0 when
	// PeakReservedBytes is. A device allocation the engine did not see
	// made (none, with the strategies of this module) counts as
	// fragmented. A block that lies in no device allocation (pytorch's
	// expandable segments on a backend without virtual memory hand out
	// addresses of their own) is taken to fill allocations that hold no
	// other: as many of their bytes as it has stop counting as cached.
	AtPeakLiveBytes       int64 `json:"at_peak_live_bytes"`
	AtPeakRoundingBytes   int64 `json:"at_peak_rounding_bytes"`
	AtPeakFragmentedBytes int64 `json:"at_peak_fragmented_bytes"`
	AtPeakCachedBytes     int64 `json:"at_peak_cached_bytes"`

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
	DeviceMallocBytes int64 `json:"device_malloc_bytes"` // bytes of all successful device allocations; a sum past 2^63-1 stays at 2^63-1
	DeviceMaps        int64 `json:"device_maps"`         // successful Map calls
	DeviceUnmaps      int64 `json:"device_unmaps"`       // successful Unmap calls

	// StartReservedBytes and StartSegments are the memory held from the
	// devices when the trace began, for a trace that starts from a recorded
	// state (a PyTorch snapshot, see traces.Start): the bytes and the
	// device allocations of the restored segments, or of the allocations
	// that rebuilt the live blocks of that state. The device figures
	// above count only the calls made while the trace was replayed; peak
	// reserved bytes include the start. Both are 0 for other traces.
	StartReservedBytes int64 `json:"start_reserved_bytes"`
	StartSegments      int64 `json:"start_segments"`

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

	// MidRun says that the trace is a window of a running program (a
	// memory snapshot: see traces.FileReader's MidRun), so that what is
	// live at its end was in use, not leaked; set when the reader has a
	// MidRun() bool method that says so. Not in JSON.
	MidRun bool `json:"-"`

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

	// DeviceTimeNSEst is the estimated time, in nanoseconds, of the device
	// calls made while the trace was replayed (those that built a recorded
	// start state not counted) on the GPU whose costs Config.DeviceCosts
	// gives (devicecost.H200 by default): each Malloc, Free and virtual
	// memory call costed by its size, as measured on an idle device.
	DeviceTimeNSEst int64 `json:"device_time_ns_est"`

	// OfflineBytes is the memory of the offline placement of the trace's
	// allocations (package plan: every lifetime known in advance; the sum
	// over devices), the same for every strategy on a trace; nil (null in
	// JSON, empty in CSV) unless it was asked for (simulate --offline).
	// The engine does not compute it; package mincap searches it.
	OfflineBytes *int64 `json:"offline_bytes"`
	// MinCapacityBytes is the smallest device capacity, a multiple of 1
	// MiB, on which the strategy replays the trace without an OOM, with one
	// 1 MiB below (simulate --min-capacity), every device of the replay of
	// that capacity, from the recorded state and with the recorded
	// settings that the replay follows; on a device's row, that device's
	// own (see DeviceResult.MinCapacityBytes). Nil unless asked for. The
	// engine does not compute it; package mincap searches it.
	MinCapacityBytes *int64 `json:"min_capacity_bytes"`
	// Refused is why the strategy refused its parameters, in the words of
	// its error, for a variant of a sweep that was not replayed (a
	// release of PyTorch that does not have a setting given to every
	// release swept); its figures are then all zero. "" for a replay,
	// and an empty cell in CSV.
	Refused string `json:"refused,omitempty"`

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
	// MinCapacityBytes is the smallest capacity of this device, a multiple
	// of 1 MiB, on which it has no OOM, with one 1 MiB below, the other
	// devices of the capacity the replay gave them, when the Result has
	// one (see Result.MinCapacityBytes): never a sum over devices.
	MinCapacityBytes *int64

	Allocs    int64
	Frees     int64
	CacheHits int64
	OOMs      int64

	PeakRequestedBytes int64
	PeakAllocatedBytes int64
	PeakReservedBytes  int64

	// The split of the device's PeakReservedBytes at its own peak (see
	// Result.AtPeakLiveBytes).
	AtPeakLiveBytes       int64
	AtPeakRoundingBytes   int64
	AtPeakFragmentedBytes int64
	AtPeakCachedBytes     int64

	DeviceMallocs     int64
	DeviceFrees       int64
	DeviceMallocBytes int64
	DeviceMaps        int64
	DeviceUnmaps      int64
	DeviceTimeNSEst   int64

	// StartReservedBytes and StartSegments: see Result's.
	StartReservedBytes int64
	StartSegments      int64

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

// finish fills in the Result's derived fields.
func (e *engine) finish(r traces.Reader) {
	res := &e.res
	res.PeakRequestedBytes = e.peakReq
	res.PeakAllocatedBytes = e.peakAlloc
	res.PeakReservedBytes = e.peakRes
	res.AtPeakLiveBytes, res.AtPeakRoundingBytes = e.split.live, e.split.rounding
	res.AtPeakFragmentedBytes, res.AtPeakCachedBytes = e.split.fragmented, e.split.cached
	res.LiveAtEnd, res.LiveBytesAtEnd = e.live, e.requested
	res.Overhead = ratio(e.peakRes, e.peakReq)
	if e.peakRes > 0 {
		res.Fragmentation = 1 - ratio(e.peakReq, e.peakRes)
	}
	if sk, ok := r.(interface{ Skipped() int64 }); ok {
		res.Skipped = sk.Skipped()
	}
	if m, ok := r.(interface{ MidRun() bool }); ok {
		res.MidRun = m.MidRun()
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
		est := d.calls.Estimate(e.costs) - d.startCalls.Estimate(e.costs)
		res.DeviceTimeNSEst += est
		mallocs, frees, mallocBytes := d.mallocs-d.startSegs, d.mfrees-d.startFrees, d.mallocBytes-d.startMallocBytes
		res.DeviceMallocs += mallocs
		res.DeviceFrees += frees
		res.DeviceMallocBytes = satsum.Add(res.DeviceMallocBytes, mallocBytes)
		res.StartReservedBytes += d.startBytes
		res.StartSegments += d.startSegs - d.startFrees
		res.DeviceMaps += d.maps
		res.DeviceUnmaps += d.unmaps
		dr := DeviceResult{
			Device: d.index,
			Allocs: d.allocs, Frees: d.frees, CacheHits: d.hits, OOMs: d.ooms,
			PeakRequestedBytes: d.peakLower, PeakAllocatedBytes: d.peakAlloc, PeakReservedBytes: d.peakRes,
			AtPeakLiveBytes: d.split.live, AtPeakRoundingBytes: d.split.rounding,
			AtPeakFragmentedBytes: d.split.fragmented, AtPeakCachedBytes: d.split.cached,
			DeviceMallocs: mallocs, DeviceFrees: frees, DeviceMallocBytes: mallocBytes,
			DeviceMaps: d.maps, DeviceUnmaps: d.unmaps, DeviceTimeNSEst: est,
			StartReservedBytes: d.startBytes, StartSegments: d.startSegs - d.startFrees,
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
