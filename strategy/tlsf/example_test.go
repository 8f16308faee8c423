package tlsf_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/strategy/tlsf"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	// segments of 1 MiB, so that the sizes below read easily
	pool, err := tlsf.New(dev, tlsf.Config{Round: 512, MinBlock: 512, Chunk: 1 << 20})
	if err != nil {
		panic(err)
	}
	report := func(what string) {
		largest, total := pool.FreeSpace()
		fmt.Println(what+": free", total, "bytes, the largest block", largest)
	}

	var blocks []gpualloc.Block
	for range 4 {
		b, _ := pool.Alloc(200000) // 200192 bytes each, split off one segment
		blocks = append(blocks, b)
	}
	report("four blocks")
	_ = pool.Free(blocks[0])
	_ = pool.Free(blocks[2])
	report("two apart freed")
	_ = pool.Free(blocks[1]) // merges with the free blocks on both sides
	report("three freed")
	_ = pool.Free(blocks[3]) // and the segment is one free block again
	report("all freed")

	big, _ := pool.Alloc(3000000) // more than a chunk: a segment of its own, up to the start of a list
	fmt.Println("a block of", big.Size, "bytes in a segment of", pool.Stats().Reserved-(1<<20))
	_ = pool.Free(big)
	_ = pool.ReleaseAll() // both segments are entirely free
	s := pool.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "frees:", s.DeviceFrees, "reserved:", s.Reserved)
	// Output:
	// four blocks: free 247808 bytes, the largest block 247808
	// two apart freed: free 648192 bytes, the largest block 247808
	// three freed: free 848384 bytes, the largest block 600576
	// all freed: free 1048576 bytes, the largest block 1048576
	// a block of 3000320 bytes in a segment of 3014656
	// device mallocs: 2 frees: 2 reserved: 0
}
