package virtual

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/satsum"
	"github.com/gpualloc/gpualloc/internal/vmem"
)

// Address layout of the virtual devices.
const (
	// Base is the first address of device 0's regions. Device d's regions
	// begin at Base + d*Spacing, which makes them look like the virtual
	// addresses a CUDA driver hands out on a 64-bit Linux host.
	Base uint64 = 0x7f4000000000
	// Spacing is the distance between the first addresses of consecutive
	// devices: 1 TiB. The regions of different devices stay apart as long
	// as each device hands out less than Spacing of address space in all.
	Spacing uint64 = 1 << 40

	// Alignment is the alignment of every region's address: cudaMalloc
	// guarantees 256 bytes and gives 512 in practice.
	Alignment = 512

	// MaxIndex is the highest device index.
	MaxIndex = 1<<16 - 1
)

// DefaultCapacity is the size of a device when none is given: 80 GiB, an
// A100's or H100's memory.
const DefaultCapacity int64 = 80 << 30

// Options choose a [Device]'s number, size and address policy.
type Options struct {
	// Index is the device's number, in [0, MaxIndex]: it chooses the
	// device's address ranges (see [Base] and [ReserveBase]).
	Index int
	// Capacity is the device's size in bytes; 0 means [DefaultCapacity].
	Capacity int64
	// Reuse makes Malloc take the lowest aligned address where the region
	// fits between the live regions (first fit), so that freed addresses
	// are reused as on a real device: O(regions) per Malloc and Free (a
	// search and a copy of the sorted regions). Without it, addresses are
	// never reused: each region takes the first aligned address after the
	// previous region's end, and Malloc and Free are O(1).
	Reuse bool
}

// A Region is a range of device memory that Malloc handed out.
type Region struct {
	Addr uint64 // address of the first byte
	Size int64  // bytes asked for by the Malloc that made it
}

// End returns the address one past the region's last byte.
func (r Region) End() uint64 { return r.Addr + uint64(r.Size) }

// Stats are a [Device]'s counters and what it holds.
type Stats struct {
	Used     int64 // bytes of live regions and live physical memory
	PeakUsed int64 // largest Used seen
	Regions  int   // live regions

	Mallocs       int64 // successful Malloc calls
	Frees         int64 // successful Free calls
	MallocBytes   int64 // bytes of all successful Malloc calls, at most math.MaxInt64 (the sum saturates)
	FailedMallocs int64 // Malloc and Create calls refused with ErrOutOfMemory, injected failures included

	// Virtual memory (see [gpualloc.VirtualMemory]).
	Creates      int64 // successful Create calls
	Releases     int64 // successful Release calls
	CreateBytes  int64 // bytes of all successful Create calls
	Physical     int64 // bytes of live physical memory (part of Used)
	Handles      int   // live physical memory allocations
	Maps         int64 // successful Map calls
	Unmaps       int64 // successful Unmap calls
	Mappings     int   // live mappings
	Reserves     int64 // successful Reserve calls
	Unreserves   int64 // successful Unreserve calls
	AddressSpace int64 // bytes of reserved ranges
	Ranges       int   // reserved ranges

	// InvalidCalls counts calls that no correct allocator makes: a Malloc
	// of less than one byte, a Free of an address that is not a live
	// region or with a size other than the one asked for, or a virtual
	// memory call that breaks the rules of gpualloc.VirtualMemory.
	InvalidCalls int64
}

