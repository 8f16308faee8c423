package virtual_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/backend/virtual"
)

func ExampleDevice() {
	d, _ := virtual.New(virtual.Options{Capacity: 1 << 20, Reuse: true}) // 1 MiB
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
	// virtual: device 0: malloc of 1048576 bytes with 5096 of 1048576 bytes in use: out of memory
	// virtual: device 0: free of 0x7f4000000400 with size 1000, allocated with size 4096: invalid free
	// 1043480 1048576 1
}
