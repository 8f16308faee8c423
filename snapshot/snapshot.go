package snapshot

import (
	"fmt"
	"sort"
	"strings"
)

// A Snapshot is a PyTorch memory snapshot.
type Snapshot struct {
	// Segments are the allocator's segments when the snapshot was taken.
	Segments []Segment
	// AllocatorSettings are the allocator's settings, nil in files from
	// before PyTorch recorded them.
	AllocatorSettings *AllocatorSettings
	// Frames are the distinct frames of the recorded stacks ("frames" of
	// entries, blocks and segments), each once; nil when the file records
	// none.
	Frames []Frame
	// Stacks are the distinct stacks, each a list of indexes into Frames,
	// innermost first, as PyTorch records them; Stacks[0] is the empty
	// stack. Nil when the file records no frames.
	Stacks [][]int32

	// traces holds, for each device index, the allocator's recorded
	// actions in order: the tail of a ring buffer, which may start after
	// blocks were allocated. See Trace, NumTraces and SetTraces.
	traces []Trace
}

// New returns a snapshot of the segments and of the device traces given,
// trace d for device d, which it shows, not copies: for tests and for
// writers that build a snapshot. Its settings, frames and stacks are set
// as fields.
func New(segments []Segment, traces ...[]TraceEntry) *Snapshot {
	s := &Snapshot{Segments: segments}
	s.SetTraces(traces...)
	return s
}

// SetTraces makes traces the snapshot's device traces, trace d for device
// d, which it shows, not copies, in place of those it had.
func (s *Snapshot) SetTraces(traces ...[]TraceEntry) {
	s.traces = make([]Trace, len(traces))
	for d, t := range traces {
		s.traces[d] = TraceOf(t)
	}
}

// A Frame is one frame of a recorded stack: a dict with "name",
// "filename" and "line". A name or filename that is not a string is "",
// a line that is not an integer of 64 bits 0 (see the package doc).
type Frame struct {
	Name     string
	Filename string
	Line     int64
}

// A StackID is an index into [Snapshot.Stacks]; 0 is the empty stack, and
// the stack of everything read from a file without frames.
type StackID uint32

// StackFrames returns the frames of stack id, innermost first; nil for the
// empty stack or an id out of range.
func (s *Snapshot) StackFrames(id StackID) []Frame {
	if int(id) >= len(s.Stacks) {
		return nil
	}
	ids := s.Stacks[id]
	f := make([]Frame, len(ids))
	for i, k := range ids {
		f[i] = s.Frames[k]
	}
	return f
}

// A Segment is memory that the allocator holds from the device: one
// cudaMalloc, or an expandable segment's mapped range.
type Segment struct {
	Device        int
	Address       uint64
	TotalSize     int64
	AllocatedSize int64
	ActiveSize    int64
	RequestedSize int64
	Stream        uint64
	SegmentType   string // "large" or "small"
	IsExpandable  bool
	// Pool is the segment's memory pool ("segment_pool_id"): the zero
	// value for the allocator's default pools, another for a private
	// pool (a CUDA graph's, a torch.cuda.MemPool's).
	Pool PoolID
	// Stack is where the segment was allocated ("frames").
	Stack StackID
	// Blocks are the segment's blocks in address order, each starting
	// where the one before ends, together covering the segment.
	Blocks []Block
}

// A PoolID names a memory pool of PyTorch's allocator as a snapshot's
// "segment_pool_id" does: the pair of ids of a MempoolId_t
// (c10/cuda/CUDACachingAllocator.h), (0, 0) for the default pools of
// each stream, another pair for a private pool that a CUDA graph capture
// or a torch.cuda.MemPool made (CUDACachingAllocator.cpp, PrivatePool).
type PoolID [2]uint64

// Private reports whether the pool is a private pool, not the default.
func (p PoolID) Private() bool { return p != PoolID{} }

func (p PoolID) String() string { return fmt.Sprintf("(%d, %d)", p[0], p[1]) }

// A Block is a part of a [Segment]: allocated, or free in the allocator's
// cache.
type Block struct {
	Address uint64
	Size    int64 // bytes of the block, after rounding
	// RequestedSize is the size asked for, or Size when the file does not
	// record it; 0 for a free block of a rebuilt state.
	RequestedSize int64
	State         BlockState
	// Category is what the block holds, in memory_viz's names
	// ("parameter", "activation", ...), from a "category" key of the
	// block; "" when the file records none, as PyTorch's own snapshots
	// do not (memory_viz computes categories in its profiler timeline).
	Category string
	// Stack is where the block was allocated ("frames").
	Stack StackID
}

