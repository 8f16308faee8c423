package bestfit_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	c := bestfit.DefaultConfig()
	c.Chunk = 1 << 20 // segments of 1 MiB, so that the sizes below read easily
	pool, err := bestfit.New(dev, c)
	if err != nil {
		panic(err)
	}

	a, _ := pool.Alloc(100000) // split off the front of a new segment
	b, _ := pool.Alloc(3000)   // split off the rest after a
	largest, total := pool.FreeSpace()
	fmt.Println("blocks of", a.Size, "and", b.Size, "bytes; free:", total, "bytes, the largest block", largest)

	_ = pool.Free(a) // leaves a hole before b
	d, _ := pool.Alloc(2000)
	fmt.Println("the best fit is the hole, split:", d.Addr == a.Addr, d.Size)
	largest, total = pool.FreeSpace()
	fmt.Println("free:", total, "bytes, the largest block", largest)

	for _, blk := range []gpualloc.Block{b, d} {
		_ = pool.Free(blk) // merged with their free neighbours
	}
	largest, total = pool.FreeSpace()
	fmt.Println("free:", total, "bytes, the largest block", largest)
	_ = pool.ReleaseAll() // the segment is entirely free: back to the device
	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "frees:", s.DeviceFrees, "reserved:", s.Reserved)
	// Output:
	// blocks of 100352 and 3072 bytes; free: 945152 bytes, the largest block 945152
	// the best fit is the hole, split: true 2048
	// free: 1043456 bytes, the largest block 945152
	// free: 1048576 bytes, the largest block 1048576
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
