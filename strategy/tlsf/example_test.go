package tlsf_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/strategy/tlsf"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	pool, err := tlsf.New(dev, tlsf.DefaultConfig())
	if err != nil {
		panic(err)
	}

	a, _ := pool.Alloc(100000)
	b, _ := pool.Alloc(3000)
	fmt.Println("blocks of", a.Size, "and", b.Size, "bytes in a segment of", pool.Stats().Reserved)

	_ = pool.Free(a)
	c, _ := pool.Alloc(100000) // the list of 100352-byte blocks holds a's
	fmt.Println("reused:", c.Addr == a.Addr)

	big, _ := pool.Alloc(30 << 20) // more than a chunk: a segment of its own
	fmt.Println("a block of", big.Size, "bytes; reserved now", pool.Stats().Reserved)
	largest, total := pool.FreeSpace()
	fmt.Println("free:", total, "bytes, the largest block", largest)

	_ = pool.Free(big)
	_ = pool.ReleaseAll() // the big block's segment is entirely free
	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "frees:", s.DeviceFrees, "reserved:", s.Reserved)
	// Output:
	// blocks of 100352 and 3072 bytes in a segment of 20971520
	// reused: true
	// a block of 31457280 bytes; reserved now 52428800
	// free: 20868096 bytes, the largest block 20868096
	// device mallocs: 2 frees: 1 reserved: 20971520
}
