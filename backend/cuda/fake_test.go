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

	calls map[string]int
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
	}
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
			if !f.inCtx() {
				return 201
			}
			if rc := take(&f.allocRC); rc != success {
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
			if !f.inCtx() {
				return 201
			}
			if rc := take(&f.freeRC); rc != success {
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
			if !f.inCtx() {
				return 201
			}
			if rc := take(&f.infoRC); rc != success {
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
