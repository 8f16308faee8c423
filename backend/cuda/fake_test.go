package cuda

import (
	"sync"
	"unsafe"
)

// cudaErrors are the codes a fakeGPU knows, with CUDA's names and
// descriptions, as C strings.
var cudaErrors = map[result][2][]byte{
	0:   {cstr("CUDA_SUCCESS"), cstr("no error")},
	1:   {cstr("CUDA_ERROR_INVALID_VALUE"), cstr("invalid argument")},
	2:   {cstr("CUDA_ERROR_OUT_OF_MEMORY"), cstr("out of memory")},
	100: {cstr("CUDA_ERROR_NO_DEVICE"), cstr("no CUDA-capable device is detected")},
	201: {cstr("CUDA_ERROR_INVALID_CONTEXT"), cstr("invalid device context")},
	700: {cstr("CUDA_ERROR_ILLEGAL_ADDRESS"), cstr("an illegal memory access was encountered")},
	803: {cstr("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"), cstr("system has unsupported display driver / cuda driver combination")},
}

func cstr(s string) []byte { return append([]byte(s), 0) }

// A fakeGPU is a CUDA driver in Go for tests: one or more devices of total
// bytes, each with a primary context whose use it checks the way the real
// driver does. The context current on each OS thread is kept apart: a
// memory call made without setting the context first on the
// same thread fails with CUDA_ERROR_INVALID_CONTEXT. Tests call
// forgetContexts between operations to play other code that switches
// contexts on the same threads.
type fakeGPU struct {
	mu sync.Mutex

	initRC  result // what cuInit returns
	count   int32  // devices
	name    string // "" leaves cuDeviceGetName out of the table
	total   int64
	used    int64
	next    uint64
	allocs  map[uint64]int64
	current map[int]uintptr // thread -> current context
	retain  int             // primary context retain count

	// failures to inject: the next call of each returns the code, once
	retainRC, allocRC, freeRC, infoRC, setRC result
	// failFree makes cuMemFree_v2 of these addresses fail, every time
	failFree map[uint64]result

	// Virtual memory management. noVMM leaves its functions out of the
	// table; vmmAttr is what cuDeviceGetAttribute reports for
	// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED; gran is the
	// granularity. The fake checks every argument, the structs' contents
	// included, and keeps reserved ranges, physical memory and mappings as
	// the driver does: a call that breaks CUDA's rules fails with
	// CUDA_ERROR_INVALID_VALUE.
	noVMM      bool
	vmmAttr    int32
	gran       int64
	vnext      uint64                 // next reserved range's address
	ranges     map[uint64]int64       // reserved ranges: address -> size
	hnext      uint64                 // last handle given
	phys       map[uint64]int64       // physical memory: handle -> size
	mappings   map[uint64]fakeMapping // by address
	lastProp   memAllocationProp      // of the last cuMemCreate
	lastAccess memAccessDesc          // of the last cuMemSetAccess
	// failures to inject, once each
	attrRC, granRC, reserveRC, addrFreeRC, createRC, releaseRC, mapRC, accessRC, unmapRC result

	// Page-locked host memory. noHost leaves its functions out of the
	// table; hostNext is the next address, host the allocations; the
	// failures are injected once each.
	noHost                  bool
	hostNext                uint64
	host                    map[uint64]int64
	allocHostRC, freeHostRC result

	calls map[string]int
}

// A fakeMapping is a cuMemMap: handle's memory at an address, with the
// access cuMemSetAccess gave it.
type fakeMapping struct {
	handle uint64
	size   int64
	access bool
}

const fakeCtx uintptr = 0xc7c7c7c7

