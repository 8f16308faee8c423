// Package diff compares runs of a program: two traces side by side, to
// answer "why more than before?", or the snapshots of the ranks of one
// job, to find the rank that peaks and the one that diverges. It is the
// analysis behind simulate diff.
//
// Each trace is first reduced, device by device, to a [Run]: the figures
// of its replay as it ran (package sim: peak live, allocated and reserved
// bytes, device allocations), the state at the peak of its reserved
// memory (package explain: live, rounding, fragmented and cached bytes,
// which add up to the reserved bytes) and the live bytes at that moment
// grouped by call site. A Run holds no event: comparing many traces costs
// the memory of one trace at a time and of the Runs' site tables.
//
// Two Runs of a device make a [Pair]. Its differences are B's figure less
// A's, so that swapping the runs negates each, and they add up:
//
//   - the difference of the peaks of reserved bytes is the difference of
//     the live bytes at the two peaks (the program holds more) plus that
//     of the rest, rounding, fragmented and cached bytes (the allocator
//     keeps more);
//   - the differences of the sites add up to the difference of the live
//     bytes at the peaks.
//
// Sites are matched by file and function, the line left out ([MatchKey]):
// an edit above an allocation moves its line, not its site. Two lines of
// one function are one site.
//
// Cross replays separate the program from the allocator's settings: A's
// trace replayed with B's recorded settings and B's with A's, or both
// with one strategy ([Options].With).
//
// N Runs of the ranks of one job make a [Summary] per device: the rank
// that peaks and by how much over the median, each site's smallest,
// median and largest bytes over the ranks, and the rank that diverges,
// as [Divergent] defines it.
package diff
