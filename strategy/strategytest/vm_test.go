package strategytest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

// vmBug is a defect planted in vmPool.
type vmBug int

const (
	vmNoBug         vmBug = iota
	vmKeepRange           // Free leaves the range reserved
	vmPastMapping         // Size reaches a page past what is mapped
	vmDoubleUnmap         // Free unmaps the first page twice
	vmMapsUncounted       // maps are not counted in Stats
)

// vmPool gives every block a range of its own, backed by pages created and
// mapped one by one; Free gives everything back. With a bug planted, it is
// wrong in one way.
type vmPool struct {
	vm   gpualloc.VirtualMemory
	bug  vmBug
	m    gpualloc.Meter
	live map[uint64]vmBlock // by address
}

type vmBlock struct {
	b  gpualloc.Block
	hs []uint64 // handles mapped
}

func openVMPool(bug vmBug) OpenFunc {
	return func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		vm, ok := b.(gpualloc.VirtualMemory)
		if !ok {
			return nil, errors.New("no virtual memory")
		}
		return &vmPool{vm: vm, bug: bug, live: map[uint64]vmBlock{}}, nil
	}
}

func (p *vmPool) Stats() gpualloc.Stats { return p.m.Stats() }

func (p *vmPool) Alloc(size int64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, gpualloc.ErrInvalidSize
	}
	gr := p.vm.Granularity()
	if size > 1<<50 {
		p.m.CountOOM()
		return gpualloc.Block{}, fmt.Errorf("vmpool: %w", gpualloc.ErrOutOfMemory)
	}
	n := (size + gr - 1) / gr
	base, err := p.vm.Reserve(n * gr)
	if err != nil {
		return gpualloc.Block{}, err
	}
	var hs []uint64
	for i := range n {
		h, err := p.vm.Create(gr)
		if err == nil {
			p.m.CountDeviceMalloc(gr)
			err = p.vm.Map(base+uint64(i*gr), h)
			p.m.CountMap()
			hs = append(hs, h)
		}
		if err != nil {
			p.undo(base, n*gr, hs)
			if errors.Is(err, gpualloc.ErrOutOfMemory) {
				p.m.CountOOM()
			}
			return gpualloc.Block{}, err
		}
	}
	bsize := n * gr
	if p.bug == vmPastMapping {
		bsize += gr
	}
	p.m.CountAlloc(size, bsize, false)
	b := gpualloc.Block{Addr: base, Size: bsize, Requested: size}
	p.live[base] = vmBlock{b, hs}
	return b, nil
}

func (p *vmPool) undo(base uint64, size int64, hs []uint64) {
	gr := p.vm.Granularity()
	for i, h := range hs {
		if p.vm.Unmap(base+uint64(int64(i)*gr), gr) == nil && p.bug != vmMapsUncounted {
			p.m.CountUnmap()
		}
		if p.bug == vmDoubleUnmap && i == 0 {
			_ = p.vm.Unmap(base, gr)
		}
		if p.vm.Release(h) == nil {
			p.m.CountDeviceFree(gr)
		}
	}
	if p.bug != vmKeepRange {
		_ = p.vm.Unreserve(base, size)
	}
}

func (p *vmPool) Free(b gpualloc.Block) error {
	l, ok := p.live[b.Addr]
	if !ok || l.b != b {
		return gpualloc.ErrInvalidFree
	}
	delete(p.live, b.Addr)
	p.m.CountFree(b.Requested, b.Size)
	p.undo(b.Addr, int64(len(l.hs))*p.vm.Granularity(), l.hs)
	return nil
}

func (p *vmPool) ReleaseAll() error { return nil }

func TestRunPassesVirtualMemoryAllocator(t *testing.T) {
	Run(t, openVMPool(vmNoBug), &Options{Ops: 1000})
}

func TestChecksFindVirtualMemoryBugs(t *testing.T) {
	for _, tt := range []struct {
		name  string
		bug   vmBug
		check string
		want  string
	}{
		{"KeepRange", vmKeepRange, "Blocks", "address ranges"},
		{"PastMapping", vmPastMapping, "Blocks", "lies outside the memory the allocator holds"},
		{"DoubleUnmap", vmDoubleUnmap, "Blocks", "invalid device calls; the first: virtual: device 0: unmap of"},
		{"MapsUncounted", vmMapsUncounted, "Blocks", "DeviceUnmaps = 0, want"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			failed := runChecks(openVMPool(tt.bug), &Options{Seeds: []uint64{1}, Ops: 300})
			err := failed[tt.check]
			require.Error(t, err, "check %s passed; failures: %v", tt.check, failed)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
