package buddy_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/buddy"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	pool, err := buddy.New(dev, buddy.Config{MinBlock: 512, Arena: 1 << 20})
	if err != nil {
		panic(err)
	}

	a, _ := pool.Alloc(100000) // rounded up to a power of two
	b, _ := pool.Alloc(1)      // at least MinBlock
	fmt.Println("blocks of", a.Size, "and", b.Size, "bytes in one arena:", dev.Stats().Mallocs == 1)
	largest, total := pool.FreeSpace()
	fmt.Println("free:", total, "bytes, the largest block", largest)

	_ = pool.Free(a)
	_ = pool.Free(b) // merges with its buddies back into the whole arena
	largest, total = pool.FreeSpace()
	fmt.Println("free:", total, "bytes, the largest block", largest)

	c, _ := pool.Alloc(3 << 20) // larger than an arena: an arena of its own
	fmt.Println("block of", c.Size, "bytes; device mallocs:", dev.Stats().Mallocs)

	_ = pool.Free(c)
	_ = pool.ReleaseAll() // every empty arena back to the device
	fmt.Println(pool.Spec(), "holds", pool.Stats().Reserved, "bytes")
	// Output:
	// blocks of 131072 and 512 bytes in one arena: true
	// free: 916992 bytes, the largest block 524288
	// free: 1048576 bytes, the largest block 1048576
	// block of 4194304 bytes; device mallocs: 2
	// buddy:min_block=512,arena=1048576 holds 0 bytes
}

func ExampleConfig_RoundSize() {
	c := buddy.DefaultConfig()
	for _, size := range []int64{1, 512, 513, 100000, 5000000, 1<<30 + 1} {
		fmt.Println(size, "->", c.RoundSize(size))
	}
	// Output:
	// 1 -> 512
	// 512 -> 512
	// 513 -> 1024
	// 100000 -> 131072
	// 5000000 -> 8388608
	// 1073741825 -> 2147483648
}
