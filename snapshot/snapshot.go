package snapshot

import "sort"

// A Snapshot is a PyTorch memory snapshot.
type Snapshot struct {
	// Segments are the allocator's segments when the snapshot was taken.
	Segments []Segment
	// DeviceTraces holds, for each device index, the allocator's recorded
	// actions in order: the tail of a ring buffer, which may start after
	// blocks were allocated.
	DeviceTraces [][]TraceEntry
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
}

// A Frame is one frame of a recorded stack: a dict with "name",
// "filename" and "line".
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

// A PoolID is a segment's memory pool ("segment_pool_id"): a pair of
// integers that PyTorch gives the private pools of CUDA graphs and
// torch.cuda.MemPool; the zero PoolID is the default pool.
type PoolID [2]uint64

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
	// Pool is the segment's pool ("segment_pool_id"); zero for the
	// default pool.
	Pool PoolID
	// Stack is where the segment was allocated ("frames").
	Stack StackID
	// Blocks are the segment's blocks in address order, each starting
	// where the one before ends, together covering the segment.
	Blocks []Block
}

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
	// EmptyCache reports that the entry's frames name the allocator's
	// empty-cache path (a frame whose name holds "emptyCache", as
	// c10::cuda::CUDACachingAllocator's NativeCachingAllocator::emptyCache,
	// or is torch.cuda's "empty_cache"): the segment_free entries that
	// torch.cuda.empty_cache() records.
	EmptyCache bool
}

// Devices returns the device indices that the snapshot's segments and
// traces name, in increasing order.
func (s *Snapshot) Devices() []int {
	seen := map[int]bool{}
	for d := range s.DeviceTraces {
		seen[d] = true
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

// Trace returns the trace of device dev: nil when the snapshot has none.
func (s *Snapshot) Trace(dev int) []TraceEntry {
	if dev < 0 || dev >= len(s.DeviceTraces) {
		return nil
	}
	return s.DeviceTraces[dev]
}
