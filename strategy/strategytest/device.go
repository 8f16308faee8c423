package strategytest

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/vmem"
)

// DeviceBase is the address of the first region a [Device] hands out, and
// DeviceAlign the alignment of every region's address: the values a CUDA
// device on a 64-bit Linux host typically shows.
const (
	DeviceBase  uint64 = 0x7f4000000000
	DeviceAlign uint64 = 512
)

// Virtual memory of a [Device] (see [gpualloc.VirtualMemory]): ranges are
// reserved first fit from VirtualBase, 16 TiB above DeviceBase, apart from
// Malloc's regions, in a window of VirtualSize bytes; physical memory comes
// in pages of Granularity bytes.
const (
	VirtualBase uint64 = DeviceBase + 1<<44
	VirtualSize uint64 = 1 << 44
	Granularity int64  = 2 << 20
)

// A Region is a range of device memory that a [Device] handed out.
type Region struct {
	Addr uint64 // address of the first byte
	Size int64  // bytes asked for by the Malloc that made it
}

// End returns the address one past the region's last byte.
func (r Region) End() uint64 { return r.Addr + uint64(r.Size) }

// DeviceStats are a [Device]'s counters.
type DeviceStats struct {
	Capacity int64 // total bytes
	Used     int64 // bytes in outstanding regions
	PeakUsed int64 // largest Used seen
	Regions  int   // outstanding regions

	Mallocs       int64 // successful Malloc calls
	Frees         int64 // successful Free calls
	MallocBytes   int64 // bytes of all successful Malloc calls
	FailedMallocs int64 // Malloc and Create calls refused with ErrOutOfMemory, injected failures included

	// Virtual memory: Used counts the live physical memory (Physical) with
	// the regions.
	Creates      int64 // successful Create calls
	Releases     int64 // successful Release calls
	CreateBytes  int64 // bytes of all successful Create calls
	Physical     int64 // bytes of live physical memory
	Maps         int64 // successful Map calls
	Unmaps       int64 // successful Unmap calls
	Reserves     int64 // successful Reserve calls
	Unreserves   int64 // successful Unreserve calls
	AddressSpace int64 // bytes of reserved ranges
	Ranges       int   // reserved ranges
	Mappings     int   // live mappings

	// InvalidCalls counts calls that no correct allocator makes: a Malloc
	// of less than one byte, a Free of an address the device did not hand
	// out or with a size other than the one asked for, or a virtual memory
	// call that breaks the rules of gpualloc.VirtualMemory.
	InvalidCalls int64
}

// A Device is a virtual GPU for tests: a [gpualloc.Backend] with a fixed
// capacity that checks how it is used. It hands out non-overlapping regions
// at realistic addresses (from [DeviceBase], each aligned to [DeviceAlign],
// first fit, so freed addresses are reused), refuses a Malloc that does not
// fit in its free bytes with an error wrapping [gpualloc.ErrOutOfMemory], and
// fails loudly on misuse: a Free of an address it did not hand out, or with
// the wrong size, returns an error wrapping [gpualloc.ErrInvalidFree] and is
// counted in [DeviceStats.InvalidCalls].
//
// Free bytes are counted exactly, without the alignment padding between
// regions, so MemInfo reports capacity minus the bytes of outstanding
// regions. No memory is really allocated: a Device of 1 TiB costs nothing.
//
// A Device is also a [gpualloc.VirtualMemory], for strategies that map
// physical memory into reserved ranges: physical memory counts against the
// capacity as regions do (and [Device.FailMallocs] refuses Create calls
// too), and a call that breaks the interface's rules (a map over a mapping,
// an unmap of what is not mapped, a release of mapped memory, an unreserve
// of a range with mappings) is an invalid call. A live block may then lie in
// a region or in mapped memory of one reserved range ([Device.Holds]).
//
// Malloc is O(regions), Free and [Device.Holds] O(log regions); in steady
// state neither allocates. A Device is not safe for concurrent use.
type Device struct {
	capacity int64
	regions  []Region // outstanding, sorted by address
	vm       vmem.Space
	fail     int // Malloc calls still to refuse
	st       DeviceStats
	err      error // first invalid call
}

