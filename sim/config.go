package sim

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/devicecost"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// Config says how to replay a trace. The zero value of every field but the
// strategy (Params or Open) has a documented default.
type Config struct {
	// Trace is the trace's name, reported in Result.Trace and at the start
	// of errors. If empty, the name comes from the reader's Name method when
	// it has one.
	Trace string

	// Params is the strategy, every parameter resolved (see
	// [gpualloc.Resolve] and [gpualloc.Select]). Each device's allocator is
	// Params.Open(backend), and Result.Strategy is StrategyOf(Params).
	// A strategy that reads PyTorch's settings (a conf parameter that
	// PYTORCH_CUDA_ALLOC_CONF sets) takes what Start records where Params
	// leaves it: the recorded settings when Params has none of its own,
	// and the release and device that recorded the trace where its
	// version and device are auto.
	Params *gpualloc.Params
	// Open, if not nil, builds each device's allocator instead of
	// Params.Open: for a strategy that is not registered.
	Open func(b gpualloc.Backend) (gpualloc.Allocator, error)
	// Strategy, if not empty, is the full spec reported in Result.Strategy
	// instead of Params' (or of the allocator's Spec method, when only
	// Open is given).
	Strategy string

	// Backend is the backend's name reported in Result.Backend; "" means
	// "sim".
	Backend string
	// Capacity is the size of each virtual device, and the capacity
	// reported; 0 means the device's memory where the reader knows it (a
	// [CapacityReporter]), else virtual.DefaultCapacity (80 GiB). With
	// NewBackend and Capacity 0, the capacity reported is the total that
	// the first device's MemInfo gives.
	Capacity int64
	// NewBackend, if not nil, makes the backend of each device index that
	// the trace uses, when the device is first used. The default makes a
	// virtual.Device of Capacity bytes. After the replay, the engine closes each
	// device's allocator and then its backend if they implement io.Closer.
	NewBackend func(device int) (gpualloc.Backend, error)

	// Start is the recorded state that the trace starts from, with the
	// allocations of its private pools and the recorded settings (see
	// traces.Start): the replay restores it, serves the trace's start
	// events and private pools' allocations from it, and gives a strategy
	// given no parameter the recorded settings. Nil means the reader's,
	// when the reader is a traces.StartReporter, else none: a reader that
	// holds the events of another in memory need not pass its start on.
	Start *traces.Start

	// PrivatePools has a strategy that is a PoolAllocator (the pytorch
	// strategy) serve the trace's private pools itself, by its rules (see
	// PoolAllocator). False, the default, holds their segments as recorded
	// and serves their allocations from them, so that a snapshot's
	// recorded figures replay whatever the rules.
	PrivatePools bool

	// SeriesBuckets bounds Result.Series: 0 means [DefaultSeriesBuckets],
	// a negative number means no series.
	SeriesBuckets int

	// Verify, when the allocator reports gpualloc.Stats, compares them with
	// what the engine measured after every event and at the end, and fails
	// the replay at the first difference: a check for strategy authors.
	Verify bool

	// MeasureTime times the replay's calls: each alloc of the allocator and
	// each Malloc and Free of the backend, for Result.AllocHitNSMean,
	// AllocDeviceNSMean and DeviceCallNSTotal. It is for real backends,
	// whose calls cost what the hardware makes them cost; on the virtual
	// device it measures the simulator. Off, the replay reads no clock per
	// event and those fields are nil.
	MeasureTime bool

	// DeviceCosts is the table of device-call costs that
	// Result.DeviceTimeNSEst is estimated by; nil means devicecost.H200.
	DeviceCosts *devicecost.Model

	// Progress, if not nil, is called with the number of events replayed so
	// far every ProgressInterval events and once at the end, from the
	// goroutine running the replay.
	Progress func(events int64)

	// Snapshot, if not nil, records what the strategy did as a PyTorch
	// memory snapshot, which it is given at the end of a replay that
	// succeeded (from the goroutine running the replay); its error becomes
	// the replay's. The recording wraps the trace's reader (which then
	// hands the replay its events one at a time, noting each one's time),
	// each device's allocator and the backend the allocator is given: off,
	// the replay runs exactly as without it.
	Snapshot func(*snapshot.Snapshot) error
	// SnapshotStream, if not nil, is Snapshot's streaming twin, which it
	// takes precedence over: it is given the snapshot with its trace
	// entries read as they are written (snapshot.WriteStream), so that a
	// long replay's entries are never all in memory. Unless
	// SnapshotEntries keeps a window of at most 2^20 entries (held in
	// memory, 40 bytes each), the recording spills every entry, about 13
	// bytes each, to a temporary file in SnapshotTemp (the system's
	// temporary directory when empty), removed once the snapshot is
	// written.
	SnapshotStream func(*snapshot.Stream) error
	SnapshotTemp   string
	// SnapshotEntries, if positive, keeps only the last SnapshotEntries
	// trace entries of each device in the snapshot, as PyTorch's
	// _record_memory_history(max_entries=N) does; the segments are still
	// those after the last event.
	SnapshotEntries int

	// Observe, if not nil, is called after each event the replay serves,
	// from the goroutine running the replay, with the event's index in the
	// trace (from 0), the event (which it must not keep), and what the
	// event's device holds after it: the replay event by event, for an
	// output that streams it (simulate --parquet), where Series keeps a
	// bounded summary. Its error ends the replay and is the replay's.
	// Off, it costs the replay one branch an event.
	Observe func(n int64, ev *traces.Event, after DeviceBytes) error
}

// DeviceBytes is what one device of a replay holds after an event (see
// Config.Observe).
type DeviceBytes struct {
	Requested int64 // live bytes the trace requested on the device, failed allocations included
	Allocated int64 // bytes of the blocks handed out for them
	Reserved  int64 // bytes held from the device
}

// ProgressInterval is how many events pass between calls of
// Config.Progress; the context of [ReplayContext] is checked as often.
const ProgressInterval = 1 << 16
