package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gpualloc/gpualloc"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

func openFake(t *testing.T, f *fakeGPU) *Backend {
	t.Helper()
	b, err := open(f.driver(), Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return b
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeGPU)
		opt   Options
		is    error // sentinel the error wraps, nil for none
		code  int   // code of the *Error it wraps, 0 for none
		msg   string
	}{
		{"no device at init", func(f *fakeGPU) { f.initRC = errNoDevice }, Options{}, ErrNoDevice, 100,
			"cuda: no CUDA device found (cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected)"},
		{"driver mismatch", func(f *fakeGPU) { f.initRC = 803 }, Options{}, ErrNoDriver, 803,
			"cuda: no usable CUDA driver (libfakecuda.so: cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: " +
				"system has unsupported display driver / cuda driver combination)"},
		{"unknown init failure", func(f *fakeGPU) { f.initRC = 12345 }, Options{}, ErrNoDriver, 12345,
			"cuda: no usable CUDA driver (libfakecuda.so: cuInit: CUDA error 12345: unknown error)"},
		{"no devices", func(f *fakeGPU) { f.count = 0 }, Options{}, ErrNoDevice, 0,
			"cuda: no CUDA device found"},
		{"device past the last", nil, Options{Device: 1}, ErrNoDevice, 0,
			"cuda: CUDA device 1 not found (1 device)"},
		{"negative device", func(f *fakeGPU) { f.count = 2 }, Options{Device: -1}, ErrNoDevice, 0,
			"cuda: CUDA device -1 not found (2 devices)"},
		{"retain fails", func(f *fakeGPU) { f.retainRC = 700 }, Options{}, nil, 700,
			"cuda: device 0: open: cuDevicePrimaryCtxRetain: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
		{"meminfo fails", func(f *fakeGPU) { f.infoRC = errInvalidValue }, Options{}, nil, 1,
			"cuda: device 0: open: cuMemGetInfo_v2: CUDA_ERROR_INVALID_VALUE: invalid argument"},
		{"set context fails", func(f *fakeGPU) { f.setRC = 201 }, Options{}, nil, 201,
			"cuda: device 0: open: cuCtxSetCurrent: CUDA_ERROR_INVALID_CONTEXT: invalid device context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeGPU(GiB)
			if tt.setup != nil {
				tt.setup(f)
			}
			b, err := open(f.driver(), tt.opt)
			if err == nil {
				b.Close()
				t.Fatal("open succeeded")
			}
			if got := err.Error(); got != tt.msg {
				t.Errorf("error:\n got %s\nwant %s", got, tt.msg)
			}
			for _, s := range []error{ErrNoDriver, ErrNoDevice} {
				if want := s == tt.is; errors.Is(err, s) != want {
					t.Errorf("errors.Is(err, %q) = %v, want %v", s, !want, want)
				}
			}
			var ce *Error
			switch {
			case !errors.As(err, &ce) && tt.code != 0:
				t.Errorf("error does not wrap a *cuda.Error of code %d", tt.code)
			case ce != nil && ce.Code != tt.code:
				t.Errorf("wrapped *cuda.Error has code %d, want %d", ce.Code, tt.code)
			}
			if f.retain != 0 {
				t.Errorf("primary context retained %d times after a failed open", f.retain)
			}
		})
	}
}

