package bfc_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/bfc"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	pool, err := bfc.New(dev, bfc.DefaultConfig())
	if err != nil {
		panic(err)
	}

	a, _ := pool.Alloc(1000)    // rounded to 1024, from a first region of 2 MiB
	b, _ := pool.Alloc(1500000) // the rest of the region is less than twice the request: all of it
	c, _ := pool.Alloc(3 << 20) // the next region: 4 MiB, less than twice 3 MiB: all of it
	fmt.Println("chunks of", a.Size, b.Size, c.Size, "bytes in regions of", pool.Stats().Reserved)

	_ = pool.Free(b)
	d, _ := pool.Alloc(500000) // the best fit, split: twice the request or more
	fmt.Println("the freed chunk again:", d.Addr == b.Addr, "of", d.Size, "bytes")

	_ = pool.Free(a)
	_ = pool.Free(c)
	_ = pool.Free(d)
	largest, total := pool.FreeSpace()
	fmt.Println("free:", total, "bytes, the largest chunk", largest)
	_ = pool.ReleaseAll()
	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "frees:", s.DeviceFrees, "reserved:", s.Reserved)
	// Output:
	// chunks of 1024 2096128 4194304 bytes in regions of 6291456
	// the freed chunk again: true of 500224 bytes
	// free: 6291456 bytes, the largest chunk 4194304
	// device mallocs: 2 frees: 2 reserved: 0
}

func ExampleRoundedBytes() {
	for _, size := range []int64{1, 256, 257, 1000, 100000} {
		fmt.Println(size, "->", bfc.RoundedBytes(size), "in bin", bfc.BinNumForSize(bfc.RoundedBytes(size)))
	}
	// Output:
	// 1 -> 256 in bin 0
	// 256 -> 256 in bin 0
	// 257 -> 512 in bin 1
	// 1000 -> 1024 in bin 2
	// 100000 -> 100096 in bin 8
}
