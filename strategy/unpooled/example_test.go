package unpooled_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/strategy/unpooled"
)

func Example() {
	dev := strategytest.NewDevice(1 << 30) // a virtual 1 GiB GPU
	a, err := unpooled.New(dev, unpooled.DefaultConfig())
	if err != nil {
		panic(err)
	}
	b, _ := a.Alloc(100000)
	fmt.Println("block of", b.Size, "bytes; device holds", dev.Stats().Used)
	_ = a.Free(b)
	fmt.Println("after Free the device holds", dev.Stats().Used)
	s := a.Stats()
	fmt.Println("device mallocs:", s.DeviceMallocs, "device frees:", s.DeviceFrees)
	// Output:
	// block of 100000 bytes; device holds 100000
	// after Free the device holds 0
	// device mallocs: 1 device frees: 1
}
