package sim

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/devicecost"
	"github.com/gpualloc/gpualloc/internal/satsum"
)

// A device is one device of the trace: its allocator, and the counting
// wrapper around its backend that the allocator is given.
type device struct {
	e       *engine
	index   int
	backend gpualloc.Backend
	given   gpualloc.Backend // what the allocator was given: d, or a wrapper of it
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
	// The device's part of the trace's plan (see start.go), and the
	// device calls made to build its start state (see endStart).
	devStart
	startSegs, startFrees        int64
	startMallocBytes, startBytes int64
	callNS                       int64            // time in backend calls, with Config.MeasureTime
	measure                      bool             // Config.MeasureTime, here for the device calls
	calls, startCalls            devicecost.Tally // the device calls, and those that built the start state, for Result.DeviceTimeNSEst

	// Where the memory goes (see ledger): the device's allocations, and
	// the split of its reserved bytes at its peak; splitAfter is set once
	// the split is that of the state after an event at the peak, not of a
	// moment inside one.
	led        ledger
	split      split
	splitAfter bool
}

// Malloc, Free and MemInfo make a device the counting wrapper of its
// backend.

func (d *device) Malloc(size int64) (uint64, error) {
	if d.measure {
		return d.timedMalloc(size)
	}
	addr, err := d.backend.Malloc(size)
	if err == nil {
		d.region(addr, size)
		d.count(devicecost.Malloc, size)
	}
	return d.malloced(addr, size, err)
}

// count counts a device call for the estimate of its time (those that
// built the start state are taken off at the end: see endStart).
func (d *device) count(c devicecost.Call, size int64) { d.calls.Add(c, size) }

func (d *device) timedMalloc(size int64) (uint64, error) {
	t0 := time.Now()
	addr, err := d.backend.Malloc(size)
	d.callNS += int64(time.Since(t0))
	if err == nil {
		d.region(addr, size)
		d.count(devicecost.Malloc, size)
	}
	return d.malloced(addr, size, err)
}

// malloced counts a Malloc of the backend: a device allocation, and
// memory reserved.
func (d *device) malloced(addr uint64, size int64, err error) (uint64, error) {
	if err != nil {
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			d.e.refused = true
		}
		return addr, err
	}
	d.mallocs++
	d.mallocBytes = satsum.Add(d.mallocBytes, size)
	d.e.mallocs++
	d.reserve(size)
	return addr, nil
}

// reserve counts size bytes more reserved from the device.
func (d *device) reserve(size int64) {
	d.reserved += size
	if d.reserved > d.peakRes {
		// A new peak, maybe only for a moment of the event: its split now
		// (see step for the split after the event).
		d.peakRes = d.reserved
		d.takeSplit()
		d.splitAfter = false
		d.e.unsettled, d.e.watch = true, -1
	}
	e := d.e
	e.reserved += size
	if e.reserved > e.peakRes {
		e.peakRes = e.reserved
		e.takeSplit()
		e.splitAfter = false
		e.unsettled, e.watch = true, -1
	}
	e.resHi = max(e.resHi, e.reserved)
}

func (d *device) Free(addr uint64, size int64) error {
	var err error
	if d.measure {
		t0 := time.Now()
		err = d.backend.Free(addr, size)
		d.callNS += int64(time.Since(t0))
	} else {
		err = d.backend.Free(addr, size)
	}
	if err != nil {
		return err
	}
	d.regionFreed(addr)
	d.count(devicecost.Free, size)
	d.freed(size)
	return nil
}

// freed counts a device free of size bytes reserved.
func (d *device) freed(size int64) {
	d.mfrees++
	d.e.frees++
	d.unreserve(size)
}

// unreserve counts size bytes less reserved from the device.
func (d *device) unreserve(size int64) {
	d.reserved -= size
	e := d.e
	e.reserved -= size
	e.resLo = min(e.resLo, e.reserved)
}

func (d *device) MemInfo() (free, total int64) { return d.backend.MemInfo() }

// Index returns the device's index, which an allocator configured per
// device reads (the pytorch strategy's "deviceN." settings).
func (d *device) Index() int { return d.index }

