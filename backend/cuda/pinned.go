package cuda

import (
	"fmt"
	"sync"

	"github.com/gpualloc/gpualloc"
)

// PinnedOptions say which device's context page-locked host memory is
// allocated in, and how much of it may be held at once.
type PinnedOptions struct {
	// Device is the ordinal of the device whose primary context the
	// memory is allocated in, as [Options].Device. The memory is usable by
	// every device of the process (the driver maps it into the unified
	// address space), but it belongs to that context.
	Device int
	// Capacity, if > 0, limits the bytes held at once: MemInfo reports
	// (Capacity - held, Capacity), and a Malloc beyond it fails with an
	// error wrapping [gpualloc.ErrOutOfMemory] without calling the driver.
	// 0 limits it to the machine's physical memory (sysinfo's total RAM):
	// page-locked memory cannot be swapped, so the operating system
	// refuses, or slows down, well before.
	Capacity int64
}

// A PinnedBackend is page-locked ("pinned") host memory as a
// [gpualloc.Backend]: Malloc is cuMemAllocHost_v2 and Free cuMemFreeHost, in
// a device's primary context, so that any strategy pools pinned memory as
// PyTorch's CachingHostAllocator does for the copies between host and
// device (the memory a DMA engine reads without a staging copy). Addresses
// are host virtual addresses, which the device can also use.
//
// Policy: MemInfo reports the limit of [PinnedOptions].Capacity less the
// bytes held, not what the operating system has free, so that a replay's
// figures do not depend on other processes. The backend keeps the address
// and size of every allocation it made and has not freed: Free of an
// unknown address or with another size fails with
// [gpualloc.ErrInvalidFree] and calls nothing, and Close frees what is left
// before it releases the device's context.
//
// Costs (measured on an H200, BENCHMARKS.md): cuMemAllocHost_v2 pins every
// page, from about 0.5 ms for a few KiB to 0.35 s a GiB, and cuMemFreeHost
// takes about a quarter of that; both are two to three orders of magnitude
// dearer than cuMemAlloc_v2, which is why pinned memory is pooled.
//
// A PinnedBackend is safe for concurrent use; its calls are serialized.
type PinnedBackend struct {
	dev   *Backend // the device whose context holds the memory
	limit int64

	mu     sync.Mutex
	closed bool
	mem    books // allocations not freed
}

// OpenPinned opens page-locked host memory in the context of device
// o.Device. Without a driver, or one that lacks cuMemAllocHost_v2 or
// cuMemFreeHost, it returns an error wrapping [ErrNoDriver]; without the
// device, one wrapping [ErrNoDevice]: one line, as [Open]'s.
func OpenPinned(o PinnedOptions) (*PinnedBackend, error) {
	if o.Capacity < 0 {
		return nil, fmt.Errorf("cuda: pinned memory: negative capacity %d", o.Capacity)
	}
	d, err := load()
	if err != nil {
		return nil, err
	}
	return openPinned(d, o, hostMemory)
}

// openPinned is OpenPinned on the driver d, with total giving the
// machine's memory.
func openPinned(d *driver, o PinnedOptions, total func() (int64, error)) (*PinnedBackend, error) {
	if d.memAllocHost == nil || d.memFreeHost == nil {
		return nil, &openError{
			msg:  fmt.Sprintf("no usable CUDA driver for pinned memory (%s lacks %s, %s)", d.lib, fnMemAllocHost, fnMemFreeHost),
			errs: []error{ErrNoDriver},
		}
	}
	limit := o.Capacity
	if limit == 0 {
		var err error
		if limit, err = total(); err != nil {
			return nil, fmt.Errorf("cuda: pinned memory: %w", err)
		}
	}
	b, err := open(d, Options{Device: o.Device})
	if err != nil {
		return nil, err
	}
	p := &PinnedBackend{dev: b, limit: limit}
	p.mem = books{
		dev: b, allocFn: fnMemAllocHost, freeFn: fnMemFreeHost,
		alloc: func(size int64) (uint64, result) {
			var addr uintptr
			r := d.memAllocHost(&addr, uintptr(size))
			return uint64(addr), r
		},
		free: func(addr uint64) result { return d.memFreeHost(uintptr(addr)) },
		live: make(map[uint64]int64),
	}
	return p, nil
}

// errorf formats an error of the backend: "cuda: pinned memory (device 0): ...".
func (p *PinnedBackend) errorf(format string, args ...any) error {
	return fmt.Errorf("cuda: pinned memory (device %d): "+format, append([]any{p.dev.ordinal}, args...)...)
}

// Name returns "pinned host memory (" and the device's name ")".
func (p *PinnedBackend) Name() string { return "pinned host memory (" + p.dev.name + ")" }

// Device returns the ordinal of the device whose context holds the memory.
func (p *PinnedBackend) Device() int { return p.dev.ordinal }

// InUse returns the number and total bytes of the allocations made by
// Malloc and not yet freed.
func (p *PinnedBackend) InUse() (allocations int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mem.live), p.mem.bytes
}

// Malloc allocates size bytes of page-locked host memory with
// cuMemAllocHost_v2 and returns their address. Beyond the backend's limit,
// or when the driver has no room, the error wraps
// [gpualloc.ErrOutOfMemory]; other driver failures wrap an [*Error].
func (p *PinnedBackend) Malloc(size int64) (uint64, error) {
	if size < 1 {
		return 0, p.errorf("malloc of %d bytes: %w", size, gpualloc.ErrInvalidSize)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return 0, p.errorf("malloc of %d bytes: %w", size, ErrClosed)
	case size > p.limit-p.mem.bytes:
		return 0, p.errorf("malloc of %d bytes: %d of the limit of %d bytes held: %w",
			size, p.mem.bytes, p.limit, gpualloc.ErrOutOfMemory)
	}
	addr, err := p.mem.malloc(size)
	if err != nil {
		return 0, p.errorf("%w", err)
	}
	return addr, nil
}

// Free frees the allocation at addr with cuMemFreeHost. addr and size must
// be those of a Malloc of this backend not yet freed; otherwise Free
// returns an error wrapping [gpualloc.ErrInvalidFree] and calls nothing. If
// the driver fails, the allocation stays on the backend's books (Close
// tries again).
func (p *PinnedBackend) Free(addr uint64, size int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return p.errorf("free of %#x (%d bytes): %w", addr, size, ErrClosed)
	}
	if err := p.mem.release(addr, size); err != nil {
		return p.errorf("%w", err)
	}
	return nil
}

// MemInfo reports the backend's limit less the bytes held, and the limit
// (see [PinnedOptions].Capacity). After Close it reports no free bytes.
func (p *PinnedBackend) MemInfo() (free, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, p.limit
	}
	return p.limit - p.mem.bytes, p.limit
}

// Close frees every allocation still held, in address order, and releases
// the device's primary context. It returns the first failure, if any,
// after trying everything. A second Close does nothing and returns nil;
// every other method then fails with [ErrClosed].
func (p *PinnedBackend) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	err := p.dev.inContext(func() error {
		for _, err := range p.mem.releaseAll() {
			errs = append(errs, p.errorf("%w", err))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, p.errorf("close: %w", err))
	}
	p.mem.live, p.mem.bytes = nil, 0
	if err := p.dev.Close(); err != nil {
		errs = append(errs, err)
	}
	return closeErrors(errs)
}
