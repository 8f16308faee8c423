// Package explain answers, for each device of a trace, the question a user
// brings with a memory snapshot: why did the run need so much memory, and
// what would have fit? It is the analysis behind simulate explain.
//
// For each device, [Explain] picks the moment that matters: the first
// out-of-memory error that the trace records (a PyTorch snapshot's oom
// entry, on the device the snapshot records), else the first that a replay
// of the trace as it ran meets on the device, else the peak of reserved
// memory, unless [Options].At names another. It tells at that moment:
//
//   - the failing request, for an out-of-memory error, beside the free
//     memory as the allocator held it: how many pieces, and the largest;
//   - where the memory went: the live bytes that the trace's allocations
//     asked for, the allocator's rounding of them, the free bytes inside
//     segments that hold a live block (fragmented) and the segments that
//     hold none (cached), which add up to the reserved bytes;
//   - who holds the live bytes: the call sites of a PyTorch snapshot's
//     stacks (the first frame outside PyTorch and Python's interpreter),
//     or the innermost frame, the stream or the size of each allocation;
//     the groups add up exactly to the live bytes;
//   - a verdict from replays: live-bound (the live bytes alone exceed the
//     device), fragmentation-bound or cache-bound (a setting or strategy
//     fits: the line to paste and its headroom), or fits;
//   - what would have fit: the trace replayed on the same device as it ran,
//     with PyTorch's defaults, with expandable segments, with every other
//     built-in strategy, with the best of PyTorch's settings that package
//     tune finds, and the offline plan (package plan), each with its peak
//     reserved bytes, whether it fits, and the smallest device it needs.
//
// Every figure comes from replays of the trace by package sim, from the
// recorded state where the trace has one (see traces.Start), on
// devices of the trace's own sizes: the one a PyTorch snapshot records,
// or the one asked for. A device is never summed with another: each is
// replayed on its own device, and its figures are its own.
//
// The state at a moment is that of a replay of the trace's events up to
// it, which the replay hands over as a PyTorch snapshot (sim.Config's
// Snapshot): the segments and blocks that the allocator held then. The
// moment of a replay's first out-of-memory error, and of the peak, are
// found by bisection over such prefixes, since each only grows with the
// prefix: O(log n) replays of at most n events.
//
// Memory: the moment and who holds its live bytes take O(live allocations)
// of Explain's own, whatever the length of the trace: every pass over the
// events (the replays, the matching of a snapshot's entries with its
// events, the walk that groups the live bytes, the figures' timeline)
// reads them in order, and keeps only what is live. A trace's events may
// then be held in an [EventLog], whose pages past a bound go to a
// temporary file, as simulate explain holds them. What would have fit
// adds the replays' own memory, and the offline plan, whose problem holds
// every allocation's lifetime (package plan).
package explain