// NewDevice returns an empty device of capacity bytes. It panics if capacity
// is not positive.
func NewDevice(capacity int64) *Device {
	if capacity <= 0 {
		panic(fmt.Sprintf("strategytest: NewDevice(%d): capacity must be positive", capacity))
	}
	return &Device{capacity: capacity, st: DeviceStats{Capacity: capacity},
		vm: vmem.Space{Base: VirtualBase, Size: VirtualSize, Gran: Granularity, Prefix: "strategytest: device"}}
}

// Malloc hands out a region of size bytes at the lowest aligned address
// where it fits between the outstanding regions.
func (d *Device) Malloc(size int64) (uint64, error) {
	if size < 1 {
		return 0, d.invalid(fmt.Errorf("strategytest: device malloc of %d bytes: %w", size, gpualloc.ErrInvalidSize))
	}
	if d.fail > 0 {
		d.fail--
		d.st.FailedMallocs++
		return 0, fmt.Errorf("strategytest: device malloc of %d bytes: injected failure: %w", size, gpualloc.ErrOutOfMemory)
	}
	if free := d.capacity - d.st.Used; size > free {
		d.st.FailedMallocs++
		return 0, fmt.Errorf("strategytest: device malloc of %d bytes with %d of %d bytes free: %w",
			size, free, d.capacity, gpualloc.ErrOutOfMemory)
	}
	span := alignUp(uint64(size), DeviceAlign)
	addr := DeviceBase
	i := 0
	for ; i < len(d.regions); i++ {
		r := d.regions[i]
		if r.Addr-addr >= span {
			break
		}
		addr = alignUp(r.End(), DeviceAlign)
	}
	d.regions = slices.Insert(d.regions, i, Region{Addr: addr, Size: size})
	d.st.Mallocs++
	d.st.MallocBytes += size
	d.st.Used += size
	d.st.PeakUsed = max(d.st.PeakUsed, d.st.Used)
	d.st.Regions = len(d.regions)
	return addr, nil
}

// Free returns the region at addr, which Malloc handed out for size bytes.
func (d *Device) Free(addr uint64, size int64) error {
	i, ok := d.find(addr)
	if !ok {
		return d.invalid(fmt.Errorf("strategytest: device free of %#x (%d bytes): no region starts there: %w",
			addr, size, gpualloc.ErrInvalidFree))
	}
	if r := d.regions[i]; r.Size != size {
		return d.invalid(fmt.Errorf("strategytest: device free of %#x with size %d: the region there is %d bytes: %w",
			addr, size, r.Size, gpualloc.ErrInvalidFree))
	}
	d.regions = slices.Delete(d.regions, i, i+1)
	d.st.Frees++
	d.st.Used -= size
	d.st.Regions = len(d.regions)
	return nil
}

// MemInfo reports the device's free and total bytes.
func (d *Device) MemInfo() (free, total int64) { return d.capacity - d.st.Used, d.capacity }

// Stats returns the device's counters.
func (d *Device) Stats() DeviceStats { return d.st }

// Err returns the error of the first invalid call made to the device (see
// [DeviceStats.InvalidCalls]), or nil if there was none.
func (d *Device) Err() error { return d.err }

// Regions returns the outstanding regions, sorted by address.
func (d *Device) Regions() []Region { return slices.Clone(d.regions) }

// Holds reports whether the size bytes at addr lie inside one outstanding
// region, or in mapped memory of one reserved range.
func (d *Device) Holds(addr uint64, size int64) bool {
	if size < 0 {
		return false
	}
	if r, ok := d.regionAt(addr); ok {
		return uint64(size) <= r.End()-addr
	}
	return d.vm.Mapped(addr, size)
}

