package traces_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/gpualloc/gpualloc/traces"
)

func ExampleNewReader() {
	const trace = `# gpualloc trace v1
op,id,size,stream,time_us
alloc,1,4096,0,0
alloc,0x7f3a00000000,1048576,0,5
free,1,,0,9
`
	r, err := traces.NewReader(strings.NewReader(trace), "example.csv", traces.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Format(), r.Columns())
	live := 0
	for r.Scan() {
		ev := r.Event()
		fmt.Printf("%-5s slot %d size %d at %dus\n", ev.Op, ev.Slot, ev.Size, ev.TimeUS)
		if ev.Op == traces.OpAlloc {
			live++
		} else {
			live--
		}
	}
	if err := r.Err(); err != nil {
		fmt.Println(err)
	}
	fmt.Println("live at the end:", live)
	// Output:
	// native CSV [op id size stream time_us]
	// alloc slot 0 size 4096 at 0us
	// alloc slot 1 size 1048576 at 5us
	// free  slot 0 size 4096 at 9us
	// live at the end: 1
}

// A trace in another format reads the same way: here an RMM log, whose
// failed allocations are counted rather than yielded.
func ExampleNewReader_formats() {
	const log = `Thread,Time,Action,Pointer,Size,Stream
140573312345856,11:38:44.503370,allocate,0x7f8a40000000,1024,0x0
140573312345856,11:38:44.503390,allocate failure,0x0,1099511627776,0x0
140573312345856,11:38:44.503411,free,0x7f8a40000000,1024,0x0
`
	r, err := traces.NewReader(strings.NewReader(log), "rmm.log", traces.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Format(), r.Columns())
	for r.Scan() {
		ev := r.Event()
		fmt.Printf("%-5s slot %d size %d at %dus\n", ev.Op, ev.Slot, ev.Size, ev.TimeUS)
	}
	fmt.Println("error:", r.Err(), "failed allocations:", r.AllocFailures())
	// Output:
	// RMM log [op id size stream time_us]
	// alloc slot 0 size 1024 at 0us
	// free  slot 0 size 1024 at 41us
	// error: <nil> failed allocations: 1
}

func ExampleNewReader_errors() {
	const trace = "op,id,size\nalloc,1,4096\nfree,2,\nfree,1,100\nfree,1,\n"
	for _, lenient := range []bool{false, true} {
		r, err := traces.NewReader(strings.NewReader(trace), "bad.csv", traces.Options{Lenient: lenient})
		if err != nil {
			fmt.Println(err)
			return
		}
		n := 0
		for r.Scan() {
			n++
		}
		fmt.Printf("lenient %v: %d events, %d skipped, error %v, first skipped: %v\n", lenient, n, r.Skipped(), r.Err(), r.FirstSkipped())
	}
	// Output:
	// lenient false: 1 events, 0 skipped, error bad.csv:3: free of unknown id 2, first skipped: <nil>
	// lenient true: 2 events, 2 skipped, error <nil>, first skipped: bad.csv:3: free of unknown id 2
}

func ExampleWriter() {
	w := traces.NewWriter(os.Stdout, traces.ColOp, traces.ColID, traces.ColSize, traces.ColTime)
	w.Write(traces.Event{Op: traces.OpAlloc, ID: 1, Size: 4096, TimeUS: 0})
	w.Write(traces.Event{Op: traces.OpFree, ID: 1, Size: 4096, TimeUS: 3})
	if err := w.Close(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// # gpualloc trace v1
	// op,id,size,time_us
	// alloc,1,4096,0
	// free,1,,3
}

func ExampleBundled() {
	for _, b := range traces.Bundled() {
		fmt.Println(b.Name)
	}
	// Output:
	// dynamic
	// resnet18-cpu
	// training
	// transformer-cpu
}

func ExampleDevices() {
	events := []traces.Event{
		{Op: traces.OpAlloc, ID: 1, Size: 512, Device: 2},
		{Op: traces.OpAlloc, ID: 2, Size: 512, Device: 0},
		{Op: traces.OpFree, ID: 1, Size: 512, Device: 2},
	}
	fmt.Println(traces.Devices(events))
	// Output: [0 2]
}
