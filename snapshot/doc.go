// Package snapshot models PyTorch memory snapshots: the state and recent
// history of PyTorch's CUDA caching allocator that
// torch.cuda.memory._snapshot() returns and
// torch.cuda.memory._dump_snapshot() pickles, and that PyTorch's memory
// viewer (pytorch.org/memory_viz) draws.
//
// A snapshot is a dict. [Read] decodes these keys of it and ignores the
// others ("external_annotations", the blocks' "frames", ...):
//
//   - "segments": the allocator's segments when the snapshot was taken, with
//     "device", "address", "total_size", "allocated_size", "active_size",
//     "requested_size", "stream", "segment_type", "segment_pool_id" (the
//     memory pool, [PoolID]), "is_expandable" and "blocks", each block with
//     "address", "size", "requested_size" and "state";
//   - "device_traces": for each device, the allocator's recorded actions in
//     order, each with "action", "addr" ("device_free" for oom), "size",
//     "stream" and, from about PyTorch 2.2, "time_us"; of a segment_free or
//     segment_unmap, the "frames" are scanned for empty_cache
//     ([TraceEntry.EmptyCache]). It is the tail of a ring buffer
//     (_record_memory_history(max_entries=N)), so blocks may be live
//     before its first entry;
//   - "allocator_settings": the allocator's effective settings
//     ("max_split_size", "roundup_power2_divisions",
//     "garbage_collection_threshold", "expandable_segments") and the
//     PYTORCH_CUDA_ALLOC_CONF string it parsed.
//
// A legacy snapshot, a bare list of segments, is read as a snapshot with no
// trace; blocks without an "address" key are placed one after the other.
//
// Only dicts, lists, strings, integers, floats, booleans, None and tuples
// occur in a snapshot; addresses are LONG1 integers; lists and strings are
// shared through the pickle's memo. A pickle cannot be decoded in pieces,
// so a snapshot is read whole: the decoder holds the file's objects in
// memory, several times the file's size, after which the [Snapshot] keeps
// about 100 bytes per trace entry and block.
//
// [Write] writes a Snapshot as such a pickle again, with only the opcodes
// PyTorch's memory viewer reads: the simulator exports its replays so.
//
// [Snapshot.InitialState] rebuilds a device's segments and blocks as they
// were before the first entry of its trace, by walking the trace backwards
// from the segments. The traces package replays a snapshot's allocations
// from that state; the pytorch strategy's Restore starts from it; and
// package fidelity replays the trace through the strategy from it.
//
// The package is the format alone, as pprof's profile package is: it
// imports nothing of the simulator, the trace readers or the strategies,
// which all import it. PyTorch's size rules that the rebuild follows come
// from internal/torchsize, which the pytorch strategy shares.
package snapshot