func TestBackend(t *testing.T) {
	f := newFakeGPU(GiB)
	b := openFake(t, f)
	if got, want := b.Name(), "Fake GPU 80GB"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	if got, want := f.retain, 1; got != want {
		t.Errorf("primary context retained %d times, want %d", got, want)
	}
	var _ gpualloc.Backend = b

	sizes := []int64{1, 255, 256, 4097, 2*MiB + 1, 100 * MiB}
	addrs := make([]uint64, len(sizes))
	var sum int64
	for i, size := range sizes {
		f.forgetContexts(true)
		a, err := b.Malloc(size)
		if err != nil {
			t.Fatalf("Malloc(%d): %v", size, err)
		}
		if f.allocs[a] != size {
			t.Fatalf("Malloc(%d) = %#x, which the driver did not allocate with that size", size, a)
		}
		addrs[i] = a
		sum += size
	}
	if n, bytes := b.InUse(); n != len(sizes) || bytes != sum {
		t.Errorf("InUse() = %d, %d; want %d, %d", n, bytes, len(sizes), sum)
	}
	f.forgetContexts(true)
	if free, total := b.MemInfo(); free != GiB-sum || total != GiB {
		t.Errorf("MemInfo() = %d, %d; want %d, %d", free, total, GiB-sum, GiB)
	}

	// Invalid frees change nothing and call no driver function.
	frees := f.callCount(fnMemFree)
	for _, c := range []struct {
		addr uint64
		size int64
		msg  string
	}{
		{addrs[2], 255, fmt.Sprintf("cuda: device 0: free of %#x with size 255: it was allocated with 256 bytes: invalid free", addrs[2])},
		{addrs[2] + 1, 255, fmt.Sprintf("cuda: device 0: free of %#x (255 bytes): no allocation of this backend starts there: invalid free", addrs[2]+1)},
		{0, 1, "cuda: device 0: free of 0x0 (1 bytes): no allocation of this backend starts there: invalid free"},
	} {
		err := b.Free(c.addr, c.size)
		if !errors.Is(err, gpualloc.ErrInvalidFree) {
			t.Errorf("Free(%#x, %d) = %v, want an error wrapping gpualloc.ErrInvalidFree", c.addr, c.size, err)
		} else if err.Error() != c.msg {
			t.Errorf("Free(%#x, %d):\n got %s\nwant %s", c.addr, c.size, err, c.msg)
		}
	}
	if got := f.callCount(fnMemFree); got != frees {
		t.Errorf("invalid frees made %d driver calls", got-frees)
	}
	if n, bytes := b.InUse(); n != len(sizes) || bytes != sum {
		t.Errorf("after invalid frees, InUse() = %d, %d; want %d, %d", n, bytes, len(sizes), sum)
	}

	// Invalid sizes never reach the driver.
	mallocs := f.callCount(fnMemAlloc)
	for _, size := range []int64{0, -1} {
		if _, err := b.Malloc(size); !errors.Is(err, gpualloc.ErrInvalidSize) {
			t.Errorf("Malloc(%d) = %v, want an error wrapping gpualloc.ErrInvalidSize", size, err)
		}
	}
	if got := f.callCount(fnMemAlloc); got != mallocs {
		t.Errorf("Malloc of invalid sizes made %d driver calls", got-mallocs)
	}

	// Free everything; a second free of the same block is invalid.
	for i, a := range addrs {
		f.forgetContexts(true)
		if err := b.Free(a, sizes[i]); err != nil {
			t.Fatalf("Free(%#x, %d): %v", a, sizes[i], err)
		}
	}
	if err := b.Free(addrs[0], sizes[0]); !errors.Is(err, gpualloc.ErrInvalidFree) {
		t.Errorf("double Free = %v, want an error wrapping gpualloc.ErrInvalidFree", err)
	}
	if n, bytes := b.InUse(); n != 0 || bytes != 0 {
		t.Errorf("InUse() = %d, %d after freeing everything", n, bytes)
	}
	if len(f.allocs) != 0 {
		t.Errorf("the driver still holds %d allocations", len(f.allocs))
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if f.retain != 0 {
		t.Errorf("primary context retained %d times after Close", f.retain)
	}
}

func TestMallocErrors(t *testing.T) {
	f := newFakeGPU(GiB)
	b := openFake(t, f)
	defer b.Close()

	// Out of memory wraps gpualloc.ErrOutOfMemory and the *Error.
	_, err := b.Malloc(GiB + 1)
	if want := "cuda: device 0: malloc of 1073741825 bytes: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory"; err == nil || err.Error() != want {
		t.Errorf("Malloc(1 GiB + 1):\n got %v\nwant %s", err, want)
	}
	if !errors.Is(err, gpualloc.ErrOutOfMemory) {
		t.Errorf("out of memory error %v does not wrap gpualloc.ErrOutOfMemory", err)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != 2 || ce.Call != "cuMemAlloc_v2" || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("out of memory error wraps %#v, want a *cuda.Error of cuMemAlloc_v2, code 2", ce)
	}

	// Other failures are a *Error, not out of memory.
	for _, c := range []struct {
		rc  result
		msg string
	}{
		{errInvalidValue, "cuda: device 0: malloc of 4096 bytes: cuMemAlloc_v2: CUDA_ERROR_INVALID_VALUE: invalid argument"},
		{700, "cuda: device 0: malloc of 4096 bytes: cuMemAlloc_v2: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"},
		{999, "cuda: device 0: malloc of 4096 bytes: cuMemAlloc_v2: CUDA error 999: unknown error"},
	} {
		f.allocRC = c.rc
		_, err := b.Malloc(4096)
		if err == nil || err.Error() != c.msg {
			t.Errorf("Malloc failing with %d:\n got %v\nwant %s", c.rc, err, c.msg)
		}
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			t.Errorf("error %v wraps gpualloc.ErrOutOfMemory", err)
		}
		if !errors.As(err, &ce) || ce.Code != int(c.rc) {
			t.Errorf("error %v does not wrap a *cuda.Error of code %d", err, c.rc)
		}
	}
	if n, _ := b.InUse(); n != 0 {
		t.Errorf("failed mallocs left %d allocations on the books", n)
	}

	// A failed set of the context fails the call.
	f.setRC = 201
	if _, err := b.Malloc(4096); err == nil || !strings.Contains(err.Error(), "cuCtxSetCurrent: CUDA_ERROR_INVALID_CONTEXT") {
		t.Errorf("Malloc with cuCtxSetCurrent failing = %v", err)
	}

	// Without the driver's error strings, the code is still reported.
	d := f.driver()
	d.getErrorName, d.getErrorString = nil, nil
	if got, want := d.check("cuFoo", 2).Error(), "cuFoo: CUDA error 2: unknown error"; got != want {
		t.Errorf("check without error strings = %q, want %q", got, want)
	}
	if err := d.check("cuFoo", success); err != nil {
		t.Errorf("check of CUDA_SUCCESS = %v", err)
	}
}

