package gpualloc

import "github.com/gpualloc/gpualloc/internal/satsum"

// Stats are an allocator's counters. Byte counts without "Peak" are live
// values at the moment of the call; their peaks are the largest values seen.
type Stats struct {
	Requested int64 // bytes asked for by live blocks
	Allocated int64 // bytes set aside for live blocks (after rounding)
	Reserved  int64 // bytes held from the device, live blocks and cache together

	PeakRequested int64
	PeakAllocated int64
	PeakReserved  int64

	Allocs int64 // successful Alloc calls
	Frees  int64 // successful Free calls

	// Device allocations are Malloc calls of the backend and, on a
	// [VirtualMemory] backend, Create calls of physical memory; device frees
	// are Free and Release calls.
	DeviceMallocs     int64 // successful device allocations
	DeviceFrees       int64 // device frees
	DeviceMallocBytes int64 // bytes of all successful device allocations, at most math.MaxInt64 (a sum that would pass it stays there)

	DeviceMaps   int64 // successful Map calls of a VirtualMemory backend
	DeviceUnmaps int64 // successful Unmap calls of a VirtualMemory backend

	CacheHits int64 // allocations served without a device allocation
	OOMs      int64 // allocations that failed with ErrOutOfMemory
	Retries   int64 // device allocations retried after releasing cached memory
}

// Meter keeps [Stats] for a strategy. A strategy holds one in an unexported
// field, calls the Count methods as things happen, and forwards its own
// Stats method (which satisfies [StatsReporter]) to the Meter's. Each call is
// O(1) and allocates nothing.
type Meter struct {
	s Stats
}

// Stats returns the counters so far.
func (m *Meter) Stats() Stats { return m.s }

// CountAlloc records a block of size bytes handed out for a request of
// requested bytes. hit says whether it was served without a device
// allocation.
func (m *Meter) CountAlloc(requested, size int64, hit bool) {
	s := &m.s
	s.Allocs++
	if hit {
		s.CacheHits++
	}
	s.Requested += requested
	s.Allocated += size
	if s.Requested > s.PeakRequested {
		s.PeakRequested = s.Requested
	}
	if s.Allocated > s.PeakAllocated {
		s.PeakAllocated = s.Allocated
	}
}

// CountFree records the free of a block counted by CountAlloc.
func (m *Meter) CountFree(requested, size int64) {
	m.s.Frees++
	m.s.Requested -= requested
	m.s.Allocated -= size
}

// CountDeviceMalloc records a successful device allocation of size bytes.
func (m *Meter) CountDeviceMalloc(size int64) {
	s := &m.s
	s.DeviceMallocs++
	s.DeviceMallocBytes = satsum.Add(s.DeviceMallocBytes, size)
	s.Reserved += size
	if s.Reserved > s.PeakReserved {
		s.PeakReserved = s.Reserved
	}
}

// CountDeviceFree records a device free of size bytes.
func (m *Meter) CountDeviceFree(size int64) {
	m.s.DeviceFrees++
	m.s.Reserved -= size
}

// CountMap records a successful Map of a [VirtualMemory] backend.
func (m *Meter) CountMap() { m.s.DeviceMaps++ }

// CountUnmap records a successful Unmap of a [VirtualMemory] backend.
func (m *Meter) CountUnmap() { m.s.DeviceUnmaps++ }

// CountOOM records an allocation that failed with ErrOutOfMemory.
func (m *Meter) CountOOM() { m.s.OOMs++ }

// CountRetry records a device allocation retried after releasing cached
// memory.
func (m *Meter) CountRetry() { m.s.Retries++ }
