// Package plan places buffers whose lifetimes are known in advance in one
// address space: the offline, static form of memory allocation (the dynamic
// storage allocation problem), which compilers such as XLA, TFLite and
// MindSpore's SOMAS solve for a whole graph before it runs. Given buffers
// with a size and a half-open lifetime [Lower, Upper), [Solve] gives each an
// offset so that no two buffers live at the same time overlap in memory,
// and makes the height (the largest offset + size) as small as it can.
//
// # The lower bound
//
// No placement is lower than the peak, over time, of the bytes of the live
// buffers ([LowerBound]); for the buffers of a trace that is the peak of live
// requested bytes, the lower bound of every online strategy too. A
// placement at the lower bound is optimal, and Solve says so.
//
// The optimum may be above that peak (buffers that live long, each at one
// offset all its life, can leave gaps that no placement avoids). Solve
// then raises the bound by proof: Solution.ProvenBound is the lowest
// height that the exact search has not proved infeasible, for the whole
// problem or for the buffers of a window of time (a relaxation: what
// cannot be placed within a height there cannot be placed within it in
// the whole). Height - ProvenBound is the gap to the optimum, proved;
// Optimal reports that it is zero.
//
// # How Solve plans
//
// First the time-order first fit: the buffers in order of start, each at
// the lowest gap among the buffers live when it starts, found in a treap of
// the free gaps (O(n log n) whatever the size; the placement given when the
// time runs out first). Then, on every core, a portfolio of greedy
// heuristics, the approach of XLA's heap
// simulator (GlobalDecreasingSizeBestFitHeap) and of SOMAS: the buffers are
// taken in one of several orders (size, lifetime, area, start time, each
// from the largest; and the buffers live at the peak of live bytes first,
// then the others, each in order of start) and each is put into a gap
// between the buffers already
// placed that overlap it in time: the lowest gap that fits (first fit) or the
// smallest (best fit). Every order x fit pair is a candidate; the lowest
// placement wins. The memory that the placed buffers occupy during a
// lifetime is kept as merged intervals in a segment tree over time, so that a
// buffer costs O(log n) set operations and a sort of the intervals around it
// (few, where the placement is tight) rather than of every buffer live with
// it: a trace of a million allocations is one placement in seconds. Memory
// is linear in the buffers.
//
// When the best candidate is above the lower bound (or above the capacity
// asked for), an exact search, one searcher a core each with its own
// preorders, in the manner of MiniMalloc (Moffitt,
// "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated
// Machine Learning", ASPLOS 2023; github.com/google/minimalloc, solver.cc)
// looks for a placement within a target height: it builds only canonical
// placements (buffers placed in non-decreasing order of offset, each at the
// lowest offset the buffers below it allow), prunes a partial placement when
// some cross section of time cannot hold its unplaced buffers above its
// floor and above the lowest offset they can still take in that order, or
// when the floors of the cross sections that must be full (their buffers
// add up to the target) cannot all be covered by buffers that may still go
// at that floor, apart in time; skips a buffer whose offset would leave
// room below it for another (dominance), and, once every buffer that crosses a point of time is
// placed, solves the two sides apart (decomposition at cut points), after
// checking the bounds of the whole range in the canonical order that goes
// on (MiniMalloc's monotonic floor before its decomposition). With a
// capacity Solve looks for one placement within it; without, it searches
// down from the best heuristic toward the lower bound by bisection with
// node budgets that grow each pass, keeping the lowest placement found.
//
// Solve uses the time it is given: while the best placement is above the
// proven bound, it takes turns of that descent (skipped for a problem with
// too many pairs of buffers live together), large-neighbourhood moves
// (the buffers around a point of the peak taken out and placed again in
// another order, kept when fewer reach the height, with greedy restarts
// from time to time) and proofs on windows of time around the peaks of
// live bytes, with budgets that grow each turn. It stops early only when
// the best meets the proven bound (or is within the capacity asked for).
// Every phase checks the time limit and the context as it goes, the
// search every checkEvery steps of its work, so that Solve returns within
// the time limit + 10% at any size.
//
// [Check] verifies any placement independently of how it was made.
package plan
