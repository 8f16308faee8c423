package unpooled

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
)

// Config are the parameters of an unpooled allocator. There are none; the
// type exists so that every MXNet pool is built the same way.
type Config struct{}

// DefaultConfig returns the (empty) configuration.
func DefaultConfig() Config { return Config{} }

// An Allocator passes every request to the device: MXNet's "Unpooled"
// storage manager. It implements [gpualloc.Allocator],
// [gpualloc.StatsReporter], [gpualloc.Releaser] and [gpualloc.Specer]. An
// Allocator is not safe for concurrent use.
type Allocator struct {
	b    gpualloc.Backend
	m    gpualloc.Meter
	live blocktable.Table[int64] // bytes of the blocks handed out, by Handle
}

// New returns an allocator that takes its memory from b.
func New(b gpualloc.Backend, _ Config) (*Allocator, error) {
	if b == nil {
		return nil, errors.New("unpooled: nil Backend")
	}
	return &Allocator{b: b}, nil
}

// Spec returns "unpooled".
func (a *Allocator) Spec() string { return "unpooled" }

// Stats returns the allocator's counters. Reserved always equals Allocated
// and Requested, and CacheHits is 0.
func (a *Allocator) Stats() gpualloc.Stats { return a.m.Stats() }

// Alloc allocates exactly size bytes from the device. If the device has no
// room, the error wraps [gpualloc.ErrOutOfMemory]; there is nothing to
// release and no retry.
func (a *Allocator) Alloc(size int64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, fmt.Errorf("unpooled: alloc of %d bytes: %w", size, gpualloc.ErrInvalidSize)
	}
	addr, err := a.b.Malloc(size)
	if err != nil {
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			a.m.CountOOM()
		}
		return gpualloc.Block{}, fmt.Errorf("unpooled: alloc of %d bytes: %w", size, err)
	}
	a.m.CountDeviceMalloc(size)
	h := a.live.Put(addr, size)
	a.m.CountAlloc(size, size, false)
	return gpualloc.Block{Addr: addr, Size: size, Requested: size, Handle: h}, nil
}

// Free returns a live block to the device. A block that is not live, or
// whose Size or Requested differ from what Alloc returned, gives an error
// wrapping [gpualloc.ErrInvalidFree] and changes nothing. If the device
// refuses the free, the block stays live and the error is returned.
func (a *Allocator) Free(b gpualloc.Block) error {
	rec := a.live.Get(b.Handle, b.Addr)
	if rec == nil {
		return fmt.Errorf("unpooled: free of %#x (%d bytes): no live block there: %w", b.Addr, b.Size, gpualloc.ErrInvalidFree)
	}
	size := *rec
	if b.Size != size || b.Requested != size {
		return fmt.Errorf("unpooled: free of %#x with Size %d, Requested %d: the live block there has %d bytes: %w",
			b.Addr, b.Size, b.Requested, size, gpualloc.ErrInvalidFree)
	}
	if err := a.b.Free(b.Addr, size); err != nil {
		return fmt.Errorf("unpooled: free of %#x (%d bytes): %w", b.Addr, size, err)
	}
	a.live.Delete(b.Handle)
	a.m.CountDeviceFree(size)
	a.m.CountFree(size, size)
	return nil
}

// FreeSpace returns zeros: the allocator holds no free memory. It
// implements [gpualloc.FreeSpaceReporter].
func (a *Allocator) FreeSpace() (largest, total int64) { return 0, 0 }

// ReleaseAll does nothing: the allocator caches nothing.
func (a *Allocator) ReleaseAll() error { return nil }
