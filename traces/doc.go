// Package traces reads and writes allocation traces: the sequences of
// allocations and frees that the simulator replays against a strategy. It
// reads traces in the native format and in the formats of other tools
// ([Open], [NewReader]), writes the native format ([Writer]), and holds
// sample traces embedded in the package ([Bundled]).
//
// # The native format
//
// A trace is CSV text in UTF-8, optionally compressed with gzip. Lines that
// start with '#' are comments, and blank lines are ignored. The first other
// line is a header naming the columns, in any order:
//
//	column   required  meaning
//	op       yes       alloc, free or release
//	id       yes       the allocation's identity, any token without commas;
//	                   an id may be used again once freed; empty on a release
//	size     on alloc  requested bytes, decimal, > 0; on a free it may be
//	                   empty, or must match the allocation's
//	stream   no        the allocation's stream, decimal or 0x-hexadecimal (default 0)
//	device   no        device index (default 0); each device has its own pool
//	time_us  no        timestamp in microseconds, non-decreasing
//	category no        what the allocation holds, in the names of PyTorch's
//	                   memory_viz: parameter, optimizer_state, input,
//	                   activation, gradient, temporary, autograd_detail or
//	                   unknown (empty: unknown); see [gpualloc.Category]
//
// For example:
//
//	# gpualloc trace v1
//	op,id,size,stream,time_us
//	alloc,1,4096,0,0
//	alloc,2,1048576,0,5
//	free,1,,0,9
//
// A release names no allocation: the allocator of its device returns its
// cached memory to the device, as torch.cuda.empty_cache() and MXNet's
// empty_cache do (see [OpRelease]); its id and size are empty (an id is
// ignored, a size is an error).
//
// A column the format does not know (a tag a researcher added) is read
// past and ignored, unless the header also lacks a column the format needs:
// a header without size and with an unknown column is an error that names
// both, as a renamed column is the likely cause. Input that is nearly a
// header (no op column among known names, fields separated by ';' or tabs,
// quoted names) is reported as what it lacks, at its line. What pandas'
// DataFrame.to_csv writes reads as it is: a first column without a name
// (its index) and a last one (a trailing comma) are read past; a number
// with a fraction of zeros ("4096.0", as pandas writes the integers of a
// column with empty cells) is a whole number, and any other fraction an
// error. Other columns without a name are an error.
//
// Column names are matched without regard to case, and so are the ops;
// spaces and tabs around fields are ignored; lines may end in "\r\n". Fields
// are not quoted. On a free, stream, device and category, like size, may be
// empty or must match the allocation's: a free's Event carries its
// allocation's. Category names, like column names, are matched without
// regard to case; a name that is no category is an error that lists the
// known ones. Strategies that do not place allocations by category never
// see it (see [gpualloc.CategoryAllocator]). A line may be at most 64 KiB long.
// Ids are compared as bytes, so an id need not be valid UTF-8; everything
// else is ASCII.
//
// # Reading
//
// [Open] reads a file, and [NewReader] any io.Reader, in whichever format
// its content matches. Input compressed with gzip is recognised by its first
// bytes and decompressed; then each format looks at the first 4 KiB of the
// text in turn, the native format first, like pprof's parsers, and the first
// that recognises it reads the trace. Input that no format recognises gives
// an error wrapping [ErrNotTrace] that lists the formats tried ([Formats]):
//
//	x.bin: not a trace in any known format (native CSV, ...)
//
// A zip archive is named as one, and a file that torch.save wrote (a zip
// archive of pickles and tensors) as that, with the way to record a memory
// snapshot instead.
//
// The reader is a [FileReader]: a [Reader] that streams, like
// bufio.Scanner, and also names its format and the native columns that hold
// what the trace records. Whatever the format, the reader checks the trace
// as it goes, so that every [Event] it yields is consistent: a free refers
// to a live allocation and carries its size, stream and device, and times
// do not go backwards. A bad event is a [*ParseError] "NAME:LINE: message":
//
//	train.csv:12: free of unknown id 7
//
// or, with [Options].Lenient, is skipped and counted. A free of an id that is
// not live is a "free of unknown id", whether the id was never allocated or
// was freed already: telling the two apart would need the history of every id.
//
// # Other formats
//
// RMM logs are the CSV that RAPIDS Memory Manager's logging_resource_adaptor
// writes: a header "Thread,Time,Action,Pointer,Size,Stream", then a line per
// allocate, allocate failure or free. An allocate is an alloc whose id is
// the pointer (0x-hexadecimal), so that a pointer used again after its free
// is a new allocation; a free must name a live pointer and its size, and may
// name another stream (RMM frees are stream-ordered): the event keeps the
// allocation's. An "allocate failure" is not an event; the reader counts it
// ([FileReader].AllocFailures). Times are clock times, "HH:MM:SS.ffffff" (or
// seconds, "1634567890.234567"); TimeUS counts from the first line, a clock
// time more than 12 hours before the previous one is on the next day, and a
// time slightly before the previous one (threads write their lines a little
// out of order) is taken as the previous one. A free of a pointer that is
// not live, as in a log started while allocations were live, is a bad event
// like any other: an error, or skipped and counted with [Options].Lenient.
// The reader streams, in memory proportional to the live allocations.
//
// MiniMalloc CSV is the input of Google's MiniMalloc, static buffers with
// lifetimes: "id,lower,upper,size", the columns in any order, with
// MiniMalloc's aliases (begin and start for lower, end for an inclusive
// upper, buffer and buffer_id for id) and its optional alignment and offset
// columns, which are ignored; a gaps column with gaps is refused. Each
// buffer is live over [lower, upper): an alloc at lower and a free at upper,
// in the order of their times, frees before allocs at the same time and
// otherwise in the order of the file. TimeUS is MiniMalloc's time unit,
// whatever it stands for. Every buffer must have 0 <= lower < upper, a size
// > 0 and an id of its own. Events come in time order, which the file does
// not follow, so the reader reads all the buffers first: its memory is about
// 80 bytes a buffer (and, while it reads, a set of the ids seen), and it
// reports bad buffers when it is created. Package plan reads the buffers
// themselves from it, with MiniMalloc's ids and times (plan.FromMiniMalloc).
//
// PyTorch memory snapshots (the pickles of torch.cuda.memory._dump_snapshot)
// yield the allocations and frees of their trace, after the blocks that were
// live before its first entry; errors name the entry ("x.pickle:
// device_traces[0][2]: ...").
//
// A snapshot's releases. PyTorch records each segment it gives back to the
// device (segment_free, or segment_unmap for expandable segments), but not
// why. Those that no failing allocation caused, torch.cuda.empty_cache()
// first among them, are yielded as release events where they happened;
// those made inside malloc to satisfy a failing cudaMalloc
// (release_available_cached_blocks, release_cached_blocks: PyTorch's
// c10/cuda/CUDACachingAllocator.cpp) are the allocator's own decision,
// which the replayed strategy takes or not. The two are told apart by the
// entries' frames when the file records stacks: a frame of empty_cache
// (torch/cuda/memory.py) or of the allocator's emptyCache marks a release
// (snapshot.TraceEntry.EmptyCache). Without such a frame, by the pattern:
// a malloc's release is followed by the segment_alloc or segment_map of
// the room it made, or by the oom it failed with; a run of frees followed
// by anything else is a release.
//
// A replay of a snapshot starts from the allocator's state when its trace
// began: the reader is a [StartReporter], whose [Start] holds that state,
// the settings recorded and the private pools, and a strategy that can restore it (package sim's
// Restorer: the pytorch strategy) holds every segment of it, fully free
// ones included.
//
// # Ids
//
// An Event's ID is a uint64 made from the id's text: canonical decimal and
// 0x-hexadecimal numbers below 2^62 map to their value (hexadecimal ones
// with bit 62 set, so that "10" and "0xa" stay distinct); any other token is
// interned while its allocation is live, and gets an ID with bit 63 set. Two ids are the same exactly when their texts are. An
// Event's Slot is a small number, unique among live allocations and below
// their peak count, for consumers that keep per-allocation state in a slice.
//
// # Cost
//
// A reader of the native format keeps a 64 KiB buffer and a hash table of
// the live allocations; its memory depends on the peak number of live
// allocations, not on the trace's length. Each event costs O(1) and allocates nothing, except that an
// id which is not a number is copied while live. Plain text decodes at tens of
// millions of events per second on one core; gzip input is bound by
// the speed of its decompression (github.com/klauspost/compress/gzip).
//
// # Writing
//
// A [Writer] writes events in the native format; [Create] makes a file,
// compressed if its name ends in ".gz". A trace read and written again reads
// back to the same events.
//
// # Bundled traces
//
// [Bundled] returns sample traces embedded in the package, of two kinds.
// The generated ones, "training" and "dynamic", come from the workloads of
// package traces/gen; the go:generate lines of bundled.go make them, and a
// test checks that they still match. The recorded ones are real:
//
//	resnet18-cpu     torchvision's resnet18, 3 training steps with SGD,
//	                 batch 8 of 224x224 images
//	transformer-cpu  a 2-layer transformer encoder (d_model 256) trained
//	                 with Adam for 16 steps, batch 8, its sequence length
//	                 drawn from 16..256 at every step
//
// Both trained on a CPU with Debian's PyTorch, under an LD_PRELOAD library
// (traces/record) that logs every posix_memalign of the process (the call
// through which PyTorch's CPU allocator takes memory, and oneDNN its own
// buffers) and every free of what those returned, with its address, size
// and time since recording started. The ids are the real addresses, and
// comment lines ("# phase: step 1 backward") mark the phases of each step.
// Blocks still live when recording stops, after the model is dropped (in
// resnet18-cpu, about 200 small ones that oneDNN caches for the life of the
// process), are freed at the end, after a "# phase: end" line, so that
// every trace frees everything. To record them again, run
// traces/record/record.sh from the repository's root; it needs gcc, make
// and the python3-torch and python3-torchvision packages, and writes the
// versions it used to traces/record/VERSIONS. A new recording differs from
// the committed one in its addresses and timings, and in its order of
// events wherever PyTorch's is not fixed.
package traces
