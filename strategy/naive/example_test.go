package naive_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/naive"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	// MXNet's defaults, with the variables MXNet reads them from
	pool, err := naive.New(dev, naive.Config{
		Page:       4096,    // MXNET_GPU_MEM_POOL_PAGE_SIZE
		LargeRound: 2 << 20, // MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE
		Reserve:    5,       // MXNET_GPU_MEM_POOL_RESERVE
	})
	if err != nil {
		panic(err)
	}

	// Sizes are rounded up to pages, and beyond 2 MiB to multiples of 2 MiB.
	var blocks []gpualloc.Block
	for _, size := range []int64{1000, 4000, 3000000} {
		b, _ := pool.Alloc(size)
		fmt.Println(size, "bytes take a block of", b.Size)
		blocks = append(blocks, b)
	}

	// A freed block waits on the free list of its size, the last freed
	// first out: a 4096-byte request takes the second block, then the first.
	_ = pool.Free(blocks[0])
	_ = pool.Free(blocks[1])
	c, _ := pool.Alloc(4096)
	d, _ := pool.Alloc(1)
	fmt.Println("last in, first out:", c.Addr == blocks[1].Addr && d.Addr == blocks[0].Addr)

	_ = pool.Free(blocks[2])
	e, _ := pool.Alloc(2<<20 + 1) // rounds to 4 MiB too: the cached block
	fmt.Println("reused the 4 MiB block:", e.Addr == blocks[2].Addr)

	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "cache hits:", s.CacheHits, "reserved:", s.Reserved)
	// Output:
	// 1000 bytes take a block of 4096
	// 4000 bytes take a block of 4096
	// 3000000 bytes take a block of 4194304
	// last in, first out: true
	// reused the 4 MiB block: true
	// device mallocs: 3 cache hits: 3 reserved: 4202496
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