// A Device is a virtual GPU: a [gpualloc.Backend] of a fixed capacity that
// hands out addresses without holding any memory.
//
// Addresses: device d's regions lie upward from Base + d*Spacing
// (0x7f4000000000 for device 0), each at a multiple of [Alignment] (512
// bytes), apart from one another; with [Options].Reuse freed addresses are
// reused first fit, without it never.
//
// Capacity is counted in the bytes asked for, without alignment padding, so
// that MemInfo reports capacity minus the sum of the live regions' sizes
// and of the live physical memory. Malloc beyond capacity fails with an
// error wrapping [gpualloc.ErrOutOfMemory]; Free of an address that is not
// a live region, or with a size other than the one it was allocated with,
// fails with an error wrapping [gpualloc.ErrInvalidFree] and is counted in
// [Stats].InvalidCalls, which catches strategies that lose track of their
// memory.
//
// A Device is also a [gpualloc.VirtualMemory]: the ranges it reserves lie
// in a window of their own (from ReserveBase + d*ReserveSpacing, first fit,
// so freed ranges are reused), physical memory comes in multiples of
// [Granularity] (2 MiB) and counts against the capacity as Malloc's regions
// do ([Device.FailMallocs] refuses Create calls too). A call that breaks the
// interface's rules (a map over a mapping, an unmap of what is not mapped,
// a release of mapped memory, an unreserve of a range with mappings) fails
// with an error wrapping [gpualloc.ErrInvalidFree], changes nothing and is
// an invalid call; Create beyond capacity and Reserve beyond the window
// fail with an error wrapping [gpualloc.ErrOutOfMemory]. A live block may
// then lie in a region or in mapped memory of one reserved range
// ([Device.Holds]).
//
// Malloc and Free are O(1) without [Options].Reuse, O(regions) with it;
// MemInfo is O(1). In steady state no call allocates. The device remembers
// only its live regions, ranges, physical memory and mappings, so its
// memory is proportional to them, not to the number of calls. A Device is
// not safe for concurrent use.
type Device struct {
	index    int
	capacity int64
	reuse    bool
	next     uint64           // without reuse: lowest address the next region may take
	live     map[uint64]int64 // without reuse: live regions, address -> size
	regions  []Region         // with reuse: live regions, sorted by address
	fail     int              // allocations still to refuse
	st       Stats
	err      error      // first invalid call
	vm       vmem.Space // virtual memory, set up by space on first use
}

// New returns a device as opt says. It fails if opt.Index is out of
// [0, MaxIndex] or opt.Capacity is negative.
func New(opt Options) (*Device, error) {
	if opt.Index < 0 || opt.Index > MaxIndex {
		return nil, fmt.Errorf("virtual: device index %d out of range [0, %d]", opt.Index, MaxIndex)
	}
	if opt.Capacity < 0 {
		return nil, fmt.Errorf("virtual: device %d: negative capacity %d", opt.Index, opt.Capacity)
	}
	if opt.Capacity == 0 {
		opt.Capacity = DefaultCapacity
	}
	d := &Device{
		index:    opt.Index,
		capacity: opt.Capacity,
		reuse:    opt.Reuse,
		next:     Base + uint64(opt.Index)*Spacing,
	}
	if !d.reuse {
		d.live = make(map[uint64]int64)
	}
	return d, nil
}

// Index returns the device's number.
func (d *Device) Index() int { return d.index }

// Capacity returns the device's size in bytes.
func (d *Device) Capacity() int64 { return d.capacity }

// Stats returns the device's counters. O(1).
func (d *Device) Stats() Stats {
	st := d.st
	st.Regions = len(d.live) + len(d.regions)
	st.Ranges, st.AddressSpace, st.Handles, st.Physical, st.Mappings = d.vm.InUse()
	return st
}

// Err returns the error of the first invalid call made to the device (see
// [Stats].InvalidCalls), or nil if there was none.
func (d *Device) Err() error { return d.err }

// FailMallocs makes the next n calls of Malloc and Create fail with an
// error wrapping [gpualloc.ErrOutOfMemory] whatever the free bytes, as a
// real device does when fragmentation or another process leaves it short
// of memory that MemInfo reported free. It is how tests reach an
// allocator's release-and-retry path.
func (d *Device) FailMallocs(n int) { d.fail = max(n, 0) }

// Malloc hands out a region of size bytes and returns its address.
func (d *Device) Malloc(size int64) (uint64, error) {
	if size <= 0 {
		return 0, d.invalid(fmt.Errorf("virtual: device %d: malloc of %d bytes: %w", d.index, size, gpualloc.ErrInvalidSize))
	}
	if err := d.take("malloc", size); err != nil {
		return 0, err
	}
	var addr uint64
	if d.reuse {
		addr = d.firstFit(size)
	} else {
		addr = d.next
		d.next = alignUp(addr + uint64(size))
		d.live[addr] = size
	}
	d.st.Mallocs++
	d.st.MallocBytes = satsum.Add(d.st.MallocBytes, size)
	return addr, nil
}

