package virtual_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc/backend/virtual"
)

// A replay's device 1: addresses 1 TiB above device 0's, never reused, and
// capacity counted without the padding between regions.
func ExampleDevice() {
	d, _ := virtual.New(virtual.Options{Index: 1, Capacity: 16 << 30})
	a, _ := d.Malloc(1000)
	b, _ := d.Malloc(4096)
	d.Free(a, 1000)
	c, _ := d.Malloc(1000)
	fmt.Printf("%#x %#x %#x\n", a, b, c)

	err := d.Free(b, 1000)
	fmt.Println(err)

	free, total := d.MemInfo()
	st := d.Stats()
	fmt.Println(total-free, st.Mallocs, st.Frees, st.Regions, st.InvalidCalls)
	// Output:
	// 0x804000000000 0x804000000400 0x804000001400
	// virtual: device 1: free of 0x804000000400 with size 1000, allocated with size 4096: invalid free
	// 5096 3 1 2 1
}
