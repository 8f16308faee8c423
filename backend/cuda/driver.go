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
}

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
