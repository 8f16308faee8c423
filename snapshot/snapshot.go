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
