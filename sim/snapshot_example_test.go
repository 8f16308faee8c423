package sim_test

import (
	"bytes"
	"fmt"
	"log"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// A replay recorded as a PyTorch memory snapshot: the pages strategy (see
// ExampleReplay) allocates from the device at every alloc, so each alloc
// follows a segment_alloc and each free precedes a segment_free; the block
// still live at the end is its segment's only block.
func ExampleConfig_snapshot() {
	const trace = `op,id,size,stream,time_us
alloc,1,1000,0,0
alloc,2,5000,7,10
free,1,,0,20
`
	r, err := traces.NewReader(strings.NewReader(trace), "tiny.csv", traces.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var file bytes.Buffer
	_, err = sim.Replay(r, sim.Config{
		Strategy: "pages",
		Open:     func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pages{b}, nil },
		Snapshot: func(s *snapshot.Snapshot) error { return snapshot.Write(&file, s, snapshot.WriteOptions{}) },
	})
	if err != nil {
		log.Fatal(err)
	}
	s, err := snapshot.Read(&file, "tiny.pickle")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range s.Trace(0).All() {
		fmt.Printf("%-14s %#x %5d bytes, stream %d, at %d us\n", e.Action, e.Addr, e.Size, e.Stream, e.TimeUS)
	}
	for _, sg := range s.Segments {
		fmt.Printf("segment %#x of %d bytes: %d block %s, %d bytes asked\n", sg.Address, sg.TotalSize, len(sg.Blocks), sg.Blocks[0].State, sg.RequestedSize)
	}
	fmt.Println(s.AllocatorSettings.Other["strategy"])
	// Output:
	// segment_alloc  0x7f4000000000  4096 bytes, stream 0, at 0 us
	// alloc          0x7f4000000000  1000 bytes, stream 0, at 0 us
	// segment_alloc  0x7f4000001000  8192 bytes, stream 7, at 10 us
	// alloc          0x7f4000001000  5000 bytes, stream 7, at 10 us
	// free_requested 0x7f4000000000  1000 bytes, stream 0, at 20 us
	// free_completed 0x7f4000000000  1000 bytes, stream 0, at 20 us
	// segment_free   0x7f4000000000  4096 bytes, stream 0, at 20 us
	// segment 0x7f4000001000 of 8192 bytes: 1 block active_allocated, 5000 bytes asked
	// pages
}
