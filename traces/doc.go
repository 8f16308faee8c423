// Package traces reads and writes allocation traces: the sequences of
// allocations and frees that the simulator replays against a strategy. It
// holds the native trace format, and sample traces embedded in the package
// ([Bundled]).
//
// # The native format
//
// A trace is CSV text in UTF-8, optionally compressed with gzip. Lines that
// start with '#' are comments, and blank lines are ignored. The first other
// line is a header naming the columns, in any order:
//
//	column   required  meaning
//	op       yes       alloc or free
//	id       yes       the allocation's identity, any token without commas;
//	                   an id may be used again once freed
//	size     on alloc  requested bytes, decimal, > 0; on a free it may be
//	                   empty, or must match the allocation's
//	stream   no        the allocation's stream, decimal or 0x-hexadecimal (default 0)
//	device   no        device index (default 0); each device has its own pool
//	time_us  no        timestamp in microseconds, non-decreasing
//
// For example:
//
//	# gpualloc trace v1
//	op,id,size,stream,time_us
//	alloc,1,4096,0,0
//	alloc,2,1048576,0,5
//	free,1,,0,9
//
// Column names are matched without regard to case, and so are the ops;
// spaces and tabs around fields are ignored; lines may end in "\r\n". Fields
// are not quoted. On a free, stream and device, like size, may be empty or
// must match the allocation's. A line may be at most [MaxLineBytes] long.
// Ids are compared as bytes, so an id need not be valid UTF-8; everything
// else is ASCII.
//
// # Reading
//
// [NewReader] and [Open] return a [CSVReader], which implements [Reader]: it
// streams, like bufio.Scanner, and checks the trace as it goes, so that every
// [Event] it yields is consistent (a free refers to a live allocation and
// carries its size, stream and device). Input compressed with gzip is
// recognised by its first bytes. Input that is not a trace in this format
// gives an error wrapping [ErrNotTrace], for callers that try several formats
// in turn. A bad event is a [*ParseError] "NAME:LINE: message":
//
//	train.csv:12: free of unknown id 7
//
// or, with [Options].Lenient, is skipped and counted. A free of an id that is
// not live is a "free of unknown id", whether the id was never allocated or
// was freed already: telling the two apart would need the history of every id.
//
// # Ids
//
// An Event's ID is a uint64 made from the id's text (see [IDKey]): canonical
// decimal and 0x-hexadecimal numbers below 2^62 map to their value, tagged so
// that "10" and "0xa" stay distinct; any other token is interned while its
// allocation is live. Two ids are the same exactly when their texts are. An
// Event's Slot is a small number, unique among live allocations and below
// their peak count, for consumers that keep per-allocation state in a slice.
//
// # Cost
//
// A CSVReader keeps a 64 KiB buffer and a hash table of the live allocations;
// its memory depends on the peak number of live allocations, not on the
// trace's length. Each event costs O(1) and allocates nothing, except that an
// id which is not a number is copied while live. Plain text decodes at tens of
// millions of events per second on one core; gzip input is bound by
// compress/gzip's speed.
//
// # Writing
//
// A [Writer] writes events in the native format; [Create] makes a file,
// compressed if its name ends in ".gz". A trace read and written again reads
// back to the same events.
package traces
