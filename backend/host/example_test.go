//go:build linux

package host_test

import (
	"fmt"
	"log"
	"os"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/host"
	_ "github.com/gpualloc/gpualloc/strategy/all"
)

// A program lets its users choose the pool as MXNet's users do, with
// GPUALLOC_POOL_TYPE (a full spec) or MXNET_GPU_MEM_POOL_TYPE, and allocates
// real host memory through it.
func Example() {
	os.Setenv("MXNET_GPU_MEM_POOL_TYPE", "Round") // as a user would, outside the program
	defer os.Unsetenv("MXNET_GPU_MEM_POOL_TYPE")

	mem, err := host.Open(host.Options{Capacity: 1 << 30})
	if err != nil {
		log.Fatal(err)
	}
	defer mem.Close()
	pool, err := gpualloc.FromEnv(mem)
	if err != nil {
		log.Fatal(err)
	}

	b, err := pool.Alloc(100_000)
	if err != nil {
		log.Fatal(err)
	}
	// The block's bytes are the program's until it frees the block.
	buf, err := mem.Bytes(b.Addr, b.Requested)
	if err != nil {
		log.Fatal(err)
	}
	copy(buf, "hello from host memory")
	fmt.Printf("%s: %d bytes asked, a block of %d\n", pool.(gpualloc.Specer).Spec(), b.Requested, b.Size)
	fmt.Println(string(buf[:22]))
	if err := pool.Free(b); err != nil {
		log.Fatal(err)
	}
	free, total := mem.MemInfo()
	fmt.Printf("cached by the pool: %d of %d bytes\n", total-free, total)
	// Output:
	// round:page=4096,cutoff=24,reserve=5: 100000 bytes asked, a block of 131072
	// hello from host memory
	// cached by the pool: 131072 of 1073741824 bytes
}
