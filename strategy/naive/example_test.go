package naive_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/naive"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	pool, err := naive.New(dev, naive.DefaultConfig())
	if err != nil {
		panic(err)
	}

	a, _ := pool.Alloc(100000)
	fmt.Println("block of", a.Size, "bytes")
	_ = pool.Free(a) // cached, not returned to the device

	b, _ := pool.Alloc(99000) // same rounded size: the cached block
	fmt.Println("reused:", b.Addr == a.Addr)
	c, _ := pool.Alloc(200000) // another size: a new device allocation
	fmt.Println("new block of", c.Size, "bytes")

	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "cache hits:", s.CacheHits, "reserved:", s.Reserved)
	// Output:
	// block of 102400 bytes
	// reused: true
	// new block of 200704 bytes
	// device mallocs: 2 cache hits: 1 reserved: 303104
}

func ExampleConfig_RoundSize() {
	c := naive.DefaultConfig()
	for _, size := range []int64{1, 4097, 100000, 2<<20 + 1, 5000000} {
		fmt.Println(size, "->", c.RoundSize(size))
	}
	// Output:
	// 1 -> 4096
	// 4097 -> 8192
	// 100000 -> 102400
	// 2097153 -> 4194304
	// 5000000 -> 6291456
}
