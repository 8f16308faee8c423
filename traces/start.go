package traces

import "github.com/gpualloc/gpualloc/snapshot"

// A Start is the recorded state of the allocator that a trace starts
// from, and what a replay needs to serve the trace's private pools apart
// from the strategy: a value, read from its reader once (see
// [StartReporter]), which package sim's replay is given (sim.Config.Start).
// The reader of a PyTorch snapshot has one: its trace is the tail of a
// ring buffer, and when it begins the allocator already holds segments,
// some of their blocks live. A nil *Start, or the zero one, is a trace
// that starts from nothing.
type Start struct {
	// States holds the state of each device when its trace began, by
	// device: every segment held then, fully free ones included, with its
	// blocks; nil (or past the end) for a device with none. See State.
	States []*snapshot.State

	// Initial is the number of the reader's first events that are the
	// allocations of the blocks live in States: device after device and,
	// within a device, segment after segment in address order, the blocks
	// that no segment holds (snapshot.State.Unplaced) last.
	Initial int

	// Conf is the settings of the allocator that recorded the trace, in
	// PYTORCH_CUDA_ALLOC_CONF syntax: "" for PyTorch's defaults or none
	// recorded. A replay whose strategy reads PyTorch's settings (a "conf"
	// parameter that PYTORCH_CUDA_ALLOC_CONF sets) and was given no
	// parameter, by its spec or the environment, replays with them.
	Conf string

	// Private is, as a bitset over the reader's events (bit n of word
	// n/64), the allocations of the trace made in a private pool's
	// segments (a CUDA graph's, a torch.cuda.MemPool's), nil for none: a
	// replay serves them from the segments of that pool that it holds,
	// never through the strategy, unless the strategy serves private
	// pools itself (sim.Config.PrivatePools: then from their pool, see
	// PrivatePools).
	Private []uint64

	// PrivatePools names the pool of each allocation of Private, in the
	// order of its events: the private pool whose segment holds it. A
	// replay whose strategy serves private pools itself asks it for that
	// pool's block.
	PrivatePools []snapshot.PoolID

	// PoolSegments is the segments of private pools that the trace
	// allocates and frees, in the order of their events
	// (PoolSegment.Event), nil for none.
	PoolSegments []PoolSegment

	// Release is the release of PyTorch that recorded the trace, as
	// inferred from what the file holds ("2.8"), or "torch_npu" for a
	// snapshot that torch_npu wrote (see snapshot.Snapshot.Release); ""
	// when not known. ReleaseWhy says what shows it.
	Release, ReleaseWhy string
}

// State returns the state of device dev when its trace began, nil when
// there is none (s nil, or no state recorded for dev). O(1).
func (s *Start) State(dev int) *snapshot.State {
	if s == nil || dev < 0 || dev >= len(s.States) {
		return nil
	}
	return s.States[dev]
}

// A StartReporter is a reader whose trace starts from a recorded state of
// the allocator, such as the reader of a PyTorch snapshot: Start returns
// it, nil when there is none. The value is the reader's, found once and
// shared by every caller, who must not change it. A reader that wraps
// another passes its Start on.
type StartReporter interface {
	Start() *Start
}

// StartOf returns the recorded start state of r when r is a
// [StartReporter], else nil: a trace that starts from nothing.
func StartOf(r any) *Start {
	if sr, ok := r.(StartReporter); ok {
		return sr.Start()
	}
	return nil
}