func newFakeGPU(total int64) *fakeGPU {
	return &fakeGPU{
		count:    1,
		name:     "Fake GPU 80GB",
		total:    total,
		next:     0x7f0000000000,
		allocs:   make(map[uint64]int64),
		current:  make(map[int]uintptr),
		failFree: make(map[uint64]result),
		calls:    make(map[string]int),
		vmmAttr:  1,
		gran:     2 * MiB,
		vnext:    0x7e0000000000,
		ranges:   make(map[uint64]int64),
		hnext:    0xa000,
		phys:     make(map[uint64]int64),
		mappings: make(map[uint64]fakeMapping),
		hostNext: 0x560000000000,
		host:     make(map[uint64]int64),
	}
}

// validProp reports whether p asks for what cuMemCreate of pinned device
// memory on one of the fake's devices needs, with the fields CUDA wants
// zero zero.
func (f *fakeGPU) validProp(p *memAllocationProp) bool {
	return p != nil && p.typ == memAllocationTypePinned && p.requestedHandleTypes == memHandleTypeNone &&
		p.location.typ == memLocationTypeDevice && p.location.id >= 0 && p.location.id < f.count &&
		p.win32HandleMetaData == 0 && p.compressionType == 0 && p.gpuDirectRDMACapable == 0 &&
		p.usage == 0 && p.reserved == [4]uint8{}
}

// rangeOf returns the reserved range that holds [addr, addr+size).
func (f *fakeGPU) rangeOf(addr uint64, size int64) (uint64, bool) {
	for b, n := range f.ranges {
		if addr >= b && addr-b < uint64(n) && uint64(n)-(addr-b) >= uint64(size) {
			return b, true
		}
	}
	return 0, false
}

// mappedIn reports whether a mapping overlaps [addr, addr+size).
func (f *fakeGPU) mappedIn(addr uint64, size int64) bool {
	for a, m := range f.mappings {
		if a < addr+uint64(size) && addr < a+uint64(m.size) {
			return true
		}
	}
	return false
}

