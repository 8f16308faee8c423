package cuda

import (
	"fmt"
	"maps"
	"runtime"
	"slices"

	"github.com/gpualloc/gpualloc"
)

// books are the allocations a backend made and has not freed, with the
// driver calls that make and free them: cuMemAlloc_v2 and cuMemFree_v2 for
// a Backend, cuMemAllocHost_v2 and cuMemFreeHost for a PinnedBackend. Its
// methods make the calls in the context of dev, the device, and keep the
// books; the caller holds its backend's lock and prefixes the errors with
// its own name.
type books struct {
	dev             *Backend
	allocFn, freeFn string                            // the calls' names, for errors
	alloc           func(size int64) (uint64, result) // the driver's allocation
	free            func(addr uint64) result          // the driver's free
	live            map[uint64]int64                  // address -> size
	bytes           int64                             // sum of live
}

// inContext runs f with the device's context current on the calling
// thread, which it locks for the while.
func (b *Backend) inContext(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.setCurrent(); err != nil {
		return err
	}
	return f()
}

// malloc allocates size bytes with the driver and notes them.
func (k *books) malloc(size int64) (uint64, error) {
	var addr uint64
	err := k.dev.inContext(func() error {
		var r result
		addr, r = k.alloc(size)
		return k.dev.drv.check(k.allocFn, r)
	})
	if err != nil {
		return 0, fmt.Errorf("malloc of %d bytes: %w", size, err)
	}
	k.live[addr] = size
	k.bytes += size
	return addr, nil
}

// release frees the allocation at addr of size bytes with the driver and
// takes it off the books. An address or size that is not on them is an
// error wrapping [gpualloc.ErrInvalidFree], and calls nothing; if the
// driver fails, the allocation stays on the books.
func (k *books) release(addr uint64, size int64) error {
	got, ok := k.live[addr]
	switch {
	case !ok:
		return fmt.Errorf("free of %#x (%d bytes): no allocation of this backend starts there: %w",
			addr, size, gpualloc.ErrInvalidFree)
	case got != size:
		return fmt.Errorf("free of %#x with size %d: it was allocated with %d bytes: %w",
			addr, size, got, gpualloc.ErrInvalidFree)
	}
	if err := k.dev.inContext(func() error { return k.dev.drv.check(k.freeFn, k.free(addr)) }); err != nil {
		return fmt.Errorf("free of %#x (%d bytes): %w", addr, size, err)
	}
	delete(k.live, addr)
	k.bytes -= size
	return nil
}

// releaseAll frees every allocation still on the books, in address order,
// with the context already current, and empties them. It returns an error
// for each free that failed.
func (k *books) releaseAll() []error {
	var errs []error
	for _, a := range slices.Sorted(maps.Keys(k.live)) {
		if err := k.dev.drv.check(k.freeFn, k.free(a)); err != nil {
			errs = append(errs, fmt.Errorf("close: free of %#x (%d bytes): %w", a, k.live[a], err))
		}
	}
	k.live, k.bytes = nil, 0
	return errs
}
