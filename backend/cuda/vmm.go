package cuda

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"

	"github.com/gpualloc/gpualloc/internal/vmem"
)

// ErrNoVirtualMemory reports that the driver or the device lacks CUDA's
// virtual memory management (cuMemCreate, cuMemMap and the rest).
var ErrNoVirtualMemory = errors.New("no virtual memory management")

// A VirtualBackend is a [Backend] whose device has CUDA's virtual memory
// management: a [gpualloc.VirtualMemory] as well as a [gpualloc.Backend],
// for the strategies that reserve address ranges and map physical memory
// into them (PyTorch's expandable segments, GMLake's stitching). A plain
// *Backend has none of these methods, so that a strategy's type assertion
// to gpualloc.VirtualMemory fails on a device without them; [Backend.Virtual]
// makes a VirtualBackend where they work.
//
// Each call is one or two driver calls in the device's primary context:
//
//   - Granularity: what cuMemGetAllocationGranularity reported (minimum
//     granularity of pinned device memory) when Virtual was called.
//   - Reserve: cuMemAddressReserve(size, alignment 0, no fixed address).
//   - Unreserve: cuMemAddressFree.
//   - Create: cuMemCreate of pinned memory on the device
//     (CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE, the
//     device's ordinal, no shareable handle type, no flags).
//   - Release: cuMemRelease.
//   - Map: cuMemMap of the whole of the memory at offset 0, then
//     cuMemSetAccess of the range to the device with
//     CU_MEM_ACCESS_FLAGS_PROT_READWRITE; if that fails, cuMemUnmap.
//   - Unmap: cuMemUnmap.
//
// The backend keeps the books of its ranges, physical memory and mappings
// and checks each call against [gpualloc.VirtualMemory]'s rules before it
// calls the driver: a call that breaks them fails with an error wrapping
// [gpualloc.ErrInvalidFree] (a size that is not a positive multiple of the
// granularity, [gpualloc.ErrInvalidSize]) and calls nothing. Handles are
// the backend's own numbers, not CUDA's. A driver failure is an [*Error]
// (CUDA_ERROR_OUT_OF_MEMORY wrapping [gpualloc.ErrOutOfMemory]) and leaves
// the books as they were. Close unmaps, releases and frees whatever is
// left, before the allocations of Malloc.
//
// Costs: cuMemCreate and cuMemMap take microseconds to milliseconds, like
// cuMemAlloc; cuMemUnmap and cuMemRelease, unlike cuMemFree, do not
// synchronize the device in all cases, so that a caller that frees memory
// the device may still use must synchronize first (PyTorch does).
//
// A VirtualBackend is safe for concurrent use; its calls and those of its
// Backend are serialized.
type VirtualBackend struct {
	*Backend
}

// vmState is the virtual memory of a Backend.
type vmState struct {
	gran    int64             // allocation granularity
	books   vmem.Space        // ranges, physical memory and mappings, by the rules
	handles map[uint64]uint64 // physical memory: the books' handle -> CUDA's
	ranges  map[uint64]int64  // reserved ranges: address -> size
	maps    map[uint64]int64  // mappings: address -> size
}

// Virtual returns the backend as a [VirtualBackend], which shares its
// device, context and books (Close of either closes both). It fails with
// an error wrapping [ErrNoVirtualMemory] when the driver lacks the virtual
// memory functions (CUDA before 10.2) or the device does not support them
// (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0), and with
// an [*Error] when asking fails. It asks the driver once; later calls
// return the same.
func (b *Backend) Virtual() (*VirtualBackend, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, b.errorf("virtual memory: %w", ErrClosed)
	}
	if b.vm != nil {
		return &VirtualBackend{b}, nil
	}
	d := b.drv
	if missing := d.vmmMissing(); len(missing) > 0 {
		return nil, b.errorf("%w (%s lacks %s)", ErrNoVirtualMemory, d.lib, strings.Join(missing, ", "))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.setCurrent(); err != nil {
		return nil, b.errorf("virtual memory: %w", err)
	}
	var supported int32
	if err := d.check(fnDeviceGetAttribute, d.deviceGetAttribute(&supported, attrVirtualMemoryManagement, b.dev)); err != nil {
		return nil, b.errorf("virtual memory: %w", err)
	}
	if supported == 0 {
		return nil, b.errorf("%w (the device does not support it)", ErrNoVirtualMemory)
	}
	prop := b.allocationProp()
	var g uintptr
	if err := d.check(fnMemGetAllocationGranularity, d.memGetAllocationGranularity(&g, &prop, memAllocGranularityMinimum)); err != nil {
		return nil, b.errorf("virtual memory: %w", err)
	}
	if g == 0 || g&(g-1) != 0 {
		return nil, b.errorf("%w (granularity %d, not a power of two)", ErrNoVirtualMemory, g)
	}
	b.vm = &vmState{
		gran: int64(g),
		books: vmem.Space{Base: 0, Size: ^uint64(0), Gran: int64(g),
			Prefix: fmt.Sprintf("cuda: device %d", b.ordinal)},
		handles: make(map[uint64]uint64),
		ranges:  make(map[uint64]int64),
		maps:    make(map[uint64]int64),
	}
	return &VirtualBackend{b}, nil
}

