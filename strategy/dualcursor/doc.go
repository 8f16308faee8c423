// Package dualcursor is MindSpore's dual-cursor memory pool: one large block
// from the device, static memory (long-lived: a model's parameters, the
// optimizer's state) placed from one end, dynamic memory (operator outputs
// and workspaces) from the other, so that the two never interleave.
//
// # Policy
//
// A request of n bytes takes a block of (n + pad) rounded up to a multiple
// of align: 32 bytes of padding and 512-byte alignment by default, as
// MindSpore's GetCommonAlignSize (see [Config.RoundSize]). Each device block
// the pool holds is tiled in address order by the static side's ranges, the
// gap between the two cursors, and the dynamic side's ranges (static from the
// high end by default, static_end=high; static_end=low mirrors it).
//
// An allocation is static or dynamic by its category
// ([gpualloc.CategoryAllocator], from a trace's category column): static
// when its category is in static (parameter+optimizer_state by default),
// dynamic otherwise. An allocation of unknown category, as every allocation
// of a trace without categories, follows the rule unknown: before_first_free
// (the default) makes it static while the pool has not yet freed anything
// and dynamic afterwards, since a model's weights are allocated before the
// first step frees anything; dynamic or static put all of them on one side.
// The rule looks only at the past, never at the rest of the trace. See
// [Config.IsStatic].
//
// On its side, an allocation takes the best fit among the ranges freed on
// that side in every device block: the smallest range that holds it, the
// lowest address among equals, cut from the end of the range nearer the
// side's own end, the rest staying free. If no freed range holds it, it is
// cut from the gap of the first device block (in the order they were
// taken) whose gap is large enough, moving that side's cursor. A freed block
// merges with the free ranges beside it; a free range that touches the gap
// joins it, so that a cursor moves back over every free range at its top.
// Free never returns memory to the device.
//
// When no gap is large enough, with grow=block (the default) the pool takes
// another device block of block bytes (1 GiB; more for a larger request; 0
// for all the device's free memory), with its own two cursors. If the device
// is out of memory, the pool returns its entirely free device blocks and asks
// again, then asks for a block of just the size needed; if that fails the
// request fails with [gpualloc.ErrOutOfMemory] and the pool stays usable.
// With grow=none the pool holds at most one device block, and a request that
// fits neither a freed range nor the gap fails at once, as MindSpore's
// "Out of memory!!!" when its cursors would cross. [Pool.ReleaseAll]
// returns every entirely free device block.
//
// # Costs
//
// Freed ranges are indexed per side by (size, address) in the size-class
// treaps of the internal package segment (the index of the bestfit
// strategy): Alloc is O(log k) for the k freed ranges of a class, plus
// O(b) for the b device blocks when no freed range fits; Free is O(1) to
// find the block (its Handle indexes a table of live blocks) and its
// neighbours, plus O(log k) to update the index. Ranges are records in one
// slice, linked by int32 indexes and reused; in steady state neither Alloc
// nor Free allocates. A device call happens only when the pool grows or
// releases. [Pool.FreeSpace] is O(log k + b). Memory: a 48-byte record per
// range, free or live, a byte for its side, and a 16-byte table entry per
// live block.
//
// # Provenance, and where this model departs from MindSpore
//
// MindSpore's device MemoryManager (mindspore/ccsrc/runtime/device/
// memory_manager.cc, with ascend_memory_manager.cc and
// gpu_memory_manager.cc) takes one region of device memory when the device
// is initialised (MallocDeviceMemory, the whole device up to the context's
// max_device_memory) and serves two kinds of memory from it:
// MallocStaticMem, for graph inputs, parameters (weights) and value nodes,
// moves static_mem_offset_ down from the top of the region, and
// MallocDynamicMem, for the outputs and workspaces of kernels, moves
// dynamic_mem_offset_ up from its base; either fails with "Out of
// memory!!!" when the offsets would cross. ResetDynamicMemory puts the
// dynamic offset back to 0 between graphs. This is how the sources read as
// far as we know them; the file names and the direction of each cursor are
// from memory of MindSpore's 1.x sources, not checked against a copy here,
// and newer versions serve static memory from a memory pool
// (AscendMemoryPool) instead. static_end=low gives the other direction,
// which changes addresses only: every figure of a replay is the same.
//
// Align and pad follow MindSpore's GetCommonAlignSize,
// (size + kMemAlignSize + 31) / kMemAlignSize * kMemAlignSize with a
// kMemAlignSize of 512, which is (size + 32) rounded up to 512 (also from
// memory, not checked).
//
// The departures, which a replay of a trace needs:
//
//   - Reuse of freed ranges. In graph mode MindSpore plans dynamic memory
//     ahead of time (its mem_reuse and SOMAS passes give each kernel output
//     an offset from the lifetimes of the whole graph), and static memory
//     lives as long as the graph. A trace gives no lifetimes ahead of time,
//     so this pool reuses freed ranges online: best fit with coalescing on
//     each side, the policy of MindSpore's own dynamic pool
//     (DynamicMemPoolBestFit, used in PyNative mode), and a cursor that
//     moves back when the range at its top is freed.
//   - Which allocations are static: MindSpore knows from the graph (inputs,
//     parameters, value nodes); a trace says it with categories, and the
//     static set maps them. Graph inputs are static in MindSpore, but a
//     trace's inputs are allocated and freed every step, so input is
//     dynamic by default (static=parameter+optimizer_state+input makes it
//     static). Without categories, the unknown rule decides.
//   - Growth: MindSpore takes the whole device once (block=0,grow=none).
//     By default this pool takes 1 GiB blocks as needed, so that what it
//     reserves measures what the policy needs rather than the device's
//     size; the first block is taken at the first allocation, not when the
//     pool is made.
//   - Communication memory (MallocStaticMem and MallocDynamicMem with
//     communication_mem, padded by a protecting area on each side) has no
//     category in traces and is not modelled.
package dualcursor