// vmmDriver adds the virtual memory functions to d.
func (f *fakeGPU) vmmDriver(d *driver, lock func(string) func()) {
	d.deviceGetAttribute = func(pi *int32, attrib int32, dev int32) result {
		defer lock(fnDeviceGetAttribute)()
		if dev < 100 || dev >= 100+f.count {
			return errInvalidDevice
		}
		if rc := take(&f.attrRC); rc != success {
			return rc
		}
		if attrib != attrVirtualMemoryManagement {
			return errInvalidValue
		}
		*pi = f.vmmAttr
		return success
	}
	d.memGetAllocationGranularity = func(g *uintptr, prop *memAllocationProp, option int32) result {
		defer lock(fnMemGetAllocationGranularity)()
		if rc := take(&f.granRC); rc != success {
			return rc
		}
		if !f.validProp(prop) || (option != 0 && option != 1) {
			return errInvalidValue
		}
		*g = uintptr(f.gran)
		return success
	}
	d.memAddressReserve = func(ptr *uint64, size, alignment uintptr, addr uint64, flags uint64) result {
		defer lock(fnMemAddressReserve)()
		if rc := f.enter(&f.reserveRC); rc != success {
			return rc
		}
		if size == 0 || int64(size)%f.gran != 0 || alignment != 0 || addr != 0 || flags != 0 {
			return errInvalidValue
		}
		*ptr = f.vnext
		f.ranges[f.vnext] = int64(size)
		f.vnext += uint64(size) + uint64(f.gran) // a page apart
		return success
	}
	d.memAddressFree = func(ptr uint64, size uintptr) result {
		defer lock(fnMemAddressFree)()
		if rc := f.enter(&f.addrFreeRC); rc != success {
			return rc
		}
		if n, ok := f.ranges[ptr]; !ok || n != int64(size) || f.mappedIn(ptr, n) {
			return errInvalidValue
		}
		delete(f.ranges, ptr)
		return success
	}
	d.memCreate = func(h *uint64, size uintptr, prop *memAllocationProp, flags uint64) result {
		defer lock(fnMemCreate)()
		if rc := f.enter(&f.createRC); rc != success {
			return rc
		}
		if size == 0 || int64(size)%f.gran != 0 || flags != 0 || !f.validProp(prop) {
			return errInvalidValue
		}
		f.lastProp = *prop
		if int64(size) > f.total-f.used {
			return errOutOfMemory
		}
		f.hnext += 0x10
		*h = f.hnext
		f.phys[f.hnext] = int64(size)
		f.used += int64(size)
		return success
	}
	d.memRelease = func(h uint64) result {
		defer lock(fnMemRelease)()
		if rc := f.enter(&f.releaseRC); rc != success {
			return rc
		}
		size, ok := f.phys[h]
		if !ok {
			return errInvalidValue
		}
		for _, m := range f.mappings {
			if m.handle == h {
				return errInvalidValue // the backend unmaps first
			}
		}
		delete(f.phys, h)
		f.used -= size
		return success
	}
	d.memMap = func(ptr uint64, size, offset uintptr, h uint64, flags uint64) result {
		defer lock(fnMemMap)()
		if rc := f.enter(&f.mapRC); rc != success {
			return rc
		}
		n, ok := f.phys[h]
		if !ok || offset != 0 || flags != 0 || int64(size) != n || ptr%uint64(f.gran) != 0 {
			return errInvalidValue
		}
		if _, ok := f.rangeOf(ptr, n); !ok || f.mappedIn(ptr, n) {
			return errInvalidValue
		}
		f.mappings[ptr] = fakeMapping{handle: h, size: n}
		return success
	}
	d.memSetAccess = func(ptr uint64, size uintptr, desc *memAccessDesc, count uintptr) result {
		defer lock(fnMemSetAccess)()
		if rc := f.enter(&f.accessRC); rc != success {
			return rc
		}
		if count != 1 || desc == nil || desc.location.typ != memLocationTypeDevice ||
			desc.location.id < 0 || desc.location.id >= f.count || desc.flags != memAccessFlagsProtReadWrite {
			return errInvalidValue
		}
		f.lastAccess = *desc
		m, ok := f.mappings[ptr]
		if !ok || m.size != int64(size) {
			return errInvalidValue
		}
		m.access = true
		f.mappings[ptr] = m
		return success
	}
	d.memUnmap = func(ptr uint64, size uintptr) result {
		defer lock(fnMemUnmap)()
		if rc := f.enter(&f.unmapRC); rc != success {
			return rc
		}
		m, ok := f.mappings[ptr]
		if !ok || m.size != int64(size) {
			return errInvalidValue
		}
		delete(f.mappings, ptr)
		return success
	}
}

// enter starts each memory call of the fake, with its lock held: it fails
// the call with CUDA_ERROR_INVALID_CONTEXT (201) where no context is current
// on the calling thread, and else with the failure injected into rc, if
// any (see take).
func (f *fakeGPU) enter(rc *result) result {
	if !f.inCtx() {
		return 201
	}
	return take(rc)
}

// take returns an injected failure and clears it.
func take(rc *result) result {
	r := *rc
	*rc = success
	return r
}

// inCtx reports whether the primary context is current on this thread.
func (f *fakeGPU) inCtx() bool {
	return f.retain > 0 && f.current[threadID()] == fakeCtx
}

// forgetContexts makes no context current on any thread (all is true) or on
// the calling thread.
func (f *fakeGPU) forgetContexts(all bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if all {
		clear(f.current)
	} else {
		delete(f.current, threadID())
	}
}