// allocationProp returns the properties of the backend's physical memory:
// pinned memory on its device.
func (b *Backend) allocationProp() memAllocationProp {
	return memAllocationProp{
		typ:                  memAllocationTypePinned,
		requestedHandleTypes: memHandleTypeNone,
		location:             memLocation{typ: memLocationTypeDevice, id: int32(b.ordinal)},
	}
}

// Granularity returns the device's allocation granularity (2 MiB on
// current GPUs).
func (v *VirtualBackend) Granularity() int64 { return v.vm.gran }

// call runs check, if not nil, with the backend locked and open, and then
// f with its context current on the calling thread; what describes the
// call in errors.
func (v *VirtualBackend) call(what string, check, f func() error) error {
	b := v.Backend
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.errorf("%s: %w", what, ErrClosed)
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.setCurrent(); err != nil {
		return b.errorf("%s: %w", what, err)
	}
	return f()
}

// Reserve reserves size bytes of address space with cuMemAddressReserve.
func (v *VirtualBackend) Reserve(size int64) (uint64, error) {
	vm := v.vm
	if err := vm.books.CheckSize("reserve", size); err != nil {
		return 0, err
	}
	var addr uint64
	what := fmt.Sprintf("reserve of %d bytes", size)
	err := v.call(what, nil, func() error {
		d := v.drv
		if err := d.check(fnMemAddressReserve, d.memAddressReserve(&addr, uintptr(size), 0, 0, 0)); err != nil {
			return v.errorf("%s: %w", what, err)
		}
		if err := vm.books.Add(addr, size); err != nil {
			// The driver gave a range the books cannot take: give it back.
			return errors.Join(err, d.check(fnMemAddressFree, d.memAddressFree(addr, uintptr(size))))
		}
		vm.ranges[addr] = size
		return nil
	})
	if err != nil {
		return 0, err
	}
	return addr, nil
}

// Unreserve frees the range Reserve returned at addr with
// cuMemAddressFree; nothing may be mapped in it.
func (v *VirtualBackend) Unreserve(addr uint64, size int64) error {
	vm := v.vm
	what := fmt.Sprintf("unreserve of %#x (%d bytes)", addr, size)
	return v.call(what, func() error { return vm.books.CanUnreserve(addr, size) }, func() error {
		d := v.drv
		if err := d.check(fnMemAddressFree, d.memAddressFree(addr, uintptr(size))); err != nil {
			return v.errorf("%s: %w", what, err)
		}
		delete(vm.ranges, addr)
		return vm.books.Unreserve(addr, size)
	})
}

// Create makes size bytes of pinned device memory with cuMemCreate and
// returns its handle. Out of memory wraps [gpualloc.ErrOutOfMemory].
func (v *VirtualBackend) Create(size int64) (uint64, error) {
	vm := v.vm
	if err := vm.books.CheckSize("create", size); err != nil {
		return 0, err
	}
	var h uint64
	what := fmt.Sprintf("create of %d bytes", size)
	err := v.call(what, nil, func() error {
		d := v.drv
		prop := v.allocationProp()
		var cu uint64
		if err := d.check(fnMemCreate, d.memCreate(&cu, uintptr(size), &prop, 0)); err != nil {
			return v.errorf("%s: %w", what, err)
		}
		h = vm.books.Create(size)
		vm.handles[h] = cu
		return nil
	})
	return h, err
}

