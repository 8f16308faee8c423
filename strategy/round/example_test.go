package round_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/round"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	// cutoff 20: powers of two up to 1 MiB, multiples of 1 MiB beyond
	pool, err := round.New(dev, round.Config{Page: 4096, Cutoff: 20, Reserve: 5})
	if err != nil {
		panic(err)
	}

	a, _ := pool.Alloc(100000)
	fmt.Println("100000 bytes: a block of", a.Size)
	_ = pool.Free(a)          // cached in its bucket, not returned to the device
	b, _ := pool.Alloc(70000) // same bucket (65537 to 131072 bytes): the cached block
	fmt.Println("70000 bytes reuse it:", b.Addr == a.Addr)

	c, _ := pool.Alloc(2500000) // beyond the cutoff: 3 MiB, where a power of two would be 4 MiB
	fmt.Println("2500000 bytes: a block of", c.Size)

	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "cache hits:", s.CacheHits, "requested:", s.Requested, "allocated:", s.Allocated)
	// Output:
	// 100000 bytes: a block of 131072
	// 70000 bytes reuse it: true
	// 2500000 bytes: a block of 3145728
	// device mallocs: 2 cache hits: 1 requested: 2570000 allocated: 3276800
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