// Granularity returns [Granularity].
func (d *Device) Granularity() int64 { return Granularity }

// Reserve reserves size bytes of address space, first fit from
// [VirtualBase].
func (d *Device) Reserve(size int64) (uint64, error) {
	addr, err := d.vm.Reserve(size)
	return addr, d.vmDone(err)
}

// Unreserve frees a range Reserve returned, with nothing mapped in it.
func (d *Device) Unreserve(addr uint64, size int64) error {
	return d.vmDone(d.vm.Unreserve(addr, size))
}

// Create makes size bytes of physical memory, a multiple of [Granularity].
func (d *Device) Create(size int64) (uint64, error) {
	if err := d.vm.CheckSize("create", size); err != nil {
		return 0, d.vmDone(err)
	}
	if d.fail > 0 {
		d.fail--
		d.st.FailedMallocs++
		return 0, fmt.Errorf("strategytest: device create of %d bytes: injected failure: %w", size, gpualloc.ErrOutOfMemory)
	}
	if free := d.capacity - d.st.Used; size > free {
		d.st.FailedMallocs++
		return 0, fmt.Errorf("strategytest: device create of %d bytes with %d of %d bytes free: %w",
			size, free, d.capacity, gpualloc.ErrOutOfMemory)
	}
	h := d.vm.Create(size)
	d.st.Used += size
	d.st.PeakUsed = max(d.st.PeakUsed, d.st.Used)
	return h, d.vmDone(nil)
}

// Release frees physical memory that is mapped nowhere.
func (d *Device) Release(handle uint64) error {
	size, err := d.vm.Release(handle)
	if err == nil {
		d.st.Used -= size
	}
	return d.vmDone(err)
}

// Map maps handle's memory at addr in a reserved range.
func (d *Device) Map(addr uint64, handle uint64) error { return d.vmDone(d.vm.Map(addr, handle)) }

// Unmap unmaps what one Map mapped at addr.
func (d *Device) Unmap(addr uint64, size int64) error { return d.vmDone(d.vm.Unmap(addr, size)) }

// vmDone copies the virtual memory counters and counts err as an invalid
// call unless it is nil or out of memory.
func (d *Device) vmDone(err error) error {
	v := d.vm.Stats()
	st := &d.st
	st.Creates, st.Releases, st.CreateBytes, st.Physical = v.Creates, v.Releases, v.CreateBytes, v.Physical
	st.Maps, st.Unmaps, st.Reserves, st.Unreserves = v.Maps, v.Unmaps, v.Reserves, v.Unreserves
	st.AddressSpace, st.Ranges, st.Mappings = v.AddressSpace, v.Ranges, v.Mappings
	if err == nil || errors.Is(err, gpualloc.ErrOutOfMemory) {
		return err
	}
	return d.invalid(err)
}

// FailMallocs makes the next n calls of Malloc fail with an error wrapping
// [gpualloc.ErrOutOfMemory] whatever the free bytes, as a real device does
// when fragmentation or another process leaves it short of memory that
// MemInfo reported free. It is how tests reach an allocator's
// release-and-retry path.
func (d *Device) FailMallocs(n int) { d.fail = max(n, 0) }

func (d *Device) invalid(err error) error {
	d.st.InvalidCalls++
	if d.err == nil {
		d.err = err
	}
	return err
}

// find returns the index of the region that starts at addr.
func (d *Device) find(addr uint64) (int, bool) {
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].Addr >= addr })
	return i, i < len(d.regions) && d.regions[i].Addr == addr
}

// regionAt returns the region that contains addr.
func (d *Device) regionAt(addr uint64) (Region, bool) {
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].Addr > addr }) - 1
	if i < 0 || addr >= d.regions[i].End() {
		return Region{}, false
	}
	return d.regions[i], true
}

func alignUp(x, a uint64) uint64 { return (x + a - 1) &^ (a - 1) }
