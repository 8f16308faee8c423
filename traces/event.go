package traces

import (
	"slices"

	"github.com/gpualloc/gpualloc"
)

// Op is the kind of an [Event].
type Op uint8

const (
	OpAlloc Op = iota + 1 // an allocation becomes live
	OpFree                // a live allocation is freed
	// OpRelease: the allocator of the event's device returns its cached
	// memory to the device, as torch.cuda.empty_cache() and MXNet's
	// empty_cache do. It names no allocation: its ID, Size and Slot are 0.
	OpRelease
)

func (o Op) String() string {
	switch o {
	case OpAlloc:
		return "alloc"
	case OpFree:
		return "free"
	case OpRelease:
		return "release"
	}
	return "op?"
}

// NoTime is the TimeUS of an event whose trace has no timestamps.
const NoTime int64 = -1

// An Event is one allocation, free or cache release of a trace.
//
// Readers check a trace's consistency as they go (no free of an unknown id,
// no alloc of an id that is live), so every Event a [Reader] yields is valid:
// a free always refers to a live allocation and carries its size, stream,
// device and category.
type Event struct {
	Op Op
	// Category says what the allocation holds ([gpualloc.CategoryUnknown]
	// when the trace does not record it): of the new allocation for OpAlloc,
	// of the freed allocation for OpFree. It fits in the padding after Op,
	// so an Event stays 48 bytes.
	Category gpualloc.Category
	// Stack is where the allocation was made, for a reader that records
	// it (a PyTorch snapshot read with [Options.Stacks]): an index into
	// the reader's table of stacks ([snapshot.StackID], see
	// [StackReporter]), 0 for none. A free carries its allocation's. It
	// also fits in the padding after Op, so an Event stays 48 bytes.
	Stack uint32
	// ID identifies the allocation within the trace: the number an id
	// such as "7" or "0x7f3a00000000" stands for, or a number the reader
	// gives an id that is no number while it is live (see the package
	// documentation). Two allocations live together have distinct IDs.
	ID uint64
	// Slot is a small dense number the reader gives each live allocation,
	// reused after its free; the highest Slot is below the peak count of live
	// allocations. A consumer keeps per-allocation state in a slice indexed
	// by Slot instead of a map.
	Slot int32
	// Device is the device index; each device has its own pool.
	Device int32
	// Size is the requested bytes: of the new allocation for OpAlloc, of the
	// freed allocation for OpFree.
	Size int64
	// Stream is the stream the allocation belongs to (0 by default).
	Stream uint64
	// TimeUS is the timestamp in microseconds, or NoTime.
	TimeUS int64
}

// A Reader yields a trace's events in order, like bufio.Scanner:
//
//	for r.Scan() {
//		ev := r.Event()
//		...
//	}
//	if err := r.Err(); err != nil { ... }
//
// Scan returns false at the end of the trace or on the first error, which Err
// then returns (nil at a clean end). Errors name the file and the position:
// "train.csv:12: free of unknown id 7". Readers stream: their memory depends
// on the live allocations, not on the trace's length.
type Reader interface {
	Scan() bool
	Event() Event
	Err() error
}

// Devices returns the device indexes that events name, each once, in
// increasing order.
func Devices(events []Event) []int {
	seen := map[int32]bool{}
	var out []int
	for i := range events {
		if d := events[i].Device; !seen[d] {
			seen[d] = true
			out = append(out, int(d))
		}
	}
	slices.Sort(out)
	return out
}