func (f *fakeGPU) driver() *driver {
	lock := func(name string) func() {
		f.mu.Lock()
		f.calls[name]++
		return f.mu.Unlock
	}
	d := &driver{
		lib: "libfakecuda.so",
		init: func(flags uint32) result {
			defer lock(fnInit)()
			if flags != 0 {
				return errInvalidValue
			}
			return f.initRC
		},
		deviceGetCount: func(n *int32) result {
			defer lock(fnDeviceGetCount)()
			*n = f.count
			return success
		},
		deviceGet: func(dev *int32, ordinal int32) result {
			defer lock(fnDeviceGet)()
			if ordinal < 0 || ordinal >= f.count {
				return errInvalidDevice
			}
			*dev = 100 + ordinal
			return success
		},
		primaryCtxRetain: func(pctx *uintptr, dev int32) result {
			defer lock(fnPrimaryCtxRetain)()
			if dev < 100 || dev >= 100+f.count {
				return errInvalidDevice
			}
			if rc := take(&f.retainRC); rc != success {
				return rc
			}
			f.retain++
			*pctx = fakeCtx
			return success
		},
		primaryCtxRelease: func(dev int32) result {
			defer lock(fnPrimaryCtxRelease)()
			if dev < 100 || dev >= 100+f.count || f.retain == 0 {
				return errInvalidDevice
			}
			f.retain--
			return success
		},
		ctxSetCurrent: func(ctx uintptr) result {
			defer lock(fnCtxSetCurrent)()
			if rc := take(&f.setRC); rc != success {
				return rc
			}
			f.current[threadID()] = ctx
			return success
		},
		memAlloc: func(dptr *uint64, size uintptr) result {
			defer lock(fnMemAlloc)()
			if rc := f.enter(&f.allocRC); rc != success {
				return rc
			}
			if size == 0 {
				return errInvalidValue
			}
			if int64(size) > f.total-f.used {
				return errOutOfMemory
			}
			*dptr = f.next
			f.allocs[f.next] = int64(size)
			f.used += int64(size)
			f.next += (uint64(size) + 511) &^ 511
			return success
		},
		memFree: func(dptr uint64) result {
			defer lock(fnMemFree)()
			if rc := f.enter(&f.freeRC); rc != success {
				return rc
			}
			if rc, ok := f.failFree[dptr]; ok {
				return rc
			}
			size, ok := f.allocs[dptr]
			if !ok {
				return errInvalidValue
			}
			delete(f.allocs, dptr)
			f.used -= size
			return success
		},
		memGetInfo: func(free, total *uintptr) result {
			defer lock(fnMemGetInfo)()
			if rc := f.enter(&f.infoRC); rc != success {
				return rc
			}
			*free, *total = uintptr(f.total-f.used), uintptr(f.total)
			return success
		},
		getErrorName: func(r result, p **byte) result {
			e, ok := cudaErrors[r]
			if !ok {
				*p = nil
				return errInvalidValue
			}
			*p = &e[0][0]
			return success
		},
		getErrorString: func(r result, p **byte) result {
			e, ok := cudaErrors[r]
			if !ok {
				*p = nil
				return errInvalidValue
			}
			*p = &e[1][0]
			return success
		},
	}
	if !f.noVMM {
		f.vmmDriver(d, lock)
	}
	if !f.noHost {
		d.memAllocHost = func(pp *uintptr, size uintptr) result {
			defer lock(fnMemAllocHost)()
			if rc := f.enter(&f.allocHostRC); rc != success {
				return rc
			}
			if size == 0 {
				return errInvalidValue
			}
			*pp = uintptr(f.hostNext)
			f.host[f.hostNext] = int64(size)
			f.hostNext += (uint64(size) + 4095) &^ 4095
			return success
		}
		d.memFreeHost = func(p uintptr) result {
			defer lock(fnMemFreeHost)()
			if rc := f.enter(&f.freeHostRC); rc != success {
				return rc
			}
			if _, ok := f.host[uint64(p)]; !ok {
				return errInvalidValue
			}
			delete(f.host, uint64(p))
			return success
		}
	}
	if f.name != "" {
		d.deviceGetName = func(name *byte, n int32, dev int32) result {
			defer lock(fnDeviceGetName)()
			buf := unsafe.Slice(name, n)
			copy(buf[:n-1], f.name)
			buf[min(int(n)-1, len(f.name))] = 0
			return success
		}
	}
	return d
}

func (f *fakeGPU) callCount(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}