// take counts size bytes of a Malloc or Create (what) against the
// capacity, or refuses them: an injected failure, or more than the free
// bytes.
func (d *Device) take(what string, size int64) error {
	if d.fail > 0 {
		d.fail--
		d.st.FailedMallocs++
		return fmt.Errorf("virtual: device %d: %s of %d bytes: injected failure: %w", d.index, what, size, gpualloc.ErrOutOfMemory)
	}
	if size > d.capacity-d.st.Used {
		d.st.FailedMallocs++
		return fmt.Errorf("virtual: device %d: %s of %d bytes with %d of %d bytes in use: %w",
			d.index, what, size, d.st.Used, d.capacity, gpualloc.ErrOutOfMemory)
	}
	d.st.Used += size
	d.st.PeakUsed = max(d.st.PeakUsed, d.st.Used)
	return nil
}

// firstFit places a region of size bytes at the lowest aligned address
// where it fits between the live regions and returns it.
func (d *Device) firstFit(size int64) uint64 {
	span := alignUp(uint64(size))
	addr := Base + uint64(d.index)*Spacing
	i := 0
	for ; i < len(d.regions); i++ {
		r := d.regions[i]
		if r.Addr-addr >= span {
			break
		}
		addr = alignUp(r.End())
	}
	d.regions = slices.Insert(d.regions, i, Region{Addr: addr, Size: size})
	return addr
}

// Free returns the region at addr, which Malloc handed out for size bytes.
func (d *Device) Free(addr uint64, size int64) error {
	var got int64
	i, ok := 0, false
	if d.reuse {
		if i, ok = d.find(addr); ok {
			got = d.regions[i].Size
		}
	} else {
		got, ok = d.live[addr]
	}
	if !ok {
		return d.invalid(fmt.Errorf("virtual: device %d: free of %#x (%d bytes), not a live region: %w",
			d.index, addr, size, gpualloc.ErrInvalidFree))
	}
	if got != size {
		return d.invalid(fmt.Errorf("virtual: device %d: free of %#x with size %d, allocated with size %d: %w",
			d.index, addr, size, got, gpualloc.ErrInvalidFree))
	}
	if d.reuse {
		d.regions = slices.Delete(d.regions, i, i+1)
	} else {
		delete(d.live, addr)
	}
	d.st.Frees++
	d.st.Used -= size
	return nil
}

// MemInfo returns the unused and the total bytes of the device.
func (d *Device) MemInfo() (free, total int64) {
	return d.capacity - d.st.Used, d.capacity
}

// Regions returns the live regions, sorted by address. O(regions), O(regions
// log regions) without [Options].Reuse.
func (d *Device) Regions() []Region {
	if d.reuse {
		return slices.Clone(d.regions)
	}
	rs := make([]Region, 0, len(d.live))
	for _, a := range slices.Sorted(maps.Keys(d.live)) {
		rs = append(rs, Region{Addr: a, Size: d.live[a]})
	}
	return rs
}

// Holds reports whether the size bytes at addr lie inside one live region,
// or in mapped memory of one reserved range. O(log regions + pages) with
// [Options].Reuse, O(regions + pages) without.
func (d *Device) Holds(addr uint64, size int64) bool {
	if size < 0 {
		return false
	}
	if r, ok := d.regionAt(addr); ok {
		return uint64(size) <= r.End()-addr
	}
	return d.vm.Mapped(addr, size)
}

// regionAt returns the live region that contains addr.
func (d *Device) regionAt(addr uint64) (Region, bool) {
	if !d.reuse {
		for a, size := range d.live {
			if r := (Region{a, size}); a <= addr && addr < r.End() {
				return r, true
			}
		}
		return Region{}, false
	}
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].Addr > addr }) - 1
	if i < 0 || addr >= d.regions[i].End() {
		return Region{}, false
	}
	return d.regions[i], true
}

// find returns the index of the region that starts at addr, with Reuse.
func (d *Device) find(addr uint64) (int, bool) {
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].Addr >= addr })
	return i, i < len(d.regions) && d.regions[i].Addr == addr
}

// invalid counts err, the error of an invalid call, and keeps it if it is
// the first.
func (d *Device) invalid(err error) error {
	d.st.InvalidCalls++
	if d.err == nil {
		d.err = err
	}
	return err
}

// checked returns err, the error of a virtual memory call, counted as an
// invalid call unless it is nil or out of memory.
func (d *Device) checked(err error) error {
	if err == nil || errors.Is(err, gpualloc.ErrOutOfMemory) {
		return err
	}
	return d.invalid(err)
}

func alignUp(x uint64) uint64 { return (x + Alignment - 1) &^ (Alignment - 1) }
