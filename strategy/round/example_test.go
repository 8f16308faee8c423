package round_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/round"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	pool, err := round.New(dev, round.DefaultConfig())
	if err != nil {
		panic(err)
	}

	a, _ := pool.Alloc(100000)
	fmt.Println("block of", a.Size, "bytes")
	_ = pool.Free(a) // cached, not returned to the device

	b, _ := pool.Alloc(70000) // same bucket (65537 to 131072 bytes): the cached block
	fmt.Println("reused:", b.Addr == a.Addr)

	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "cache hits:", s.CacheHits, "requested:", s.Requested, "allocated:", s.Allocated)
	// Output:
	// block of 131072 bytes
	// reused: true
	// device mallocs: 1 cache hits: 1 requested: 70000 allocated: 131072
}

func ExampleConfig_RoundSize() {
	c := round.DefaultConfig() // cutoff 24: powers of two up to 16 MiB, multiples of 16 MiB beyond
	for _, size := range []int64{1, 4096, 100000, 5000000, 16 << 20, 16<<20 + 1, 40 << 20} {
		fmt.Printf("%d -> %d (bucket %d)\n", size, c.RoundSize(size), c.Bucket(size))
	}
	// Output:
	// 1 -> 4096 (bucket 12)
	// 4096 -> 4096 (bucket 12)
	// 100000 -> 131072 (bucket 17)
	// 5000000 -> 8388608 (bucket 23)
	// 16777216 -> 16777216 (bucket 24)
	// 16777217 -> 33554432 (bucket 25)
	// 41943040 -> 50331648 (bucket 26)
}
