package unpooled_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/strategy/unpooled"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	a, err := unpooled.New(dev, unpooled.DefaultConfig())
	if err != nil {
		panic(err)
	}

	// The same request three times, freed each time: three device
	// allocations of the exact size, and nothing kept.
	for range 3 {
		b, _ := a.Alloc(100000)
		fmt.Println("block of", b.Size, "bytes; device holds", dev.Stats().Used)
		_ = a.Free(b)
	}
	s := a.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "frees:", s.DeviceFrees, "cache hits:", s.CacheHits, "reserved:", s.Reserved)
	// Output:
	// block of 100000 bytes; device holds 100000
	// block of 100000 bytes; device holds 100000
	// block of 100000 bytes; device holds 100000
	// device mallocs: 3 frees: 3 cache hits: 0 reserved: 0
}
