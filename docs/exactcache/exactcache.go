// exactcache.go
package main

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
)

// exactCache is a toy strategy: it caches freed blocks by their exact size
// and gives the cache back to the device when the device runs out.
type exactCache struct {
	dev  gpualloc.Backend
	free map[int64][]uint64        // cached blocks, by size
	live map[uint64]gpualloc.Block // live blocks, by address, as handed out
}

func (c *exactCache) Alloc(size int64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, gpualloc.ErrInvalidSize
	}
	addr, err := c.take(size)
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		if err = c.release(); err == nil {
			addr, err = c.take(size)
		}
	}
	if err != nil {
		return gpualloc.Block{}, err
	}
	b := gpualloc.Block{Addr: addr, Size: size, Requested: size}
	c.live[addr] = b
	return b, nil
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
func (c *exactCache) release() error {
	for size, l := range c.free {
		for len(l) > 0 {
			if err := c.dev.Free(l[len(l)-1], size); err != nil {
				c.free[size] = l
				return err
			}
			l = l[:len(l)-1]
		}
		delete(c.free, size)
	}
	return nil
}

// Free takes back a live block. A block that is not one, exactly as Alloc
// handed it out (freed already, never allocated, or with another Size or
// Requested), is an error wrapping gpualloc.ErrInvalidFree, and changes
// nothing: the conformance suite checks it.
func (c *exactCache) Free(b gpualloc.Block) error {
	if live, ok := c.live[b.Addr]; !ok || live != b {
		return fmt.Errorf("exactcache: free of %+v: %w", b, gpualloc.ErrInvalidFree)
	}
	delete(c.live, b.Addr)
	c.free[b.Size] = append(c.free[b.Size], b.Addr)
	return nil
}

func init() {
	gpualloc.Register(gpualloc.Strategy{
		Name:    "exactcache",
		Summary: "caches freed blocks by exact size; releases the cache when the device is full",
		New: func(b gpualloc.Backend, _ *gpualloc.Params) (gpualloc.Allocator, error) {
			return &exactCache{dev: b, free: map[int64][]uint64{}, live: map[uint64]gpualloc.Block{}}, nil
		},
	})
}