// A BlockState is the state of a block.
type BlockState string

// The states of a block.
const (
	ActiveAllocated   BlockState = "active_allocated"    // allocated
	ActivePendingFree BlockState = "active_pending_free" // freed, waiting for its stream's events
	Inactive          BlockState = "inactive"            // free
)

// Live reports whether the block is allocated: active_allocated or
// active_pending_free.
func (b Block) Live() bool {
	return b.State == ActiveAllocated || b.State == ActivePendingFree
}

// An Action is what a trace entry records.
type Action string

// The actions of the allocator's trace.
const (
	Alloc         Action = "alloc"          // a block was allocated
	FreeRequested Action = "free_requested" // a block was freed, its stream's events pending
	FreeCompleted Action = "free_completed" // the block went back to the cache
	SegmentAlloc  Action = "segment_alloc"  // a segment was allocated (cudaMalloc)
	SegmentFree   Action = "segment_free"   // a segment was freed (cudaFree)
	SegmentMap    Action = "segment_map"    // pages were mapped into an expandable segment
	SegmentUnmap  Action = "segment_unmap"  // pages were unmapped from one
	TakeSnapshot  Action = "snapshot"       // a snapshot was taken
	OutOfMemory   Action = "oom"            // an allocation failed
)

// NoTime is the TimeUS of a trace entry in a file from before PyTorch
// recorded times.
const NoTime int64 = -1

// A TraceEntry is one recorded action of the allocator.
type TraceEntry struct {
	Action Action
	// Addr is the block's or segment's address; for oom, the device's free
	// bytes ("device_free").
	Addr uint64
	// Size is the requested (unrounded) size for alloc, free_requested and
	// free_completed; the segment's bytes for the segment actions; the
	// size that failed for oom.
	Size   int64
	Stream uint64
	// TimeUS is the entry's time in microseconds, or NoTime.
	TimeUS int64
	// Category is what the block holds, from a "category" key of the
	// entry, as Block's; "" when the file records none.
	Category string
	// Stack is the entry's stack ("frames").
	Stack StackID
	// EmptyCache is true when the entry's frames show that
	// torch.cuda.empty_cache() made it (see IsEmptyCacheFrame): a
	// segment_free or segment_unmap of a release that the program asked
	// for, not one the allocator made to make room. False when the file
	// records no frames.
	EmptyCache bool
}

// IsEmptyCacheFrame reports whether a frame of a trace entry, of the
// given function name and file name, is on the path of
// torch.cuda.empty_cache(): the Python function empty_cache of
// torch/cuda/memory.py, or the allocator's C++ emptyCache
// (NativeCachingAllocator::emptyCache and DeviceCachingAllocator::emptyCache
// in c10/cuda/CUDACachingAllocator.cpp, which call release_cached_blocks,
// whose release_block records the segment_free). PyTorch records the
// Python frames with _record_memory_history(stacks="python") and the C++
// ones with stacks="all".
func IsEmptyCacheFrame(name, file string) bool {
	if name == "empty_cache" {
		return strings.HasSuffix(file, "memory.py")
	}
	return strings.Contains(name, "::emptyCache(")
}

// Devices returns the device indices that the snapshot's segments and
// traces name, in increasing order: the devices that hold a segment or
// whose trace has an entry. PyTorch lists a trace, often empty, for every
// device the process could use; an empty one names no device.
func (s *Snapshot) Devices() []int {
	seen := map[int]bool{}
	for d := range s.NumTraces() {
		if s.Trace(d).Len() > 0 {
			seen[d] = true
		}
	}
	for _, seg := range s.Segments {
		seen[seg.Device] = true
	}
	devs := make([]int, 0, len(seen))
	for d := range seen {
		devs = append(devs, d)
	}
	sort.Ints(devs)
	return devs
}

// Trace returns the trace of device dev: empty when the snapshot has none.
func (s *Snapshot) Trace(dev int) Trace {
	if dev < 0 || dev >= len(s.traces) {
		return Trace{}
	}
	return s.traces[dev]
}

// NumTraces returns the number of device traces that the snapshot lists,
// empty ones included.
func (s *Snapshot) NumTraces() int { return len(s.traces) }
