package strategytest

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gpualloc/gpualloc"
)

// DeviceBase is the address of the first region a [Device] hands out, and
// DeviceAlign the alignment of every region's address: the values a CUDA
// device on a 64-bit Linux host typically shows.
const (
	DeviceBase  uint64 = 0x7f4000000000
	DeviceAlign uint64 = 512
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
	FailedMallocs int64 // Malloc calls refused with ErrOutOfMemory, injected failures included

	// InvalidCalls counts calls that no correct allocator makes: a Malloc
	// of less than one byte, or a Free of an address the device did not
	// hand out or with a size other than the one asked for.
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
// Malloc is O(regions), Free and [Device.Holds] O(log regions); in steady
// state neither allocates. A Device is not safe for concurrent use.
type Device struct {
	capacity int64
	regions  []Region // outstanding, sorted by address
	fail     int      // Malloc calls still to refuse
	st       DeviceStats
	err      error // first invalid call
}

// NewDevice returns an empty device of capacity bytes. It panics if capacity
// is not positive.
func NewDevice(capacity int64) *Device {
	if capacity <= 0 {
		panic(fmt.Sprintf("strategytest: NewDevice(%d): capacity must be positive", capacity))
	}
	return &Device{capacity: capacity, st: DeviceStats{Capacity: capacity}}
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
// region.
func (d *Device) Holds(addr uint64, size int64) bool {
	if size < 0 {
		return false
	}
	r, ok := d.regionAt(addr)
	return ok && uint64(size) <= r.End()-addr
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
