package sim

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/vmem"
)

// Address layout of the virtual device.
const (
	// DeviceBase is the first address of device 0. Device d's addresses
	// begin at DeviceBase + d*DeviceSpacing, which makes them look like the
	// virtual addresses a CUDA driver hands out.
	DeviceBase uint64 = 0x7f4000000000
	// DeviceSpacing is the distance between the first addresses of
	// consecutive devices: 1 TiB.
	DeviceSpacing uint64 = 1 << 40

	// Alignment is the alignment of every region's address: cudaMalloc
	// guarantees 256 bytes and gives 512 in practice.
	Alignment = 512

	// MaxDevice is the highest device index the simulator accepts.
	MaxDevice = 1<<16 - 1
)

// DefaultCapacity is the size of a virtual device when none is given: 80 GiB,
// an A100's or H100's memory.
const DefaultCapacity int64 = 80 << 30

// A Device is a virtual GPU: a [gpualloc.Backend] of a fixed capacity that
// hands out addresses without holding any memory.
//
// Addresses: device d's regions lie upward from DeviceBase + d*DeviceSpacing
// (0x7f4000000000 for device 0). Each Malloc takes the first multiple of
// [Alignment] (512 bytes) at or after the end of the previous region, so
// addresses are never reused: they are unique among a device's regions for
// its whole life. The ranges of different devices stay apart as long as each
// device hands out less than DeviceSpacing (1 TiB) of address space in all.
//
// Capacity is counted in the bytes asked for, without alignment padding, so
// that MemInfo reports capacity minus the sum of the live regions' sizes
// and of the live physical memory.
//
// A Device is a [gpualloc.VirtualMemory]: ranges it reserves lie in a window
// of their own (from VirtualBase + index*VirtualSpacing, first fit, so freed
// ranges are reused), physical memory comes in multiples of [Granularity]
// (2 MiB) and counts against the capacity as Malloc's regions do, and it
// refuses a map over a mapping, an unmap of what is not mapped, a release
// of mapped memory and an unreserve of a range with mappings, with errors
// wrapping [gpualloc.ErrInvalidFree]; Create beyond capacity fails with an
// error wrapping [gpualloc.ErrOutOfMemory].
//
// Malloc beyond capacity fails with an error wrapping
// [gpualloc.ErrOutOfMemory]; Free of an address that is not a live region,
// or with a size other than the one it was allocated with, fails with an
// error wrapping [gpualloc.ErrInvalidFree], which catches strategies that
// lose track of their memory.
//
// Malloc, Free and MemInfo are O(1). The device remembers only its live
// regions, ranges, physical memory and mappings, so its memory is
// proportional to them, not to the number of calls. A Device is
// not safe for concurrent use.
type Device struct {
	index    int
	capacity int64
	next     uint64           // lowest address the next region may take
	live     map[uint64]int64 // live regions: address -> size
	vm       *vmem.Space      // virtual memory, nil until first used
	st       DeviceStats
}

// DeviceStats are a [Device]'s counters.
type DeviceStats struct {
	Mallocs       int64 // successful Malloc calls
	Frees         int64 // successful Free calls
	MallocBytes   int64 // bytes of all successful Malloc calls
	FailedMallocs int64 // Malloc and Create calls that failed (out of memory or a bad size)
	Used          int64 // bytes of live regions and live physical memory
	PeakUsed      int64 // largest Used seen
	Live          int64 // number of live regions

	// Virtual memory (see [gpualloc.VirtualMemory]).
	Creates      int64 // successful Create calls
	Releases     int64 // successful Release calls
	CreateBytes  int64 // bytes of all successful Create calls
	Physical     int64 // bytes of live physical memory (part of Used)
	Maps         int64 // successful Map calls
	Unmaps       int64 // successful Unmap calls
	Reserves     int64 // successful Reserve calls
	Unreserves   int64 // successful Unreserve calls
	AddressSpace int64 // bytes of reserved ranges
}

// NewDevice returns virtual device number index (which chooses its address
// range) with capacity bytes. A capacity of 0 means [DefaultCapacity]; index
// must be in [0, MaxDevice].
func NewDevice(index int, capacity int64) (*Device, error) {
	if index < 0 || index > MaxDevice {
		return nil, fmt.Errorf("sim: device index %d out of range [0, %d]", index, MaxDevice)
	}
	if capacity < 0 {
		return nil, fmt.Errorf("sim: device %d: negative capacity %d", index, capacity)
	}
	if capacity == 0 {
		capacity = DefaultCapacity
	}
	return &Device{
		index:    index,
		capacity: capacity,
		next:     DeviceBase + uint64(index)*DeviceSpacing,
		live:     make(map[uint64]int64),
	}, nil
}

// Index returns the device's number.
func (d *Device) Index() int { return d.index }

// Capacity returns the device's size in bytes.
func (d *Device) Capacity() int64 { return d.capacity }

// Stats returns the device's counters.
func (d *Device) Stats() DeviceStats { return d.st }

// Malloc reserves size bytes and returns the region's address.
func (d *Device) Malloc(size int64) (uint64, error) {
	if size <= 0 {
		d.st.FailedMallocs++
		return 0, fmt.Errorf("sim: device %d: malloc of %d bytes: %w", d.index, size, gpualloc.ErrInvalidSize)
	}
	if size > d.capacity-d.st.Used {
		d.st.FailedMallocs++
		return 0, fmt.Errorf("sim: device %d: malloc of %d bytes with %d of %d bytes in use: %w",
			d.index, size, d.st.Used, d.capacity, gpualloc.ErrOutOfMemory)
	}
	addr := d.next
	d.next = (addr + uint64(size) + Alignment - 1) &^ (Alignment - 1)
	d.live[addr] = size
	d.st.Mallocs++
	d.st.MallocBytes += size
	d.st.Used += size
	d.st.Live++
	if d.st.Used > d.st.PeakUsed {
		d.st.PeakUsed = d.st.Used
	}
	return addr, nil
}

// Free returns the region at addr, which Malloc returned with the same size.
func (d *Device) Free(addr uint64, size int64) error {
	got, ok := d.live[addr]
	if !ok {
		return fmt.Errorf("sim: device %d: free of %#x (%d bytes), not a live region: %w",
			d.index, addr, size, gpualloc.ErrInvalidFree)
	}
	if got != size {
		return fmt.Errorf("sim: device %d: free of %#x with size %d, allocated with size %d: %w",
			d.index, addr, size, got, gpualloc.ErrInvalidFree)
	}
	delete(d.live, addr)
	d.st.Frees++
	d.st.Used -= size
	d.st.Live--
	return nil
}

// MemInfo returns the unused and the total bytes of the device.
func (d *Device) MemInfo() (free, total int64) {
	return d.capacity - d.st.Used, d.capacity
}
