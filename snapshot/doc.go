// Package snapshot models PyTorch memory snapshots: the state and recent
// history of PyTorch's CUDA caching allocator that
// torch.cuda.memory._snapshot() returns and
// torch.cuda.memory._dump_snapshot() pickles, and that PyTorch's memory
// viewer (pytorch.org/memory_viz) draws.
//
// A snapshot is a dict. [Read] decodes these keys of it and ignores the
// others ("external_annotations", ...):
//
//   - "segments": the allocator's segments when the snapshot was taken, with
//     "device", "address", "total_size", "allocated_size", "active_size",
//     "requested_size", "stream", "segment_type", "segment_pool_id" (the
//     memory pool, [PoolID]), "is_expandable", "frames" and "blocks", each
//     block with "address", "size", "requested_size", "state" and "frames";
//   - "device_traces": for each device, the allocator's recorded actions in
//     order, each with "action", "addr" ("device_free" for oom), "size",
//     "stream", "frames" and, from about PyTorch 2.2, "time_us"; the frames
//     of a segment_free or segment_unmap tell whether empty_cache made it
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
// A read refuses only what a replay cannot do without. The fields that
// the replays need are checked, and a value of the wrong type or range is
// refused with a message that names the field and says why:
// "device_traces[0][7].size: 18446744073709551616 is more than 2^63-1
// bytes". They are an entry's "action", "addr", "device_free", "size",
// "stream", "time_us" and "category"; a segment's "device", "address",
// sizes, "stream", "segment_type", "segment_pool_id", "is_expandable" and
// "blocks"; a block's "address", sizes, "state" and "category"; the
// "frames" lists, whose frames tell [TraceEntry.EmptyCache]; and the
// lists that hold these, and "allocator_settings". Sizes and times are
// integers from 0 to 2^63-1, addresses and streams from 0 to 2^64-1, a
// device from 0 to 2^31-1; a flag is a bool or an integer, true when not
// 0, as Python tells it; a string is a str or bytes. None is the same as
// an absent key: the field's default, or "missing" where a replay needs a
// value (a segment's address, the addr of an entry that names a block or
// a segment). Every other field never fails a read, whatever its type or
// size: a frame's "name", "filename" and "line" are kept where they are
// strings and an integer of 64 bits, else are "" and 0 (a line from 2^63
// to 2^64-1 is the negative number of the same bits: PyTorch writes a
// line of -1 unsigned); an entry's "compile_context" and
// "user_metadata", "external_annotations" and every key that the package
// does not model are skipped, whatever they hold. A skipped value is
// never built: it costs the read its memo entries (9 bytes each, which
// say only "a list skipped", for the references that may come back to
// it) and, while its batch is read, the items' places on the pickle's
// stack, as in Python's unpickler. A memo reference that puts a skipped
// value where the model reads one is refused, saying so: PyTorch never
// writes one.
//
// Only dicts, lists, strings, integers, floats, booleans, None and tuples
// occur in a snapshot; addresses are LONG1 integers; dicts, lists and
// strings are shared through the pickle's memo, and most of a big file is
// memo references to the frame dicts that every entry's "frames" lists.
// Read streams: a pickle machine of the package's own reads the input
// through a buffer of 64 KiB to 1 MiB (gzip is decompressed as it goes;
// past 8 MiB, a goroutine reads and decompresses a few chunks ahead) and
// builds no generic object tree for what the package models. It is in
// two layers: below, an internal pickle package that knows the bytes, the
// opcodes, the machine's values, stack and marks, its interned strings
// and its memo (held in pages that go to a temporary file past a bound,
// an internal package of their own), runs the opcodes of scalars and of
// the memo and hands each other opcode, with the values it takes off the
// stack, to a small Builder interface, and knows nothing of a snapshot;
// above, this package's decoder, which embeds that machine, is its
// Builder, and gives containers, and what the memo holds of them, their
// meaning in the snapshot model. A
// container's role (a trace entry, a block, a stack of frames) is told by
// its place when it is created, from the stack as picklers of protocols 2
// to 5 leave it: a MARK right above an open list is that list's batch (a
// pickle made by hand that builds an item of a list from a MARK there,
// with LIST, DICT or TUPLE, may be refused or misread). A trace entry is
// kept as its few scalar fields until it is appended to its trace, then
// becomes a record of 48 bytes and its container is reused. Strings,
// frames and stacks are interned: each distinct one is held once, and an
// entry refers to its stack by a [StackID].
//
// What grows with what, as read: the Snapshot keeps about 80 bytes per
// block, and each trace entry in the decoder's 48-byte record, with no
// pointers, behind [Snapshot.Trace], which the start-state rebuild, the
// replays and fidelity walk and which makes a [TraceEntry] of a record
// when asked. The decoder adds 9 bytes per memo entry
// (Python memoizes every dict and list, so about two per trace entry),
// the distinct strings, frames and stacks, and the containers still open,
// at most a batch of 1,000 entries. Records and memo are held in pages
// of 32,768; once those pages take 256 MiB ([ReadOptions.MaxHeld]),
// each page filled after that is written to an unnamed temporary file in
// [ReadOptions.TempDir] (TMPDIR by default) and read back when it is
// needed, a few pages at a time, so that a read's memory stops growing
// with its entries (the file takes 48 bytes of disk per entry and 9 per
// memo entry, about 66 per entry, past that bound). A read that cannot
// make, write or read back that file fails with the error, which names
// it, and holds no more pages instead; a trace read back after the read
// reports such a failure by [Trace.Err]. On a file of 3 million entries
// with 40 to 90 frames each (1.16 GB) that is 0.22 GiB resident at the
// end of a read (simulate inspect, a replay, fidelity, convert), against
// 2.8 GiB for CPython's pickle.load; on one of 15 million entries without
// frames, 0.7 GiB against 6 GiB. The memo may be referred to freely, but
// trace entries, blocks and segments repeated
// through it (a device trace referred to twice is two devices with the
// same entries, as in Python) count against [MaxRepeated], so that memory
// is bounded by what the file describes.
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
