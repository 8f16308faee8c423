package bestfit_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	pool, err := bestfit.New(dev, bestfit.DefaultConfig())
	if err != nil {
		panic(err)
	}

	a, _ := pool.Alloc(100000)
	b, _ := pool.Alloc(3000)
	c, _ := pool.Alloc(1 << 20)
	fmt.Println("blocks of", a.Size, b.Size, c.Size, "bytes in a segment of", pool.Stats().Reserved)

	_ = pool.Free(a) // leaves a hole before b
	d, _ := pool.Alloc(2000)
	fmt.Println("the best fit is the hole:", d.Addr == a.Addr)
	largest, total := pool.FreeSpace()
	fmt.Println("free:", total, "bytes, the largest block", largest)

	for _, blk := range []gpualloc.Block{b, c, d} {
		_ = pool.Free(blk) // merged with their free neighbours
	}
	largest, total = pool.FreeSpace()
	fmt.Println("free:", total, "bytes, the largest block", largest)
	_ = pool.ReleaseAll()
	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "frees:", s.DeviceFrees, "reserved:", s.Reserved)
	// Output:
	// blocks of 100352 3072 1048576 bytes in a segment of 20971520
	// the best fit is the hole: true
	// free: 19917824 bytes, the largest block 19819520
	// free: 20971520 bytes, the largest block 20971520
	// device mallocs: 1 frees: 1 reserved: 0
}

func ExampleConfig_RoundSize() {
	c := bestfit.DefaultConfig()
	for _, size := range []int64{1, 512, 513, 100000} {
		fmt.Println(size, "->", c.RoundSize(size))
	}
	c.Round, c.MinBlock = 256, 256 // TensorFlow's, RMM's and Paddle's rounding
	fmt.Println(1, "->", c.RoundSize(1))
	fmt.Println(513, "->", c.RoundSize(513))
	// Output:
	// 1 -> 512
	// 512 -> 512
	// 513 -> 1024
	// 100000 -> 100352
	// 1 -> 256
	// 513 -> 768
}
