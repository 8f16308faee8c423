package segment

import "github.com/gpualloc/gpualloc"

// A Front is a [Pool] as a strategy hands it out: the methods of its
// allocator, and its spec. bestfit and tlsf embed one under an unexported
// name, so that their Pool has these methods and no field or method more;
// [InitFront] and [PoolOf] are functions rather than methods for the same
// reason. The zero Front is not ready: call InitFront. A Front must not be
// copied once ready, and is not safe for concurrent use.
type Front struct {
	pool Pool
	spec string
}

// InitFront makes f an empty pool with the index fit, as [Pool.Init] makes
// one, whose Spec is spec.
func InitFront(f *Front, b gpualloc.Backend, name, spec string, c Config, fit Fit) error {
	f.spec = spec
	return f.pool.Init(b, name, c, fit)
}

// PoolOf returns the pool behind f, for tests that check its layout.
func PoolOf(f *Front) *Pool { return &f.pool }

// Spec returns the pool's full spec, as the strategy wrote it.
func (f *Front) Spec() string { return f.spec }

// Stats returns the pool's counters.
func (f *Front) Stats() gpualloc.Stats { return f.pool.Stats() }

// Alloc returns a block for a request of size bytes, found as [Pool.Alloc]
// finds it. If no free block fits, the pool takes a new segment; if the
// device is out of memory it returns its entirely free segments to the
// device and tries again, then tries a segment of just the block needed,
// and if that fails too the error wraps [gpualloc.ErrOutOfMemory]. The pool
// stays usable after a failure.
func (f *Front) Alloc(size int64) (gpualloc.Block, error) {
	addr, bsize, handle, err := f.pool.Alloc(size)
	if err != nil {
		return gpualloc.Block{}, err
	}
	return gpualloc.Block{Addr: addr, Size: bsize, Requested: size, Handle: handle}, nil
}

// Free returns a live block to the index, merged first with the free
// blocks just before and after it in its segment; no memory goes back to
// the device. A block that is not live, or whose Size or Requested differ
// from what Alloc returned, gives an error wrapping
// [gpualloc.ErrInvalidFree] and changes nothing.
func (f *Front) Free(b gpualloc.Block) error { return f.pool.Free(b) }

// ReleaseAll returns every entirely free segment to the device. Live blocks,
// and the segments that hold them, stay. A segment the device refuses to
// free stays too, and the device's errors are joined in the one returned.
func (f *Front) ReleaseAll() error { return f.pool.ReleaseFree() }

// FreeSpace returns the largest free block and the total bytes of free
// blocks in the segments the pool holds, at the costs of [Pool.FreeSpace].
func (f *Front) FreeSpace() (largest, total int64) { return f.pool.FreeSpace() }