// A vmDevice is the counting wrapper of a backend that is a
// gpualloc.VirtualMemory: the allocator is given one in place of the
// device, so that it finds the interface only when the backend has it.
// A Create counts as a device allocation and a Release as a device free;
// Map and Unmap are counted apart. Physical memory counts as reserved
// memory from its first Map to its Release: memory made and given back
// without being mapped (the pages of a map that failed part way, when the
// device refused one of them) never held a block, and PyTorch's reserved
// bytes, which its snapshots record, never count it either. Reserve and
// Unreserve hold no memory and are not counted.
type vmDevice struct {
	*device
	vm    gpualloc.VirtualMemory
	sizes map[uint64]int64 // live physical memory: handle -> bytes
	mem   map[uint64]int32 // live physical memory mapped once: handle -> its ledger record
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
	if err == nil {
		v.count(devicecost.Reserve, size)
	}
	return addr, err
}

func (v *vmDevice) Unreserve(addr uint64, size int64) error {
	err := v.timed(func() error { return v.vm.Unreserve(addr, size) })
	if err == nil {
		v.count(devicecost.Unreserve, size)
	}
	return err
}

func (v *vmDevice) Create(size int64) (h uint64, err error) {
	err = v.timed(func() (err error) { h, err = v.vm.Create(size); return err })
	if err != nil {
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			v.e.refused = true
		}
		return h, err
	}
	v.sizes[h] = size
	v.count(devicecost.Create, size)
	v.mallocs++
	v.mallocBytes = satsum.Add(v.mallocBytes, size)
	v.e.mallocs++
	return h, nil
}

func (v *vmDevice) Release(h uint64) error {
	if err := v.timed(func() error { return v.vm.Release(h) }); err != nil {
		return err
	}
	size := v.sizes[h]
	v.count(devicecost.Release, size)
	v.mfrees++
	v.e.frees++
	if mem, ok := v.mem[h]; ok {
		v.unreserve(size)
		v.memoryReleased(mem)
		delete(v.mem, h)
	}
	delete(v.sizes, h)
	return nil
}

func (v *vmDevice) Map(addr uint64, h uint64) error {
	err := v.timed(func() error { return v.vm.Map(addr, h) })
	if err == nil {
		size := v.sizes[h]
		mem, ok := v.mem[h]
		if !ok {
			// Mapped for the first time: reserved from now on.
			mem = v.memory(size)
			v.mem[h] = mem
			v.reserve(size)
		}
		v.maps++
		v.count(devicecost.Map, size)
		v.mapped(addr, mem)
	}
	return err
}

func (v *vmDevice) Unmap(addr uint64, size int64) error {
	err := v.timed(func() error { return v.vm.Unmap(addr, size) })
	if err == nil {
		v.unmaps++
		v.count(devicecost.Unmap, size)
		v.unmapped(addr)
	}
	return err
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
	d := &device{e: e, index: int(i), led: newLedger(), measure: e.measure}
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
		b = &vmDevice{device: d, vm: vm, sizes: make(map[uint64]int64), mem: make(map[uint64]int32)}
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
	if pa, ok := d.alloc.(PoolAllocator); ok && e.cfg.PrivatePools {
		d.pooled = pa
	}
	if e.res.Strategy.Spec == "" {
		if sp, ok := d.alloc.(gpualloc.Specer); ok {
			e.res.Strategy = strategyOfSpec(sp.Spec())
			if e.strategy == "" {
				e.strategy = e.res.Strategy.Name
			}
		}
	}
	d.given = b
	if e.rec != nil {
		e.rec.device(int(i)) // the restore's device calls are recorded
	}
	if err := e.restore(d); err != nil {
		return nil, fmt.Errorf("device %d: %w", i, err)
	}
	if e.rec != nil {
		e.rec.open(d, e.res.Strategy.Spec)
		e.rec.deviceMemory(int(i), d.backend)
	}
	if e.plan != nil && e.plan.active {
		// Outside the recorder's wrapper: the blocks it gives are not the
		// strategy's (see stepSpecial).
		d.cat = &giver{p: e.plan, d: d, cat: d.cat, stream: d.stream, alloc: d.alloc}
	}
	e.devs[i] = d
	return d, nil
}

// verify compares the allocator's own statistics with the engine's.
func (d *device) verify() error {
	if d.stats == nil || d.pools != nil {
		// The memory of private pools, which the engine holds, is not
		// the allocator's.
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
