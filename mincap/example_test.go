package mincap_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/mincap"
	"github.com/gpualloc/gpualloc/sim"
	_ "github.com/gpualloc/gpualloc/strategy/all"
	"github.com/gpualloc/gpualloc/traces"
)

// tiny is a small trace: two small buffers, two large ones, a medium one.
// Its peak of live requested bytes, the lower bound every strategy needs,
// is 8,000,000 bytes (7.63 MiB).
const tiny = `op,id,size
alloc,1,1000
alloc,2,5000000
free,1,
alloc,3,1000
free,2,
alloc,4,3000000
free,3,
alloc,5,5000000
free,4,
free,5,
`

// The smallest device on which each of three strategies replays tiny.
func ExampleSearch() {
	r, err := traces.NewReader(strings.NewReader(tiny), "tiny.csv", traces.Options{})
	if err != nil {
		log.Fatal(err)
	}
	events, err := traces.ReadAll(r)
	if err != nil {
		log.Fatal(err)
	}
	for _, spec := range []string{"unpooled", "naive", "pytorch"} {
		sel, err := gpualloc.Select(spec, nil)
		if err != nil {
			log.Fatal(err)
		}
		cfg := sim.Config{Trace: "tiny.csv", Params: sel}
		c, err := mincap.Search(context.Background(), events, cfg, nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-8s %s\n", spec, gpualloc.FormatSize(c))
	}
	// Output:
	// unpooled 8.00 MiB
	// naive    10.0 MiB
	// pytorch  22.0 MiB
}
