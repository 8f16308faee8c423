package cli_test

import (
	"errors"
	"os"
	"sync"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/cli"
)

// exactCache is a toy strategy: it caches freed blocks by their exact size
// and gives the cache back to the device when the device runs out.
type exactCache struct {
	dev  gpualloc.Backend
	free map[int64][]uint64 // cached blocks, by size
	live map[uint64]int64   // live blocks: address -> size
}

func (c *exactCache) Alloc(size int64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, gpualloc.ErrInvalidSize
	}
	addr, err := c.take(size)
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		c.release()
		addr, err = c.take(size)
	}
	if err != nil {
		return gpualloc.Block{}, err
	}
	c.live[addr] = size
	return gpualloc.Block{Addr: addr, Size: size, Requested: size}, nil
}

// take returns a cached block of size bytes, or a new one from the device.
func (c *exactCache) take(size int64) (uint64, error) {
	if l := c.free[size]; len(l) > 0 {
		c.free[size] = l[:len(l)-1]
		return l[len(l)-1], nil
	}
	return c.dev.Malloc(size)
}

// release gives every cached block back to the device.
func (c *exactCache) release() {
	for size, l := range c.free {
		for _, addr := range l {
			c.dev.Free(addr, size)
		}
	}
	clear(c.free)
}

func (c *exactCache) Free(b gpualloc.Block) error {
	size, ok := c.live[b.Addr]
	if !ok {
		return gpualloc.ErrInvalidFree
	}
	delete(c.live, b.Addr)
	c.free[size] = append(c.free[size], b.Addr)
	return nil
}

// register registers exactcache, as a program's init function would. (The
// example registers it only when it runs, so that the package's other tests
// see the built-in strategies alone.)
var register = sync.OnceFunc(func() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    "exactcache",
		Summary: "caches freed blocks by exact size; releases the cache when the device is full",
		New: func(b gpualloc.Backend, _ *gpualloc.Params) (gpualloc.Allocator, error) {
			return &exactCache{dev: b, free: map[int64][]uint64{}, live: map[uint64]int64{}}, nil
		},
	})
})

// A strategy registered in the program is one more strategy of the whole
// command: here the bundled traces replayed through it, as
// "simulate -s exactcache" would.
func Example() {
	register()
	code := cli.Main([]string{"-s", "exactcache"}, os.Stdout, os.Stderr)
	if code != 0 {
		os.Exit(code)
	}
	// Output:
	// TRACE            STRATEGY     EVENTS  LOWER BOUND  PEAK ALLOCATED  PEAK RESERVED  OVERHEAD   FRAG  FREE FRAG  AT PEAK L/R/F/C  DEVICE MALLOCS  DEVICE MALLOC BYTES  CACHE HITS  OOMS
	// dynamic          exactcache  182,288     4.91 GiB        4.91 GiB      80.0 GiB*     16.3×  93.9%          -         2/0/0/98          23,959              166 GiB       73.7%     0
	// resnet18-cpu     exactcache   29,728      313 MiB         313 MiB        409 MiB     1.31×  23.4%          -        74/0/0/26             616              409 MiB       95.9%     0
	// training         exactcache   91,588     2.87 GiB        2.87 GiB       3.51 GiB     1.22×  18.2%          -        71/0/0/29             843             3.51 GiB       98.2%     0
	// transformer-cpu  exactcache   16,728      174 MiB         174 MiB       1.54 GiB     9.06×  89.0%          -         3/0/0/97           1,017             1.54 GiB       87.8%     0
	// * the strategy met the device's capacity (it released its cache or retried because the device was full): its figures change with --capacity
	// AT PEAK L/R/F/C: peak reserved in % live / rounding / fragmented (free inside device allocations in use) / cached (device allocations holding nothing live); in bytes as at_peak_* in CSV and JSON
}
