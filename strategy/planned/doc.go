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
// finds the file's step (below), and plans the file's requests up to its
// steps (the prefix: weights, a first step that also allocates the
// optimizer's state) with their own lifetimes, followed by one step: the
// requests of the step live over their events, one freed in the next step
// keeps its memory for the whole step, one that lives longer is left to the
// fallback. With profile=auto, the fallback serves the run while the
// requests are recorded; once a step has recurred it is planned (without
// prefix: that has been served already), provided its peak is at least
// min_share of what the fallback holds, and provided the fallback's memory
// and the plan's together stay within the fallback's peak so far; the
// fallback's cache is then emptied, as after a profiling iteration.
// Otherwise the run goes on with the fallback alone.
//
// Steps. A step is the longest suffix of the recorded request sizes that
// repeats with a period of at least min_step requests, at least twice, and
// whose memory is freed within about a step (7/8 of its bytes): the
// Z-function of the reversed sizes finds it in O(n). It is cut where the
// fewest bytes are live, so that few buffers cross from one step into the
// next. Limits: only exact repetition counts, so shapes that change every
// step have no step; auto mode looks every max(min_step, n/16) requests,
// so it plans from about the third step on; a recurring run inside a step
// (an optimizer's update of each layer) is a period too, which min_share
// rejects.
//
// Matching. Every allocation and free moves a position through the events
// the plan expects (the prefix once, then the step over and over): an event
// of another size takes the expected one's place. A request is served at its
// planned offset when it is the request the plan expects at that position,
// at its planned size, after window events in a row as the plan expects
// them, and when no live planned block overlaps its planned memory
// (STAlloc's check, is_overlap in Allocator/StaticAllocator.hpp). All
// other requests go to the fallback, as in STAlloc's StaticAllocator
// (alloc_fn_). After a mismatch, a run of window events that occurs once in
// the expected events sets the position again (resynchronisation).
//
// Gaps. The fallback does not use the plan's free gaps: it is an unchanged
// pytorch or bestfit pool over its own device allocations (STAlloc's
// static-reuse places dynamic requests in gaps it predicts from the
// profile's layer structure, which a trace does not have). Instead the plan
// never blocks the fallback: once a step the share of the step's planned
// requests served from the plan is checked, and after two steps below
// min_hit the plan is dropped, its region given back once no planned block
// is live, and the step learned again; when the fallback runs out of
// device memory and no planned block is live, the region is given back at
// once and the request retried.
//
// Streams are not told apart: the plan follows the order of the requests,
// and the fallback serves every request on stream 0.
//
// # Costs
//
// An event costs O(1) (a hash update, a map look-up on allocations) plus,
// for a planned block, a binary search and a move of the live planned
// blocks above it; the fallback's own cost otherwise. Learning costs O(16)
// a request and about 24 bytes a recorded request, at most max_profile
// requests; planning costs plan.Solve's time, at most time_limit, once.
package planned
