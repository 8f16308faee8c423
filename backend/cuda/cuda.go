package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/gpualloc/gpualloc"
)

var (
	// ErrNoDriver reports that no usable CUDA driver was found: libcuda
	// could not be loaded, lacks functions the backend needs, or failed to
	// initialize.
	ErrNoDriver = errors.New("no CUDA driver found")
	// ErrNoDevice reports that the driver shows no CUDA device, or not the
	// one asked for.
	ErrNoDevice = errors.New("no CUDA device found")
	// ErrClosed reports a call on a Backend after Close.
	ErrClosed = errors.New("backend is closed")
)

// An Error is a CUDA driver API call that failed. Its message carries CUDA's
// own name and description of the code:
//
//	cuMemAlloc_v2: CUDA_ERROR_INVALID_VALUE: invalid argument
//
// An Error of code CUDA_ERROR_OUT_OF_MEMORY (2) wraps
// [gpualloc.ErrOutOfMemory].
type Error struct {
	Call string // the driver function, such as "cuMemAlloc_v2"
	Code int    // the CUresult it returned
	Name string // CUDA's name of the code, such as "CUDA_ERROR_INVALID_VALUE"
	Text string // CUDA's description of the code, such as "invalid argument"
}

func (e *Error) Error() string { return e.Call + ": " + e.Name + ": " + e.Text }

// Unwrap returns [gpualloc.ErrOutOfMemory] for CUDA_ERROR_OUT_OF_MEMORY, and
// nil for other codes.
func (e *Error) Unwrap() error {
	if result(e.Code) == errOutOfMemory {
		return gpualloc.ErrOutOfMemory
	}
	return nil
}

// openError is an error of Open or Devices: one line that says what is
// missing, wrapping ErrNoDriver or ErrNoDevice and the driver's *Error if
// there is one.
type openError struct {
	msg  string
	errs []error
}

func (e *openError) Error() string   { return "cuda: " + e.msg }
func (e *openError) Unwrap() []error { return e.errs }

// Options say which device to open.
type Options struct {
	// Device is the device's ordinal among those the driver shows, from 0.
	// CUDA_VISIBLE_DEVICES, which the driver reads, chooses and orders
	// them.
	Device int
}

// A Backend is one CUDA device as a [gpualloc.Backend]: Malloc is
// cuMemAlloc_v2, Free cuMemFree_v2 and MemInfo cuMemGetInfo_v2, in the
// device's primary context. It keeps the address and size of every
// allocation it made and has not freed, so that Free can check its
// arguments and Close can free what is left.
//
// A Backend is safe for concurrent use; its calls are serialized.
type Backend struct {
	drv     *driver
	ordinal int
	dev     int32   // CUdevice
	ctx     uintptr // CUcontext: the device's primary context
	name    string

	mu     sync.Mutex
	closed bool
	total  int64    // total bytes, as cuMemGetInfo_v2 reported at Open
	mem    books    // allocations not freed: cuMemAlloc_v2's
	vm     *vmState // virtual memory, nil until Virtual succeeds (vmm.go)
}

// load loads the driver once per process; every Open and Devices shares the
// result, failure included.
var load = sync.OnceValues(loadDriver)

// Open opens device o.Device: it loads the CUDA driver (libcuda.so.1) if this
// is the first call, initializes it and retains the device's primary context.
//
// Without a driver Open returns an error wrapping [ErrNoDriver], without the
// device one wrapping [ErrNoDevice]; either is one line that says why, such
// as "cuda: no CUDA driver found (libcuda.so.1: ...; libcuda.so: ...)"
// or "cuda: CUDA device 2 not found (1 device)". Open does not panic.
func Open(o Options) (*Backend, error) {
	d, err := load()
	if err != nil {
		return nil, err
	}
	return open(d, o)
}

// Devices returns the number of CUDA devices the driver shows. Its errors
// are those of [Open].
func Devices() (int, error) {
	d, err := load()
	if err != nil {
		return 0, err
	}
	return devices(d)
}

// devices initializes the driver and counts its devices.
func devices(d *driver) (int, error) {
	switch r := d.init(0); r {
	case success:
	case errNoDevice:
		return 0, &openError{
			msg:  fmt.Sprintf("no CUDA device found (%v)", d.check(fnInit, r)),
			errs: []error{ErrNoDevice, d.check(fnInit, r)},
		}
	default:
		err := d.check(fnInit, r)
		return 0, &openError{
			msg:  fmt.Sprintf("no usable CUDA driver (%s: %v)", d.lib, err),
			errs: []error{ErrNoDriver, err},
		}
	}
	var n int32
	if err := d.check(fnDeviceGetCount, d.deviceGetCount(&n)); err != nil {
		return 0, &openError{msg: fmt.Sprintf("no usable CUDA driver (%s: %v)", d.lib, err), errs: []error{ErrNoDriver, err}}
	}
	return int(n), nil
}

