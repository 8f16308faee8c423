package strategytest_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func ExampleDevice() {
	d := strategytest.NewDevice(1 << 20) // 1 MiB
	a, _ := d.Malloc(1000)
	b, _ := d.Malloc(4096)
	fmt.Printf("%#x %#x\n", a, b)

	_, err := d.Malloc(1 << 20)
	fmt.Println(err)

	err = d.Free(b, 1000)
	fmt.Println(err)

	free, total := d.MemInfo()
	fmt.Println(free, total, d.Stats().InvalidCalls)
	// Output:
	// 0x7f4000000000 0x7f4000000400
	// strategytest: device malloc of 1048576 bytes with 1043480 of 1048576 bytes free: out of memory
	// strategytest: device free of 0x7f4000000400 with size 1000: the region there is 4096 bytes: invalid free
	// 1043480 1048576 1
}
