package strategytest_test

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/strategy/unpooled"
)

func ExampleNewDevice() {
	d := strategytest.NewDevice(1 << 20) // 1 MiB
	a, _ := d.Malloc(1000)
	b, _ := d.Malloc(4096)
	fmt.Printf("%#x %#x\n", a, b)

	_, err := d.Malloc(1 << 20)
	fmt.Println(err)

	err = d.Free(b, 1000)
	fmt.Println(err)

	d.Free(a, 1000)
	c, _ := d.Malloc(512)
	fmt.Printf("%#x\n", c) // first fit: a's address again

	d.FailMallocs(1)
	_, err = d.Malloc(512)
	fmt.Println(err)

	free, total := d.MemInfo()
	fmt.Println(free, total, d.Stats().InvalidCalls)
	// Output:
	// 0x7f4000000000 0x7f4000000400
	// virtual: device 0: malloc of 1048576 bytes with 5096 of 1048576 bytes in use: out of memory
	// virtual: device 0: free of 0x7f4000000400 with size 1000, allocated with size 4096: invalid free
	// 0x7f4000000000
	// virtual: device 0: malloc of 512 bytes: injected failure: out of memory
	// 1043968 1048576 1
}

// sloppy is an allocator that serves a request for 0 bytes instead of
// failing it.
type sloppy struct{ *unpooled.Allocator }

func (s sloppy) Alloc(size int64) (gpualloc.Block, error) {
	b, err := s.Allocator.Alloc(max(size, 1))
	b.Requested = size
	return b, err
}

func ExampleCheck() {
	opt := &strategytest.Options{Align: virtual.Alignment, Seeds: []uint64{1}, Ops: 1000}
	err := strategytest.Check(func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		return unpooled.New(b, unpooled.DefaultConfig())
	}, opt)
	fmt.Println("unpooled:", err)

	err = strategytest.Check(func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		a, err := unpooled.New(b, unpooled.DefaultConfig())
		return sloppy{a}, err
	}, opt)
	fmt.Println("sloppy:", err)
	// Output:
	// unpooled: <nil>
	// sloppy: InvalidSize: op 1, Alloc(0): got {Addr:0x7f4000000000 Size:1 Requested:0}, error <nil>; want an error wrapping gpualloc.ErrInvalidSize
	// RandomTrace/seed=1: seed 1: op 321, Alloc(-1): got {Addr:0x7f4000004400 Size:1 Requested:-1}, error <nil>; want an error wrapping gpualloc.ErrInvalidSize
	// (to rerun only this trace, set Options.Seeds to []uint64{1})
}
