// Package planned is plan-guided allocation after STAlloc (Huang et al.,
// "STAlloc: Enhancing Memory Efficiency in Large-Scale Model Training with
// Spatio-Temporal Planning", EuroSys 2026, arXiv 2507.16274;
// github.com/infinigence/STAlloc): the requests of a training step, which
// recur with the same sizes and lifetimes every iteration, are served at
// offsets that an offline planner (package plan) chose for them inside one
// device allocation, and every other request by a fallback allocator
// (pytorch or bestfit).
//
// # Policy
//
// The allocator is online: it knows the profile and the requests served so
// far, never the rest of the trace it serves.
//
// Profile. With profile=FILE, a trace recorded in a profiling run, New
// finds the file's step (below) and plans the file's requests before its
// steps (the prefix: weights, a first step that also allocates the
// optimizer's state) with their own lifetimes, followed by one step: the
// requests of the step live over their events, one freed in the next step
// keeps its memory for the whole step, one that lives longer is left to the
// fallback. The prefix's buffers that stay for good lie one above the other
// at the bottom of the region, the rest above them, in a second device
// allocation. With profile=auto, the fallback serves the run while the
// requests are recorded; once a step has recurred it is planned (without
// prefix: that has been served already), provided the fallback's memory
// that a release would not give back, plus the plan, stays within the
// fallback's peak so far; the fallback's cache is then emptied, as after a
// profiling iteration. Otherwise the run goes on with the fallback alone.
//
// Steps. A step is the longest suffix of the recorded request sizes that
// repeats with a period of at least min_step requests, at least twice, and
// whose memory is freed within about a step (7/8 of its bytes): the
// Z-function of the reversed sizes finds it in O(n). Its own buffers must
// peak at min_share of the memory in use (the fallback's, or the profile's
// peak), so that a recurring run inside a step (an optimizer's update of
// each layer in turn) is not taken for the step. It is cut where the fewest
// bytes are live, so that few buffers cross from one step into the next.
// Limits: only exact repetition counts, so shapes that change every step
// have no step; auto mode looks every max(min_step, n/16) requests and plans
// a step once it and the next one are recorded, from about the fourth step
// on.
//
// Matching. Every allocation and free moves a position through the events
// the plan expects (the prefix once, then the step over and over): an event
// of another size takes the expected one's place. A request is served at its
// planned offset when it is the request the plan expects at that position,
// at its planned size, after window events in a row as the plan expects
// them, and when no live block overlaps its planned memory (STAlloc's
// check, is_overlap in Allocator/StaticAllocator.hpp). All other requests go
// to the fallback, as in STAlloc's StaticAllocator (alloc_fn_). After a
// mismatch, a run of window events that occurs once in the expected events
// sets the position again (resynchronisation).
//
// Gaps. While a plan is in use the fallback never uses its free gaps: a
// planned request may come for them (STAlloc's static-reuse places dynamic
// requests in gaps it predicts from the profile's layer structure, which a
// trace does not have). Once a step the share of the step's planned
// requests served from the plan is checked; after two steps below min_hit
// the plan is dropped: its weights stay where they are, the rest of its
// region serves requests by best fit before the fallback until it is empty
// (reuse=true) or goes back to the device once empty (reuse=false), the
// fallback's cache is emptied, and once the whole region is back (one
// region at a time) the step is learned again. When the fallback runs out
// of device memory, the plan is dropped, what of the region holds no block
// goes back and the request is tried again, or served from a gap of the
// region. Memory goes back on frees, so that no
// allocation gives memory back unless the device is full.
//
// Streams are not told apart: the plan follows the order of the requests,
// and the fallback serves every request on stream 0.
//
// # Costs
//
// An event costs O(1) (a hash update, a map look-up on allocations) plus,
// for a block of the region, O(log n) in a B-tree of its n live blocks;
// the fallback's own cost otherwise, and O(log s) to count the block in
// the fallback's s segments. Learning costs O(16) a request and about 24
// bytes a recorded request, at most max_profile requests; a profile file
// costs the same per request and 16 bytes an event of the plan's window;
// planning costs plan.Solve's time, at most time_limit, once a plan.
package planned
