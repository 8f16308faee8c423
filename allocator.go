package gpualloc

import "errors"

// An Allocator hands out blocks of device memory.
//
// Alloc returns a block of at least size bytes, or an error that wraps
// [ErrOutOfMemory] when the device cannot supply it even after the strategy
// has given back what it could; the allocator stays usable after that.
// Free returns a block obtained from Alloc; a block that is not live gives an
// error wrapping [ErrInvalidFree].
//
// Allocators are not safe for concurrent use; a caller that shares one between
// goroutines must serialize the calls.
type Allocator interface {
	Alloc(size int64) (Block, error)
	Free(b Block) error
}

// A Block is a region of device memory handed out by an [Allocator].
type Block struct {
	Addr      uint64 // device address of the first byte
	Size      int64  // bytes set aside for the block: the request after rounding
	Requested int64  // bytes asked for
	Stream    uint64 // stream the block belongs to (0 for strategies without streams)
	// Handle is the strategy's own reference to the block, such as an index
	// into its table of live blocks, so that Free finds the block's record
	// in O(1) without a search. Callers pass it back unchanged.
	Handle uint64
}

// End returns the address one past the block's last byte.
func (b Block) End() uint64 { return b.Addr + uint64(b.Size) }

// A Backend is the device an allocator takes memory from: the simulator's
// virtual device, host memory or a GPU.
//
// Malloc returns the address of size fresh bytes, or an error wrapping
// [ErrOutOfMemory] when the device has no room. Free returns a region that
// Malloc returned, with the size it was asked for. MemInfo reports the device's
// free and total bytes, as cudaMemGetInfo does.
type Backend interface {
	Malloc(size int64) (addr uint64, err error)
	Free(addr uint64, size int64) error
	MemInfo() (free, total int64)
}

// StatsReporter is an optional interface of an [Allocator] that keeps
// [Stats].
type StatsReporter interface {
	Stats() Stats
}

// Releaser is an optional interface of an [Allocator] that caches memory:
// ReleaseAll returns every cached (free) byte to the device, as MXNet's
// empty_cache and PyTorch's torch.cuda.empty_cache do. Live blocks stay.
type Releaser interface {
	ReleaseAll() error
}

// StreamAllocator is an optional interface of an [Allocator] whose pools are
// per stream, as PyTorch's caching allocator's are. A caller that knows the
// stream of a request uses AllocStream instead of Alloc; Alloc is AllocStream
// on stream 0.
type StreamAllocator interface {
	AllocStream(size int64, stream uint64) (Block, error)
}

// FreeSpaceReporter is an optional interface of an [Allocator] that keeps
// free blocks inside the memory it holds from the device. FreeSpace reports
// the largest free block and the total free bytes; 1 - largest/total is the
// free-space fragmentation of RMM and TensorFlow (0 when all free space is
// one block). It must be cheap enough to call whenever reserved memory
// reaches a new peak.
type FreeSpaceReporter interface {
	FreeSpace() (largest, total int64)
}

// Specer is an optional interface of an [Allocator] that reports its full
// spec, every parameter with its effective value, as "round:page=4096,...".
type Specer interface {
	Spec() string
}

var (
	// ErrOutOfMemory reports that the device could not supply the memory
	// asked for.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrInvalidFree reports a free of a block that is not live: never
	// allocated, already freed, or changed by the caller.
	ErrInvalidFree = errors.New("invalid free")
	// ErrInvalidSize reports a request of zero or negative bytes.
	ErrInvalidSize = errors.New("invalid size")
)

// VirtualMemory is an optional interface of a [Backend] whose device maps
// physical memory into ranges of virtual addresses, as CUDA's virtual memory
// management API does (CUDA 10.2 and later). A strategy that finds it by a
// type assertion can reserve an address range once and back it with
// physical memory piece by piece (PyTorch's expandable segments), or map the
// same physical memory at more than one address (GMLake's stitching).
//
// Sizes and addresses are multiples of Granularity. Physical memory is
// what the device holds: it counts against the device's capacity (MemInfo
// reports it used) from Create to Release, mapped or not. A reserved range
// holds no memory. Each call is one call of the device's driver:
//
//   - Granularity: cuMemGetAllocationGranularity, asked once; the size of
//     the pages physical memory comes in (2 MiB on current NVIDIA GPUs).
//   - Reserve: cuMemAddressReserve; a range of size bytes of address space
//     that nothing else will be given, with nothing mapped in it.
//   - Unreserve: cuMemAddressFree of a range Reserve returned, whole, with
//     nothing mapped in it any more.
//   - Create: cuMemCreate of size bytes of physical memory; a failure for
//     want of memory wraps [ErrOutOfMemory]. The handle identifies it.
//   - Release: cuMemRelease of physical memory that is mapped nowhere.
//     (CUDA defers the release of mapped memory until its last unmap; the
//     interface asks for the unmaps first, so that every backend counts
//     the same.)
//   - Map: cuMemMap of the whole of handle's memory at addr, inside one
//     reserved range, over addresses where nothing is mapped, followed by
//     cuMemSetAccess to make it readable and writable by the device. The
//     same memory may be mapped at several addresses at once.
//   - Unmap: cuMemUnmap of what one Map mapped at addr, size bytes (the
//     size of its memory).
//
// A call that breaks these rules (an address outside a reserved range, a
// map over a mapping, an unmap of something not mapped, a release of memory
// still mapped) fails with an error wrapping [ErrInvalidFree] and changes
// nothing. The calls are not safe for concurrent use.
type VirtualMemory interface {
	Granularity() int64
	Reserve(size int64) (addr uint64, err error)
	Unreserve(addr uint64, size int64) error
	Create(size int64) (handle uint64, err error)
	Release(handle uint64) error
	Map(addr uint64, handle uint64) error
	Unmap(addr uint64, size int64) error
}
