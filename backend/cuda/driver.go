package cuda

import (
	"fmt"
	"unsafe"
)

// result is a CUresult, the status every driver API function returns.
type result int32

// The CUresult codes the package treats specially (cuda.h).
const (
	success          result = 0   // CUDA_SUCCESS
	errInvalidValue  result = 1   // CUDA_ERROR_INVALID_VALUE
	errOutOfMemory   result = 2   // CUDA_ERROR_OUT_OF_MEMORY
	errNoDevice      result = 100 // CUDA_ERROR_NO_DEVICE
	errInvalidDevice result = 101 // CUDA_ERROR_INVALID_DEVICE
)

// A driver is the table of CUDA driver API functions the backend calls, each
// with the C function's parameters in Go types of the same size: CUdevice
// and int are int32, size_t is uintptr, CUdeviceptr (unsigned long long) is
// uint64, CUcontext (a pointer to an opaque struct) is uintptr. Open fills
// it from libcuda.so.1; tests fill it with fakes.
//
// Every function is required but deviceGetName, getErrorName and
// getErrorString, which may be nil.
type driver struct {
	lib string // where the functions come from, for messages

	// CUresult cuInit(unsigned int Flags)
	init func(flags uint32) result
	// CUresult cuDeviceGetCount(int *count)
	deviceGetCount func(count *int32) result
	// CUresult cuDeviceGet(CUdevice *device, int ordinal)
	deviceGet func(device *int32, ordinal int32) result
	// CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
	deviceGetName func(name *byte, n int32, dev int32) result
	// CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
	primaryCtxRetain func(pctx *uintptr, dev int32) result
	// CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
	primaryCtxRelease func(dev int32) result
	// CUresult cuCtxSetCurrent(CUcontext ctx)
	ctxSetCurrent func(ctx uintptr) result
	// CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
	memAlloc func(dptr *uint64, bytesize uintptr) result
	// CUresult cuMemFree_v2(CUdeviceptr dptr)
	memFree func(dptr uint64) result
	// CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
	memGetInfo func(free, total *uintptr) result
	// CUresult cuGetErrorName(CUresult error, const char **pStr)
	getErrorName func(r result, pstr **byte) result
	// CUresult cuGetErrorString(CUresult error, const char **pStr)
	getErrorString func(r result, pstr **byte) result

	// Virtual memory management (CUDA 10.2 and later, vmm.go): all nil, or
	// none, when the driver lacks any of them. CUmemGenericAllocationHandle
	// (unsigned long long) is uint64; unsigned long long flags are uint64;
	// the enums are int32.

	// CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
	deviceGetAttribute func(pi *int32, attrib int32, dev int32) result
	// CUresult cuMemGetAllocationGranularity(size_t *granularity,
	// const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)
	memGetAllocationGranularity func(granularity *uintptr, prop *memAllocationProp, option int32) result
	// CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
	// CUdeviceptr addr, unsigned long long flags)
	memAddressReserve func(ptr *uint64, size, alignment uintptr, addr uint64, flags uint64) result
	// CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
	memAddressFree func(ptr uint64, size uintptr) result
	// CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
	// const CUmemAllocationProp *prop, unsigned long long flags)
	memCreate func(handle *uint64, size uintptr, prop *memAllocationProp, flags uint64) result
	// CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
	memRelease func(handle uint64) result
	// CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
	// CUmemGenericAllocationHandle handle, unsigned long long flags)
	memMap func(ptr uint64, size, offset uintptr, handle uint64, flags uint64) result
	// CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
	memSetAccess func(ptr uint64, size uintptr, desc *memAccessDesc, count uintptr) result
	// CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
	memUnmap func(ptr uint64, size uintptr) result

	// Page-locked host memory (pinned.go): both nil, or neither, when the
	// driver lacks either. The host address (void *) is a uintptr.

	// CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
	memAllocHost func(pp *uintptr, bytesize uintptr) result
	// CUresult cuMemFreeHost(void *p)
	memFreeHost func(p uintptr) result
}

// vmmMissing returns the names of the virtual memory functions the table
// lacks.
func (d *driver) vmmMissing() []string {
	var missing []string
	for _, f := range []struct {
		name string
		nil  bool
	}{
		{fnDeviceGetAttribute, d.deviceGetAttribute == nil},
		{fnMemGetAllocationGranularity, d.memGetAllocationGranularity == nil},
		{fnMemAddressReserve, d.memAddressReserve == nil},
		{fnMemAddressFree, d.memAddressFree == nil},
		{fnMemCreate, d.memCreate == nil},
		{fnMemRelease, d.memRelease == nil},
		{fnMemMap, d.memMap == nil},
		{fnMemSetAccess, d.memSetAccess == nil},
		{fnMemUnmap, d.memUnmap == nil},
	} {
		if f.nil {
			missing = append(missing, f.name)
		}
	}
	return missing
}

