//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"strings"
	"syscall"
	"unsafe"

	"github.com/ebitengine/purego"
)

// libNames are the names the driver library is loaded by, in turn:
// libcuda.so.1 is what the driver installs; libcuda.so is the development
// link, or a stub, found on some systems that lack the first.
var libNames = []string{"libcuda.so.1", "libcuda.so"}

// loadDriver loads the CUDA driver library with dlopen (through purego, so
// without cgo) and binds the functions of the driver table. It never panics:
// a panic of the loader becomes an error wrapping [ErrNoDriver].
func loadDriver() (d *driver, err error) {
	defer func() {
		if r := recover(); r != nil {
			d, err = nil, &openError{
				msg:  fmt.Sprintf("no CUDA driver found (loading %s failed: %v)", libNames[0], r),
				errs: []error{ErrNoDriver},
			}
		}
	}()
	var (
		h    uintptr
		lib  string
		why  []string
		lerr error
	)
	for _, name := range libNames {
		if h, lerr = purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL); lerr == nil {
			lib = name
			break
		}
		text := oneLine(lerr.Error())
		if text == "" {
			text = "could not be loaded"
		}
		if !strings.Contains(text, name) {
			text = name + ": " + text
		}
		why = append(why, text)
	}
	if lib == "" {
		return nil, &openError{
			msg:  fmt.Sprintf("no CUDA driver found (%s)", strings.Join(why, "; ")),
			errs: []error{ErrNoDriver},
		}
	}
	// The library stays loaded for the life of the process: the driver
	// does not support being unloaded.

	var missing []string
	// sym returns the address of the first of names the library exports;
	// a required symbol that is absent is noted in missing.
	sym := func(required bool, names ...string) uintptr {
		for _, n := range names {
			if p, err := purego.Dlsym(h, n); err == nil && p != 0 {
				return p
			}
		}
		if required {
			missing = append(missing, names[0])
		}
		return 0
	}
	var (
		pInit           = sym(true, fnInit)
		pDeviceGetCount = sym(true, fnDeviceGetCount)
		pDeviceGet      = sym(true, fnDeviceGet)
		pDeviceGetName  = sym(false, fnDeviceGetName)
		pRetain         = sym(true, fnPrimaryCtxRetain)
		// cuda.h maps cuDevicePrimaryCtxRelease to its _v2 since CUDA 11;
		// older drivers have only the first version, of the same signature.
		pRelease       = sym(true, fnPrimaryCtxRelease+"_v2", fnPrimaryCtxRelease)
		pCtxSetCurrent = sym(true, fnCtxSetCurrent)
		pMemAlloc      = sym(true, fnMemAlloc)
		pMemFree       = sym(true, fnMemFree)
		pMemGetInfo    = sym(true, fnMemGetInfo)
		pErrorName     = sym(false, "cuGetErrorName")
		pErrorString   = sym(false, "cuGetErrorString")

		// Virtual memory management: optional, all or none.
		pGetAttribute = sym(false, fnDeviceGetAttribute)
		pGranularity  = sym(false, fnMemGetAllocationGranularity)
		pReserve      = sym(false, fnMemAddressReserve)
		pAddressFree  = sym(false, fnMemAddressFree)
		pCreate       = sym(false, fnMemCreate)
		pMemRelease   = sym(false, fnMemRelease)
		pMap          = sym(false, fnMemMap)
		pSetAccess    = sym(false, fnMemSetAccess)
		pUnmap        = sym(false, fnMemUnmap)

		// Page-locked host memory: optional, both or neither.
		pAllocHost = sym(false, fnMemAllocHost)
		pFreeHost  = sym(false, fnMemFreeHost)
	)
	if len(missing) > 0 {
		return nil, &openError{
			msg:  fmt.Sprintf("no usable CUDA driver (%s lacks %s)", lib, strings.Join(missing, ", ")),
			errs: []error{ErrNoDriver},
		}
	}

	// Each function calls purego.SyscallN directly, converting its pointer
	// arguments in the call itself, so that SyscallN's go:uintptrescapes
	// keeps the memory they point to alive and in place during the call. A
	// CUresult is a C enum (int): only the low 32 bits of the return
	// register are meaningful.
	d = &driver{
		lib: lib,
		init: func(flags uint32) result {
			r, _, _ := purego.SyscallN(pInit, uintptr(flags))
			return result(int32(r))
		},
		deviceGetCount: func(count *int32) result {
			r, _, _ := purego.SyscallN(pDeviceGetCount, uintptr(unsafe.Pointer(count)))
			return result(int32(r))
		},
		deviceGet: func(device *int32, ordinal int32) result {
			r, _, _ := purego.SyscallN(pDeviceGet, uintptr(unsafe.Pointer(device)), uintptr(ordinal))
			return result(int32(r))
		},
		primaryCtxRetain: func(pctx *uintptr, dev int32) result {
			r, _, _ := purego.SyscallN(pRetain, uintptr(unsafe.Pointer(pctx)), uintptr(dev))
			return result(int32(r))
		},
		primaryCtxRelease: func(dev int32) result {
			r, _, _ := purego.SyscallN(pRelease, uintptr(dev))
			return result(int32(r))
		},
		ctxSetCurrent: func(ctx uintptr) result {
			r, _, _ := purego.SyscallN(pCtxSetCurrent, ctx)
			return result(int32(r))
		},
		memAlloc: func(dptr *uint64, bytesize uintptr) result {
			r, _, _ := purego.SyscallN(pMemAlloc, uintptr(unsafe.Pointer(dptr)), bytesize)
			return result(int32(r))
		},
		memFree: func(dptr uint64) result {
			r, _, _ := purego.SyscallN(pMemFree, uintptr(dptr))
			return result(int32(r))
		},
		memGetInfo: func(free, total *uintptr) result {
			r, _, _ := purego.SyscallN(pMemGetInfo, uintptr(unsafe.Pointer(free)), uintptr(unsafe.Pointer(total)))
			return result(int32(r))
		},
	}
	if pDeviceGetName != 0 {
		d.deviceGetName = func(name *byte, n int32, dev int32) result {
			r, _, _ := purego.SyscallN(pDeviceGetName, uintptr(unsafe.Pointer(name)), uintptr(n), uintptr(dev))
			return result(int32(r))
		}
	}
	if pErrorName != 0 {
		d.getErrorName = func(code result, pstr **byte) result {
			r, _, _ := purego.SyscallN(pErrorName, uintptr(code), uintptr(unsafe.Pointer(pstr)))
			return result(int32(r))
		}
	}
	if pErrorString != 0 {
		d.getErrorString = func(code result, pstr **byte) result {
			r, _, _ := purego.SyscallN(pErrorString, uintptr(code), uintptr(unsafe.Pointer(pstr)))
			return result(int32(r))
		}
	}
	if pGetAttribute != 0 && pGranularity != 0 && pReserve != 0 && pAddressFree != 0 && pCreate != 0 &&
		pMemRelease != 0 && pMap != 0 && pSetAccess != 0 && pUnmap != 0 {
		bindVMM(d, pGetAttribute, pGranularity, pReserve, pAddressFree, pCreate, pMemRelease, pMap, pSetAccess, pUnmap)
	}
	if pAllocHost != 0 && pFreeHost != 0 {
		d.memAllocHost = func(pp *uintptr, bytesize uintptr) result {
			r, _, _ := purego.SyscallN(pAllocHost, uintptr(unsafe.Pointer(pp)), bytesize)
			return result(int32(r))
		}
		d.memFreeHost = func(p uintptr) result {
			r, _, _ := purego.SyscallN(pFreeHost, p)
			return result(int32(r))
		}
	}
	return d, nil
}

