package snapshot_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/gpualloc/gpualloc/snapshot"
)

// A read keeps the trace as it was decoded; Snapshot.Trace shows it,
// entry by entry.
func ExampleSnapshot_Trace() {
	var file bytes.Buffer
	err := snapshot.Write(&file, snapshot.New(
		[]snapshot.Segment{{Address: 0x7f0000000000, TotalSize: 2 << 20, SegmentType: "large",
			Blocks: []snapshot.Block{{Address: 0x7f0000000000, Size: 2 << 20, State: snapshot.Inactive}}}},
		[]snapshot.TraceEntry{
			{Action: snapshot.SegmentAlloc, Addr: 0x7f0000000000, Size: 2 << 20, TimeUS: 1},
			{Action: snapshot.Alloc, Addr: 0x7f0000000000, Size: 1000, TimeUS: 2},
			{Action: snapshot.FreeCompleted, Addr: 0x7f0000000000, Size: 1000, TimeUS: 3},
		},
	), snapshot.WriteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := snapshot.ReadWith(&file, "tiny.pickle", snapshot.ReadOptions{NoStacks: true})
	if err != nil {
		log.Fatal(err)
	}
	t := s.Trace(0)
	fmt.Println(t.Len(), "entries")
	for i, e := range t.All() {
		fmt.Printf("%d %-14s %#x %7d bytes at %d us\n", i, e.Action, e.Addr, e.Size, e.TimeUS)
	}
	// Output:
	// 3 entries
	// 0 segment_alloc  0x7f0000000000 2097152 bytes at 1 us
	// 1 alloc          0x7f0000000000    1000 bytes at 2 us
	// 2 free_completed 0x7f0000000000    1000 bytes at 3 us
}
