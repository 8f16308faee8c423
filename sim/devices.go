package sim

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// PerDevice returns r followed, for a trace of several devices, by one
// Result per device (r.Devices), its Device set: the figures of that device
// alone, the lower bound first (PeakRequestedBytes is the peak of the
// device's live requested bytes). Overhead and Fragmentation are the
// device's; ElapsedNS is the whole replay's, which the devices shared, and
// EventsPerSec the device's events over it; MidRun is the trace's. What
// the replay measures only for all devices together is left out of a
// device's Result: the free space at peak, the timings and the skipped
// events (nil or 0). A trace of one device gives r alone: its figures are
// that device's.
func (r Result) PerDevice() []Result {
	out := []Result{r}
	if len(r.Devices) < 2 {
		return out
	}
	for _, d := range r.Devices {
		dr := Result{
			Trace: r.Trace, Strategy: r.Strategy, Backend: r.Backend, CapacityBytes: r.CapacityBytes,
			Events: d.Allocs + d.Frees + d.Releases, Allocs: d.Allocs, Frees: d.Frees, Releases: d.Releases,
			PeakRequestedBytes: d.PeakRequestedBytes, PeakAllocatedBytes: d.PeakAllocatedBytes, PeakReservedBytes: d.PeakReservedBytes,
			AtPeakLiveBytes: d.AtPeakLiveBytes, AtPeakRoundingBytes: d.AtPeakRoundingBytes,
			AtPeakFragmentedBytes: d.AtPeakFragmentedBytes, AtPeakCachedBytes: d.AtPeakCachedBytes,
			Overhead:      ratio(d.PeakReservedBytes, d.PeakRequestedBytes),
			DeviceMallocs: d.DeviceMallocs, DeviceFrees: d.DeviceFrees, DeviceMallocBytes: d.DeviceMallocBytes,
			DeviceMaps: d.DeviceMaps, DeviceUnmaps: d.DeviceUnmaps, DeviceTimeNSEst: d.DeviceTimeNSEst,
			StartReservedBytes: d.StartReservedBytes, StartSegments: d.StartSegments,
			CacheHits: d.CacheHits, OOMs: d.OOMs, DeviceFullAllocs: d.DeviceFullAllocs,
			LiveAtEnd: d.LiveAtEnd, LiveBytesAtEnd: d.RequestedBytes,
			ElapsedNS:        r.ElapsedNS,
			OfflineBytes:     d.OfflineBytes,
			MinCapacityBytes: d.MinCapacityBytes,
			Devices:          []DeviceResult{d},
			MidRun:           r.MidRun,
		}
		index := d.Device
		dr.Device = &index
		if d.PeakReservedBytes > 0 {
			dr.Fragmentation = 1 - ratio(d.PeakRequestedBytes, d.PeakReservedBytes)
		}
		if r.ElapsedNS > 0 {
			dr.EventsPerSec = float64(dr.Events) / (float64(r.ElapsedNS) / 1e9)
		}
		out = append(out, dr)
	}
	return out
}

// A CapacityReporter is a reader that knows the memory of the devices its
// trace was recorded on, such as the reader of a PyTorch snapshot that
// records an out-of-memory error (package traces): a replay that is given
// no capacity gives each device its DeviceCapacity, which is 0 when the
// reader does not know it. A reader that wraps another passes it on.
type CapacityReporter interface {
	DeviceCapacity(device int) int64
}

// deviceCapacity returns the capacity of the virtual device of index i:
// Config.Capacity; without it, the device's memory as the trace tells it
// (a PyTorch snapshot that records an out-of-memory error, see
// CapacityReporter), which the Result then reports (the largest, for
// several devices), else virtual.DefaultCapacity.
func (e *engine) deviceCapacity(i int) int64 {
	if e.memory == nil {
		return e.cfg.Capacity
	}
	c := e.memory.DeviceCapacity(i)
	if c <= 0 {
		return e.cfg.Capacity
	}
	if !e.hinted || c > e.res.CapacityBytes {
		e.res.CapacityBytes = c
	}
	e.hinted = true
	return c
}

// deviceMemory notes the memory of device dev, the total its backend
// reports, in the snapshot's allocator_settings, as "device_memory": a list
// indexed by device (0 for an index the trace does not use). PyTorch's
// snapshots do not record it; a replay of the snapshot takes its devices'
// capacity from it (see snapshot.AllocatorSettings.DeviceMemory).
func (r *snapRecorder) deviceMemory(dev int, b gpualloc.Backend) {
	if r.settings == nil {
		return
	}
	_, total := b.MemInfo()
	mem, _ := r.settings.Other[snapshot.DeviceMemoryKey].([]any)
	for len(mem) <= dev {
		mem = append(mem, int64(0))
	}
	mem[dev] = total
	if r.settings.Other == nil {
		r.settings.Other = map[string]any{}
	}
	r.settings.Other[snapshot.DeviceMemoryKey] = mem
}

// WithDevices returns results with, after each result of a trace of several
// devices, one Result per device ([Result.PerDevice]): the rows simulate
// and a report's summaries show. A trace of one device keeps its one row.
func WithDevices(results []Result) []Result {
	var out []Result
	for _, r := range results {
		out = append(out, r.PerDevice()...)
	}
	return out
}