func open(d *driver, o Options) (*Backend, error) {
	n, err := devices(d)
	if err != nil {
		return nil, err
	}
	switch {
	case n == 0:
		return nil, &openError{msg: "no CUDA device found", errs: []error{ErrNoDevice}}
	case o.Device < 0 || o.Device >= n:
		plural := "s"
		if n == 1 {
			plural = ""
		}
		return nil, &openError{
			msg:  fmt.Sprintf("CUDA device %d not found (%d device%s)", o.Device, n, plural),
			errs: []error{ErrNoDevice},
		}
	}
	b := &Backend{drv: d, ordinal: o.Device}
	b.mem = books{
		dev: b, allocFn: fnMemAlloc, freeFn: fnMemFree,
		alloc: func(size int64) (addr uint64, r result) {
			r = d.memAlloc(&addr, uintptr(size))
			return addr, r
		},
		free: d.memFree,
		live: make(map[uint64]int64),
	}
	if err := d.check(fnDeviceGet, d.deviceGet(&b.dev, int32(o.Device))); err != nil {
		return nil, b.errorf("open: %w", err)
	}
	b.name = fmt.Sprintf("CUDA device %d", o.Device)
	if d.deviceGetName != nil {
		buf := make([]byte, 256)
		if d.deviceGetName(&buf[0], int32(len(buf)), b.dev) == success {
			if s := strings.TrimSpace(bufString(buf)); s != "" {
				b.name = s
			}
		}
	}
	if err := d.check(fnPrimaryCtxRetain, d.primaryCtxRetain(&b.ctx, b.dev)); err != nil {
		return nil, b.errorf("open: %w", err)
	}
	_, total, err := b.memInfo()
	if err != nil {
		d.primaryCtxRelease(b.dev)
		return nil, b.errorf("open: %w", err)
	}
	b.total = total
	return b, nil
}

// errorf formats an error of the backend's device: "cuda: device 0: ...".
func (b *Backend) errorf(format string, args ...any) error {
	return fmt.Errorf("cuda: device %d: "+format, append([]any{b.ordinal}, args...)...)
}

// setCurrent makes the backend's context current on the calling thread.
// The caller has locked its goroutine to the thread (runtime.LockOSThread)
// for as long as it makes driver calls that need the context.
func (b *Backend) setCurrent() error {
	return b.drv.check(fnCtxSetCurrent, b.drv.ctxSetCurrent(b.ctx))
}

// Name returns the device's name, as cuDeviceGetName reports it ("NVIDIA
// H100 80GB HBM3"), or "CUDA device N" if the driver does not say.
func (b *Backend) Name() string { return b.name }

// Device returns the device's ordinal, Options.Device.
func (b *Backend) Device() int { return b.ordinal }

// InUse returns the number and total bytes of the allocations made by
// Malloc and not yet freed.
func (b *Backend) InUse() (allocations int, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mem.live), b.mem.bytes
}

// Malloc allocates size bytes of device memory with cuMemAlloc_v2 and
// returns their device address, aligned to at least 256 bytes. When the
// device has no room, the error wraps [gpualloc.ErrOutOfMemory]; other driver
// failures wrap an [*Error].
func (b *Backend) Malloc(size int64) (uint64, error) {
	if size < 1 {
		return 0, b.errorf("malloc of %d bytes: %w", size, gpualloc.ErrInvalidSize)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, b.errorf("malloc of %d bytes: %w", size, ErrClosed)
	}
	addr, err := b.mem.malloc(size)
	if err != nil {
		return 0, b.errorf("%w", err)
	}
	return addr, nil
}

// Free frees the allocation at addr with cuMemFree_v2. addr and size must be
// those of a Malloc of this backend not yet freed; otherwise Free returns an
// error wrapping [gpualloc.ErrInvalidFree] and calls nothing. If the driver
// fails, the allocation stays on the backend's books (Close tries again).
func (b *Backend) Free(addr uint64, size int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.errorf("free of %#x (%d bytes): %w", addr, size, ErrClosed)
	}
	if err := b.mem.release(addr, size); err != nil {
		return b.errorf("%w", err)
	}
	return nil
}

// MemInfo reports the device's free and total bytes with cuMemGetInfo_v2.
// Free bytes count every process's allocations, not only this backend's.
// If the driver fails, or after Close, MemInfo reports no free bytes (and
// the total measured at Open), so that a strategy that consults it gives
// back what it caches rather than counting on memory that may not be there.
func (b *Backend) MemInfo() (free, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, b.total
	}
	free, total, err := b.memInfo()
	if err != nil {
		return 0, b.total
	}
	return free, total
}

// memInfo calls cuMemGetInfo_v2 in the backend's context.
func (b *Backend) memInfo() (free, total int64, err error) {
	var f, t uintptr
	err = b.inContext(func() error { return b.drv.check(fnMemGetInfo, b.drv.memGetInfo(&f, &t)) })
	return int64(f), int64(t), err
}

// Close unmaps, releases and frees what a [VirtualBackend] of it holds
// (see [Backend.Virtual]), frees every allocation still held, in address
// order, and releases the device's primary context. It returns the first failure, if any, after
// trying everything. A second Close does nothing and returns nil; every
// other method then fails with [ErrClosed].
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	var errs []error
	if err := b.setCurrent(); err != nil {
		errs = append(errs, b.errorf("close: %w", err))
	} else {
		errs = append(errs, b.closeVM()...)
		for _, err := range b.mem.releaseAll() {
			errs = append(errs, b.errorf("%w", err))
		}
	}
	b.mem.live, b.mem.bytes = nil, 0
	if err := b.drv.check(fnPrimaryCtxRelease, b.drv.primaryCtxRelease(b.dev)); err != nil {
		errs = append(errs, b.errorf("close: %w", err))
	}
	return closeErrors(errs)
}

// closeErrors returns nil, the one error of errs, or the first with the
// number of the others.
func closeErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	default:
		return &closeError{first: errs[0], more: len(errs) - 1}
	}
}

// closeError is the first of several failures of Close, on one line.
type closeError struct {
	first error
	more  int
}

func (e *closeError) Error() string {
	return fmt.Sprintf("%v (and %d more failures)", e.first, e.more)
}

func (e *closeError) Unwrap() error { return e.first }

// oneLine joins the lines of s with "; ", for messages that must be one
// line.
func oneLine(s string) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}
