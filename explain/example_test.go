package explain_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/explain"
	_ "github.com/gpualloc/gpualloc/strategy/all"
	"github.com/gpualloc/gpualloc/traces"
)

// A device of 200 MiB that PyTorch's allocator leaves in pieces: thirty
// blocks of 6 MiB, two of every three freed, and then a request of 12 MiB.
func Example() {
	var b strings.Builder
	b.WriteString("op,id,size\n")
	for i := range 30 {
		fmt.Fprintf(&b, "alloc,%d,%d\n", i, 6<<20)
	}
	for i := range 30 {
		if i%3 != 1 {
			fmt.Fprintf(&b, "free,%d,\n", i)
		}
	}
	fmt.Fprintf(&b, "alloc,100,%d\n", 12<<20)
	r, err := traces.NewReader(strings.NewReader(b.String()), "pieces.csv", traces.Options{})
	if err != nil {
		panic(err)
	}
	events, err := traces.ReadAll(r)
	if err != nil {
		panic(err)
	}
	reps, err := explain.Explain(context.Background(), &explain.Trace{Name: "pieces.csv", Format: r.Format(), Events: events},
		explain.Options{Capacity: 200 << 20})
	if err != nil {
		panic(err)
	}
	rep := reps[0]
	size := gpualloc.FormatSize
	fmt.Printf("%s at event %d: request %s, %s free in %d pieces, the largest %s\n", rep.Moment, rep.EventIndex,
		size(rep.RequestBytes), size(rep.FreeBytes), rep.FreePieces, size(rep.LargestFreeBytes))
	fmt.Println(rep.Verdict)
	fmt.Println(rep.Suggestion)
	for _, a := range rep.Alternatives[:2] {
		fmt.Printf("%s: peak %s, fits %v, smallest device %s\n", a.Label, size(*a.PeakReservedBytes), *a.Fits, size(*a.MinCapacityBytes))
	}
	// Output:
	// oom at event 50: request 12.0 MiB, 140 MiB free in 20 pieces, the largest 8.00 MiB
	// fragmentation-bound
	// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
	// as run: peak 200 MiB, fits false, smallest device 212 MiB
	// expandable segments: peak 180 MiB, fits true, smallest device 180 MiB
}