// bindVMM binds the virtual memory functions of the driver table, as
// loadDriver binds the others. The structs are passed by address, and
// hold no Go pointers.
func bindVMM(d *driver, pGetAttribute, pGranularity, pReserve, pAddressFree, pCreate, pRelease, pMap, pSetAccess, pUnmap uintptr) {
	d.deviceGetAttribute = func(pi *int32, attrib int32, dev int32) result {
		r, _, _ := purego.SyscallN(pGetAttribute, uintptr(unsafe.Pointer(pi)), uintptr(attrib), uintptr(dev))
		return result(int32(r))
	}
	d.memGetAllocationGranularity = func(granularity *uintptr, prop *memAllocationProp, option int32) result {
		r, _, _ := purego.SyscallN(pGranularity, uintptr(unsafe.Pointer(granularity)), uintptr(unsafe.Pointer(prop)), uintptr(option))
		return result(int32(r))
	}
	d.memAddressReserve = func(ptr *uint64, size, alignment uintptr, addr uint64, flags uint64) result {
		r, _, _ := purego.SyscallN(pReserve, uintptr(unsafe.Pointer(ptr)), size, alignment, uintptr(addr), uintptr(flags))
		return result(int32(r))
	}
	d.memAddressFree = func(ptr uint64, size uintptr) result {
		r, _, _ := purego.SyscallN(pAddressFree, uintptr(ptr), size)
		return result(int32(r))
	}
	d.memCreate = func(handle *uint64, size uintptr, prop *memAllocationProp, flags uint64) result {
		r, _, _ := purego.SyscallN(pCreate, uintptr(unsafe.Pointer(handle)), size, uintptr(unsafe.Pointer(prop)), uintptr(flags))
		return result(int32(r))
	}
	d.memRelease = func(handle uint64) result {
		r, _, _ := purego.SyscallN(pRelease, uintptr(handle))
		return result(int32(r))
	}
	d.memMap = func(ptr uint64, size, offset uintptr, handle uint64, flags uint64) result {
		r, _, _ := purego.SyscallN(pMap, uintptr(ptr), size, offset, uintptr(handle), uintptr(flags))
		return result(int32(r))
	}
	d.memSetAccess = func(ptr uint64, size uintptr, desc *memAccessDesc, count uintptr) result {
		r, _, _ := purego.SyscallN(pSetAccess, uintptr(ptr), size, uintptr(unsafe.Pointer(desc)), count)
		return result(int32(r))
	}
	d.memUnmap = func(ptr uint64, size uintptr) result {
		r, _, _ := purego.SyscallN(pUnmap, uintptr(ptr), size)
		return result(int32(r))
	}
}

// hostMemory returns the machine's physical memory, sysinfo(2)'s total RAM.
func hostMemory() (int64, error) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("reading the machine's memory: %w", err)
	}
	unit := int64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	return int64(si.Totalram) * unit, nil
}
