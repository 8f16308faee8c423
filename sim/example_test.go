package sim_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// pages is a strategy without a cache: every request is rounded up to whole
// 4 KiB pages and allocated from the device, every free goes back to it.
type pages struct{ dev gpualloc.Backend }

func (p pages) Alloc(size int64) (gpualloc.Block, error) {
	rounded := (size + 4095) &^ 4095
	addr, err := p.dev.Malloc(rounded)
	if err != nil {
		return gpualloc.Block{}, err
	}
	return gpualloc.Block{Addr: addr, Size: rounded, Requested: size}, nil
}

func (p pages) Free(b gpualloc.Block) error { return p.dev.Free(b.Addr, b.Size) }

func ExampleReplay() {
	const trace = `# gpualloc trace v1
op,id,size,time_us
alloc,1,1000,0
alloc,2,5000,10
free,1,,20
alloc,3,3000,30
free,2,,40
free,3,,50
`
	r, err := traces.NewReader(strings.NewReader(trace), "tiny.csv", traces.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := sim.Replay(r, sim.Config{
		Strategy: "pages",
		Open:     func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pages{b}, nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s with %s: %d events on a %s device\n", res.Trace, res.Strategy, res.Events, gpualloc.FormatSize(res.CapacityBytes))
	fmt.Printf("peak requested %d, allocated %d, reserved %d bytes\n",
		res.PeakRequestedBytes, res.PeakAllocatedBytes, res.PeakReservedBytes)
	fmt.Printf("overhead %.3f, fragmentation %.3f\n", res.Overhead, res.Fragmentation)
	fmt.Printf("device mallocs %d, frees %d, cache hits %d\n", res.DeviceMallocs, res.DeviceFrees, res.CacheHits)
	for _, p := range res.Series.All() {
		fmt.Printf("event %d at %d us: requested %5d, reserved %5d\n", p.First, p.FirstTimeUS, p.Requested.End, p.Reserved.End)
	}
	// Output:
	// tiny.csv with pages: 6 events on a 80.0 GiB device
	// peak requested 8000, allocated 12288, reserved 12288 bytes
	// overhead 1.536, fragmentation 0.349
	// device mallocs 3, frees 3, cache hits 0
	// event 0 at 0 us: requested  1000, reserved  4096
	// event 1 at 10 us: requested  6000, reserved 12288
	// event 2 at 20 us: requested  5000, reserved  8192
	// event 3 at 30 us: requested  8000, reserved 12288
	// event 4 at 40 us: requested  3000, reserved  4096
	// event 5 at 50 us: requested     0, reserved     0
}