// The structs of the virtual memory calls, laid out as cuda.h lays them
// out on the 64-bit platforms the package runs on (a test checks sizes and
// offsets), with the values the backend sets.
//
//	typedef struct CUmemLocation_st {
//	    CUmemLocationType type;  // offset 0, 4 bytes
//	    int id;                  // offset 4, 4 bytes
//	} CUmemLocation;             // 8 bytes
//
//	typedef struct CUmemAllocationProp_st {
//	    CUmemAllocationType type;                        // offset 0
//	    CUmemAllocationHandleType requestedHandleTypes;  // offset 4
//	    CUmemLocation location;                          // offset 8
//	    void *win32HandleMetaData;                       // offset 16
//	    struct {
//	        unsigned char compressionType;               // offset 24
//	        unsigned char gpuDirectRDMACapable;          // offset 25
//	        unsigned short usage;                        // offset 26
//	        unsigned char reserved[4];                   // offset 28
//	    } allocFlags;
//	} CUmemAllocationProp;                               // 32 bytes
//
//	typedef struct CUmemAccessDesc_st {
//	    CUmemLocation location;   // offset 0
//	    CUmemAccess_flags flags;  // offset 8
//	} CUmemAccessDesc;            // 12 bytes
//
// (Older versions of cuda.h have reserved[6] in place of usage and
// reserved[4]: the same size and offsets, zero either way.)
type (
	memLocation struct {
		typ int32 // CUmemLocationType
		id  int32
	}
	memAllocationProp struct {
		typ                  int32 // CUmemAllocationType
		requestedHandleTypes int32 // CUmemAllocationHandleType
		location             memLocation
		win32HandleMetaData  uintptr
		compressionType      uint8
		gpuDirectRDMACapable uint8
		usage                uint16
		reserved             [4]uint8
	}
	memAccessDesc struct {
		location memLocation
		flags    int32 // CUmemAccess_flags
	}
)

// Values of the virtual memory calls' enums (cuda.h).
const (
	memAllocationTypePinned     int32 = 0x1 // CU_MEM_ALLOCATION_TYPE_PINNED
	memHandleTypeNone           int32 = 0x0 // CU_MEM_HANDLE_TYPE_NONE
	memLocationTypeDevice       int32 = 0x1 // CU_MEM_LOCATION_TYPE_DEVICE
	memAccessFlagsProtReadWrite int32 = 0x3 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	memAllocGranularityMinimum  int32 = 0x0 // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	attrVirtualMemoryManagement int32 = 102 // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
)

// Names of the driver functions, as in errors.
const (
	fnInit              = "cuInit"
	fnDeviceGetCount    = "cuDeviceGetCount"
	fnDeviceGet         = "cuDeviceGet"
	fnDeviceGetName     = "cuDeviceGetName"
	fnPrimaryCtxRetain  = "cuDevicePrimaryCtxRetain"
	fnPrimaryCtxRelease = "cuDevicePrimaryCtxRelease"
	fnCtxSetCurrent     = "cuCtxSetCurrent"
	fnMemAlloc          = "cuMemAlloc_v2"
	fnMemFree           = "cuMemFree_v2"
	fnMemGetInfo        = "cuMemGetInfo_v2"

	fnDeviceGetAttribute          = "cuDeviceGetAttribute"
	fnMemGetAllocationGranularity = "cuMemGetAllocationGranularity"
	fnMemAddressReserve           = "cuMemAddressReserve"
	fnMemAddressFree              = "cuMemAddressFree"
	fnMemCreate                   = "cuMemCreate"
	fnMemRelease                  = "cuMemRelease"
	fnMemMap                      = "cuMemMap"
	fnMemSetAccess                = "cuMemSetAccess"
	fnMemUnmap                    = "cuMemUnmap"

	fnMemAllocHost = "cuMemAllocHost_v2"
	fnMemFreeHost  = "cuMemFreeHost"
)

// check returns nil for CUDA_SUCCESS, and otherwise an [*Error] for the call
// named call, with CUDA's own name and description of the code.
func (d *driver) check(call string, r result) error {
	if r == success {
		return nil
	}
	e := &Error{Call: call, Code: int(r)}
	if d.getErrorName != nil {
		var p *byte
		if d.getErrorName(r, &p) == success {
			e.Name = goString(p)
		}
	}
	if d.getErrorString != nil {
		var p *byte
		if d.getErrorString(r, &p) == success {
			e.Text = goString(p)
		}
	}
	if e.Name == "" {
		e.Name = fmt.Sprintf("CUDA error %d", r)
	}
	if e.Text == "" {
		e.Text = "unknown error"
	}
	return e
}

// maxCString bounds goString's search for the terminating NUL, so that a
// string without one cannot make it read without end.
const maxCString = 4096

// goString copies the NUL-terminated C string at p (nil gives ""), at most
// maxCString bytes.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for n < maxCString && *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// bufString returns the bytes of b before the first NUL.
func bufString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