// Release frees the physical memory of handle with cuMemRelease; it must be
// mapped nowhere.
func (v *VirtualBackend) Release(handle uint64) error {
	vm := v.vm
	what := fmt.Sprintf("release of handle %d", handle)
	return v.call(what, func() error { return vm.books.CanRelease(handle) }, func() error {
		d := v.drv
		if err := d.check(fnMemRelease, d.memRelease(vm.handles[handle])); err != nil {
			return v.errorf("%s: %w", what, err)
		}
		delete(vm.handles, handle)
		_, err := vm.books.Release(handle)
		return err
	})
}

// Map maps the physical memory of handle at addr with cuMemMap and makes it
// readable and writable by the device with cuMemSetAccess.
func (v *VirtualBackend) Map(addr uint64, handle uint64) error {
	vm := v.vm
	what := fmt.Sprintf("map of handle %d at %#x", handle, addr)
	return v.call(what, func() error { return vm.books.CanMap(addr, handle) }, func() error {
		d := v.drv
		size := vm.books.HandleSize(handle)
		if err := d.check(fnMemMap, d.memMap(addr, uintptr(size), 0, vm.handles[handle], 0)); err != nil {
			return v.errorf("%s: %w", what, err)
		}
		desc := memAccessDesc{
			location: memLocation{typ: memLocationTypeDevice, id: int32(v.ordinal)},
			flags:    memAccessFlagsProtReadWrite,
		}
		if err := d.check(fnMemSetAccess, d.memSetAccess(addr, uintptr(size), &desc, 1)); err != nil {
			if uerr := d.check(fnMemUnmap, d.memUnmap(addr, uintptr(size))); uerr != nil {
				// Still mapped: keep it on the books, so that Close
				// unmaps it.
				vm.maps[addr] = size
				return errors.Join(v.errorf("%s: %w", what, err), v.errorf("%s: %w", what, uerr), vm.books.Map(addr, handle))
			}
			return v.errorf("%s: %w", what, err)
		}
		vm.maps[addr] = size
		return vm.books.Map(addr, handle)
	})
}

// Unmap unmaps what one Map mapped at addr, size bytes, with cuMemUnmap.
func (v *VirtualBackend) Unmap(addr uint64, size int64) error {
	vm := v.vm
	what := fmt.Sprintf("unmap of %#x (%d bytes)", addr, size)
	return v.call(what, func() error { return vm.books.CanUnmap(addr, size) }, func() error {
		d := v.drv
		if err := d.check(fnMemUnmap, d.memUnmap(addr, uintptr(size))); err != nil {
			return v.errorf("%s: %w", what, err)
		}
		delete(vm.maps, addr)
		return vm.books.Unmap(addr, size)
	})
}

// VirtualInUse returns the reserved ranges, the physical memory
// allocations and their bytes, and the mappings that the backend holds.
func (v *VirtualBackend) VirtualInUse() (ranges, handles int, bytes int64, mappings int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.vm == nil {
		return 0, 0, 0, 0
	}
	ranges, _, handles, bytes, mappings = v.vm.books.InUse()
	return ranges, handles, bytes, mappings
}

// closeVM unmaps every mapping, releases every physical memory allocation
// and frees every range, each in increasing order, with the context
// current; it returns the failures.
func (b *Backend) closeVM() []error {
	vm := b.vm
	if vm == nil {
		return nil
	}
	d := b.drv
	var errs []error
	for _, a := range slices.Sorted(maps.Keys(vm.maps)) {
		if err := d.check(fnMemUnmap, d.memUnmap(a, uintptr(vm.maps[a]))); err != nil {
			errs = append(errs, b.errorf("close: unmap of %#x (%d bytes): %w", a, vm.maps[a], err))
		}
	}
	for _, h := range slices.Sorted(maps.Keys(vm.handles)) {
		if err := d.check(fnMemRelease, d.memRelease(vm.handles[h])); err != nil {
			errs = append(errs, b.errorf("close: release of handle %d: %w", h, err))
		}
	}
	for _, a := range slices.Sorted(maps.Keys(vm.ranges)) {
		if err := d.check(fnMemAddressFree, d.memAddressFree(a, uintptr(vm.ranges[a]))); err != nil {
			errs = append(errs, b.errorf("close: unreserve of %#x (%d bytes): %w", a, vm.ranges[a], err))
		}
	}
	clear(vm.maps)
	clear(vm.handles)
	clear(vm.ranges)
	vm.books = vmem.Space{Base: vm.books.Base, Size: vm.books.Size, Gran: vm.books.Gran, Prefix: vm.books.Prefix}
	return errs
}
