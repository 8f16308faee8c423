package sim

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/vmem"
)

// Virtual memory of the virtual device (see [gpualloc.VirtualMemory]).
const (
	// Granularity is the virtual device's page of physical memory and
	// alignment of reserved ranges: 2 MiB, what cuMemGetAllocationGranularity
	// reports on current NVIDIA GPUs.
	Granularity int64 = 2 << 20

	// VirtualBase is the first address of device 0's reserved ranges.
	// Device d's ranges lie in [VirtualBase + d*VirtualSpacing,
	// VirtualBase + (d+1)*VirtualSpacing), apart from the addresses Malloc
	// hands out.
	VirtualBase uint64 = 1 << 58
	// VirtualSpacing is the address space each device can reserve: 64 TiB
	// (the windows of devices 0 to MaxDevice end at 2^58 + 2^62). PyTorch's
	// expandable segments reserve 1 1/8 of the device's capacity for each
	// (stream, pool) in use: an 80 GiB device holds some 700 such ranges
	// at once, and a device of several TiB still a few.
	VirtualSpacing uint64 = 1 << 46
)

func (d *Device) space() *vmem.Space {
	if d.vm == nil {
		d.vm = &vmem.Space{
			Base: VirtualBase + uint64(d.index)*VirtualSpacing, Size: VirtualSpacing, Gran: Granularity,
			Prefix: fmt.Sprintf("sim: device %d", d.index),
		}
	}
	return d.vm
}

// Granularity returns [Granularity].
func (d *Device) Granularity() int64 { return Granularity }

// Reserve reserves size bytes of address space, a multiple of
// [Granularity], at the lowest address of the device's window where they
// fit, and returns it. It holds no memory. O(ranges).
func (d *Device) Reserve(size int64) (uint64, error) {
	addr, err := d.space().Reserve(size)
	if err == nil {
		d.sync()
	}
	return addr, err
}

// Unreserve frees the range Reserve returned at addr, of size bytes, which
// must have nothing mapped. O(ranges).
func (d *Device) Unreserve(addr uint64, size int64) error {
	err := d.space().Unreserve(addr, size)
	if err == nil {
		d.sync()
	}
	return err
}

// Create makes size bytes of physical memory, a multiple of [Granularity],
// counted against the device's capacity, and returns its handle (never 0).
// O(1).
func (d *Device) Create(size int64) (uint64, error) {
	s := d.space()
	if err := s.CheckSize("create", size); err != nil {
		d.st.FailedMallocs++
		return 0, err
	}
	if size > d.capacity-d.st.Used {
		d.st.FailedMallocs++
		return 0, fmt.Errorf("sim: device %d: create of %d bytes with %d of %d bytes in use: %w",
			d.index, size, d.st.Used, d.capacity, gpualloc.ErrOutOfMemory)
	}
	h := s.Create(size)
	d.st.Used += size
	d.st.PeakUsed = max(d.st.PeakUsed, d.st.Used)
	d.sync()
	return h, nil
}

// Release frees the physical memory of handle, which must be mapped
// nowhere. O(1).
func (d *Device) Release(handle uint64) error {
	size, err := d.space().Release(handle)
	if err != nil {
		return err
	}
	d.st.Used -= size
	d.sync()
	return nil
}

// Map maps the physical memory of handle at addr, inside one reserved
// range, where nothing is mapped. O(pages mapped).
func (d *Device) Map(addr uint64, handle uint64) error {
	err := d.space().Map(addr, handle)
	if err == nil {
		d.sync()
	}
	return err
}

// Unmap unmaps what one Map mapped at addr, size bytes. O(pages).
func (d *Device) Unmap(addr uint64, size int64) error {
	err := d.space().Unmap(addr, size)
	if err == nil {
		d.sync()
	}
	return err
}

// Mapped reports whether the size bytes at addr lie in mapped memory of
// one reserved range. O(pages).
func (d *Device) Mapped(addr uint64, size int64) bool {
	return d.vm != nil && d.vm.Mapped(addr, size)
}

// sync copies the virtual memory counters into the device's.
func (d *Device) sync() {
	v := d.vm.Stats()
	st := &d.st
	st.Creates, st.Releases, st.CreateBytes, st.Physical = v.Creates, v.Releases, v.CreateBytes, v.Physical
	st.Maps, st.Unmaps, st.Reserves, st.Unreserves, st.AddressSpace = v.Maps, v.Unmaps, v.Reserves, v.Unreserves, v.AddressSpace
}
