package dualcursor_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/dualcursor"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// Weights go to the top of the device block, an operator's output to its
// base; once the output is freed, the dynamic cursor is back at the base.
func Example() {
	c := dualcursor.DefaultConfig()
	c.Block = 1 << 20
	p, err := dualcursor.New(strategytest.NewDevice(1<<30), c)
	if err != nil {
		panic(err)
	}
	w, _ := p.AllocCategory(100_000, 0, gpualloc.CategoryParameter)
	base := w.Addr + uint64(w.Size) - 1<<20 // the block's first byte
	out, _ := p.AllocCategory(4000, 0, gpualloc.CategoryActivation)
	fmt.Printf("weights at +%d (%d bytes), output at +%d (%d bytes)\n", w.Addr-base, w.Size, out.Addr-base, out.Size)
	p.Free(out)
	tmp, _ := p.AllocCategory(1000, 0, gpualloc.CategoryTemporary)
	fmt.Printf("temporary at +%d (%d bytes)\n", tmp.Addr-base, tmp.Size)
	largest, free := p.FreeSpace()
	fmt.Println("largest free range", largest, "of", free)
	// Output:
	// weights at +948224 (100352 bytes), output at +0 (4096 bytes)
	// temporary at +0 (1536 bytes)
	// largest free range 946688 of 946688
}
