package virtual

import (
	"fmt"

	"github.com/gpualloc/gpualloc/internal/vmem"
)

// Virtual memory of the virtual devices (see [gpualloc.VirtualMemory]).
const (
	// Granularity is the page of physical memory and the alignment of
	// reserved ranges: 2 MiB, what cuMemGetAllocationGranularity reports on
	// current NVIDIA GPUs.
	Granularity int64 = 2 << 20

	// ReserveBase is the first address of device 0's reserved ranges.
	// Device d's ranges lie in [ReserveBase + d*ReserveSpacing,
	// ReserveBase + (d+1)*ReserveSpacing), apart from the regions Malloc
	// hands out.
	ReserveBase uint64 = 1 << 58
	// ReserveSpacing is the address space each device can reserve: 64 TiB
	// (the windows of devices 0 to MaxIndex end at 2^58 + 2^62). PyTorch's
	// expandable segments reserve 1 1/8 of the device's capacity for each
	// (stream, pool) in use: an 80 GiB device holds some 700 such ranges
	// at once, and a device of several TiB still a few.
	ReserveSpacing uint64 = 1 << 46
)

// space returns the device's virtual memory, set up on first use so that a
// device that never uses it costs nothing for it.
func (d *Device) space() *vmem.Space {
	if d.vm.Gran == 0 {
		d.vm = vmem.Space{
			Base: ReserveBase + uint64(d.index)*ReserveSpacing, Size: ReserveSpacing, Gran: Granularity,
			Prefix: fmt.Sprintf("virtual: device %d", d.index),
		}
	}
	return &d.vm
}

// Granularity returns [Granularity].
func (d *Device) Granularity() int64 { return Granularity }

// Reserve reserves size bytes of address space, a multiple of
// [Granularity], at the lowest address of the device's window where they
// fit, and returns it. It holds no memory. O(ranges).
func (d *Device) Reserve(size int64) (uint64, error) {
	addr, err := d.space().Reserve(size)
	if err == nil {
		d.st.Reserves++
	}
	return addr, d.checked(err)
}

// Unreserve frees the range Reserve returned at addr, of size bytes, which
// must have nothing mapped. O(ranges).
func (d *Device) Unreserve(addr uint64, size int64) error {
	err := d.space().Unreserve(addr, size)
	if err == nil {
		d.st.Unreserves++
	}
	return d.checked(err)
}

// Create makes size bytes of physical memory, a multiple of [Granularity],
// counted against the device's capacity, and returns its handle (never 0).
// O(1).
func (d *Device) Create(size int64) (uint64, error) {
	s := d.space()
	if err := s.CheckSize("create", size); err != nil {
		return 0, d.invalid(err)
	}
	if err := d.take("create", size); err != nil {
		return 0, err
	}
	d.st.Creates++
	d.st.CreateBytes += size
	return s.Create(size), nil
}

// Release frees the physical memory of handle, which must be mapped
// nowhere. O(1).
func (d *Device) Release(handle uint64) error {
	size, err := d.space().Release(handle)
	if err == nil {
		d.st.Releases++
		d.st.Used -= size
	}
	return d.checked(err)
}

// Map maps the physical memory of handle at addr, inside one reserved
// range, where nothing is mapped. O(pages mapped).
func (d *Device) Map(addr uint64, handle uint64) error {
	err := d.space().Map(addr, handle)
	if err == nil {
		d.st.Maps++
	}
	return d.checked(err)
}

// Unmap unmaps what one Map mapped at addr, size bytes. O(pages).
func (d *Device) Unmap(addr uint64, size int64) error {
	err := d.space().Unmap(addr, size)
	if err == nil {
		d.st.Unmaps++
	}
	return d.checked(err)
}
