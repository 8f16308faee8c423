// Package sim replays allocation traces into a strategy and measures how it
// behaves: the replay engine, its metrics and time series.
//
// [Replay] streams the events of a [traces.Reader] into one allocator per
// device index of the trace, each on its own backend: by default a
// [virtual.Device] of 80 GiB that hands out realistic addresses without
// holding memory, never reusing them. [RunAll] runs several replays (traces × strategies) in parallel,
// with results in a fixed order.
//
// # What is measured
//
// The engine measures everything itself, from the events and from a
// counting wrapper around each backend, never from the allocator's own
// statistics (which [Config].Verify can check against it). Byte figures are
// sums over the trace's devices, and their peaks are peaks of those sums:
//
//   - requested: bytes asked for by the live allocations of the trace,
//     whether or not the strategy could serve them. Its peak is the lower
//     bound, the same for every strategy: none can serve the trace with
//     less.
//   - allocated: bytes of the blocks handed out for the allocations that
//     succeeded, after the strategy's rounding.
//   - reserved: bytes held from the devices, in live blocks and in the
//     strategy's cache. Its peak is what the strategy needs of the device.
//   - overhead = peak reserved / peak requested (1 is ideal).
//   - fragmentation = 1 - peak requested / peak reserved, GMLake's
//     definition (ASPLOS '24): the share of the peak reserved memory that
//     the lower bound does not account for (0 is ideal).
//   - device mallocs, frees and bytes: the backend calls, which are slow on
//     a real GPU (cudaFree synchronizes the device).
//   - cache hits: allocations during which no device allocation succeeded.
//   - ooms: allocations that failed with [gpualloc.ErrOutOfMemory]. The
//     replay goes on; the free of such an allocation is skipped.
//   - where the memory goes: peak reserved split, at the first event after
//     which reserved memory stood at its peak, into live, rounding,
//     fragmented and cached bytes ([Result].AtPeakLiveBytes and the three
//     after it), from a ledger of each device's allocations that the
//     counting wrapper keeps (a count of live blocks in each, and the
//     running total of the bytes of those holding none).
//
// A [Series] keeps the course of requested, allocated and reserved bytes in
// a bounded number of buckets without losing any peak, for plots.
//
// A [Result] carries its strategy as structure ([Strategy]): the full spec
// that the result schema writes, and every parameter with its default, what
// a sweep chose and the settings of a value made of several, taken from the
// resolved parameters when the replay starts, so that whoever reads results
// needs neither the registry nor a parser of specs.
//
// With [Config].Snapshot, a replay also records what the strategy did as a
// PyTorch memory snapshot (see [snapshot.Write]), for PyTorch's memory
// viewer: its blocks, failed allocations and device calls per device and
// stream, and its segments after the last event. Recording keeps an entry
// per action (or the last [Config].SnapshotEntries per device); a replay
// that does not record runs without it. With [Config].SnapshotStream the
// snapshot is streamed (see [snapshot.WriteStream]): the entries spill to a
// temporary file, about 13 bytes each, and are read back as the pickle is
// written, so that memory grows with what is live, not with the trace.
//
// A trace that starts from a recorded state of PyTorch's allocator
// ([Config].Start, or the [traces.Start] of a reader that is a
// [traces.StartReporter]: a PyTorch snapshot's) is replayed from it: a [Restorer] holds every segment of it; a
// [PoolAllocator] serves the private pools' allocations itself, in their
// pools, with [Config].PrivatePools, while otherwise private pools' segments (of the start
// state, and those the trace allocates and frees) stay with the engine (see
// pools.go); the strategy given no parameter takes the recorded settings,
// and the device calls that build the state are reported apart
// (Result.StartReservedBytes, Result.StartSegments). See start.go.
//
// # Cost
//
// The engine does O(1) work per event, besides the allocator's own (a
// block found in its device allocation through the last one or a small
// cache, else O(log allocations); O(k) for a block over k mapped pages), and
// allocates nothing per event: its memory grows with the peak number of
// live allocations (a slice indexed by [traces.Event].Slot) and the number
// of devices, not with the trace's length. The series has a fixed size. The
// virtual device does O(1) work per call and remembers only its live
// regions.
package sim