func TestFreeFailureKeepsAllocation(t *testing.T) {
	f := newFakeGPU(GiB)
	b := openFake(t, f)
	a, err := b.Malloc(MiB)
	if err != nil {
		t.Fatal(err)
	}
	f.freeRC = 700
	err = b.Free(a, MiB)
	want := fmt.Sprintf("cuda: device 0: free of %#x (1048576 bytes): cuMemFree_v2: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered", a)
	if err == nil || err.Error() != want {
		t.Errorf("failing Free:\n got %v\nwant %s", err, want)
	}
	if n, bytes := b.InUse(); n != 1 || bytes != MiB {
		t.Errorf("after a failed Free, InUse() = %d, %d; want 1, %d", n, bytes, MiB)
	}
	// Close frees it.
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(f.allocs) != 0 {
		t.Errorf("Close left %d allocations in the driver", len(f.allocs))
	}
}

func TestClose(t *testing.T) {
	f := newFakeGPU(GiB)
	b := openFake(t, f)
	var addrs []uint64
	for i := range 5 {
		a, err := b.Malloc(int64(i+1) * MiB)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	if err := b.Free(addrs[1], 2*MiB); err != nil {
		t.Fatal(err)
	}
	f.forgetContexts(true)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(f.allocs) != 0 || f.used != 0 {
		t.Errorf("Close left %d allocations (%d bytes) in the driver", len(f.allocs), f.used)
	}
	if f.retain != 0 {
		t.Errorf("primary context retained %d times after Close", f.retain)
	}
	if n, bytes := b.InUse(); n != 0 || bytes != 0 {
		t.Errorf("InUse() = %d, %d after Close", n, bytes)
	}

	// Everything after Close fails with ErrClosed, and calls no driver function.
	calls := f.callCount(fnMemAlloc) + f.callCount(fnMemFree) + f.callCount(fnMemGetInfo)
	if _, err := b.Malloc(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Malloc after Close = %v, want an error wrapping ErrClosed", err)
	}
	if err := b.Free(addrs[0], MiB); !errors.Is(err, ErrClosed) {
		t.Errorf("Free after Close = %v, want an error wrapping ErrClosed", err)
	}
	if free, total := b.MemInfo(); free != 0 || total != GiB {
		t.Errorf("MemInfo after Close = %d, %d; want 0, %d", free, total, GiB)
	}
	if got := f.callCount(fnMemAlloc) + f.callCount(fnMemFree) + f.callCount(fnMemGetInfo); got != calls {
		t.Errorf("calls after Close made %d driver calls", got-calls)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if f.retain != 0 {
		t.Errorf("second Close released the primary context again: retain count %d", f.retain)
	}
}

func TestCloseFailures(t *testing.T) {
	f := newFakeGPU(GiB)
	b := openFake(t, f)
	var addrs []uint64
	for range 4 {
		a, err := b.Malloc(MiB)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	f.failFree[addrs[1]] = 700
	f.failFree[addrs[3]] = 700
	err := b.Close()
	want := fmt.Sprintf("cuda: device 0: close: free of %#x (1048576 bytes): cuMemFree_v2: CUDA_ERROR_ILLEGAL_ADDRESS: "+
		"an illegal memory access was encountered (and 1 more failures)", addrs[1])
	if err == nil || err.Error() != want {
		t.Errorf("Close:\n got %v\nwant %s", err, want)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != 700 {
		t.Errorf("Close error does not wrap the *cuda.Error of code 700")
	}
	if len(f.allocs) != 2 {
		t.Errorf("the driver holds %d allocations, want the 2 whose free failed", len(f.allocs))
	}
	if f.retain != 0 {
		t.Errorf("the primary context is still retained after Close")
	}
}

func TestMemInfoFailure(t *testing.T) {
	f := newFakeGPU(GiB)
	b := openFake(t, f)
	defer b.Close()
	f.infoRC = 700
	if free, total := b.MemInfo(); free != 0 || total != GiB {
		t.Errorf("MemInfo with the driver failing = %d, %d; want 0, %d", free, total, GiB)
	}
	if free, total := b.MemInfo(); free != GiB || total != GiB {
		t.Errorf("MemInfo after the failure = %d, %d; want %d, %d", free, total, GiB, GiB)
	}
}

// TestConcurrent uses one Backend from several goroutines; the fake driver
// checks that the context is current on the thread of every memory call.
func TestConcurrent(t *testing.T) {
	f := newFakeGPU(GiB)
	b := openFake(t, f)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			type alloc struct {
				addr uint64
				size int64
			}
			var live []alloc
			for i := range 200 {
				f.forgetContexts(false)
				size := int64(g*1000 + i + 1)
				a, err := b.Malloc(size)
				if err != nil {
					errs <- err
					return
				}
				live = append(live, alloc{a, size})
				if i%3 == 2 {
					f.forgetContexts(false)
					if err := b.Free(live[0].addr, live[0].size); err != nil {
						errs <- err
						return
					}
					live = live[1:]
				}
				f.forgetContexts(false)
				if free, total := b.MemInfo(); free <= 0 || total != GiB {
					errs <- fmt.Errorf("MemInfo() = %d, %d", free, total)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(f.allocs) != 0 {
		t.Errorf("Close left %d allocations in the driver", len(f.allocs))
	}
}

func TestDeviceName(t *testing.T) {
	f := newFakeGPU(GiB)
	f.name = ""
	b := openFake(t, f)
	defer b.Close()
	if got, want := b.Name(), "CUDA device 0"; got != want {
		t.Errorf("Name() without cuDeviceGetName = %q, want %q", got, want)
	}
	f = newFakeGPU(GiB)
	f.name = strings.Repeat("x", 300)
	b2 := openFake(t, f)
	defer b2.Close()
	if got := b2.Name(); got != strings.Repeat("x", 255) {
		t.Errorf("Name() of a long name = %d bytes, want 255", len(got))
	}
}

func TestGoString(t *testing.T) {
	if got := goString(nil); got != "" {
		t.Errorf("goString(nil) = %q", got)
	}
	b := cstr("CUDA_ERROR_INVALID_VALUE")
	if got := goString(&b[0]); got != "CUDA_ERROR_INVALID_VALUE" {
		t.Errorf("goString = %q", got)
	}
	long := make([]byte, maxCString+10)
	for i := range long {
		long[i] = 'a'
	}
	if got := goString(&long[0]); len(got) != maxCString {
		t.Errorf("goString of an unterminated string read %d bytes, want %d", len(got), maxCString)
	}
	if got := bufString([]byte("abc")); got != "abc" {
		t.Errorf("bufString without NUL = %q", got)
	}
}

func TestOneLine(t *testing.T) {
	if got, want := oneLine("a: b\n  c\n\n"), "a: b; c"; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
}
