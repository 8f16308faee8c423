package sim

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
)

const g = virtual.Granularity

// pageAlloc is a strategy on a gpualloc.VirtualMemory: every Alloc reserves
// a range, creates its pages one by one and maps them; Free undoes it all.
// On a backend without the interface it falls back to Malloc.
type pageAlloc struct {
	gpualloc.Meter
	b    gpualloc.Backend
	vm   gpualloc.VirtualMemory
	live map[uint64][]uint64 // range -> handles
	// createFirst creates every page of a request before it maps any, as
	// PyTorch's expandable segments do.
	createFirst bool
}

func openPages(b gpualloc.Backend) (gpualloc.Allocator, error) {
	vm, _ := b.(gpualloc.VirtualMemory)
	return &pageAlloc{b: b, vm: vm, live: map[uint64][]uint64{}}, nil
}

func (a *pageAlloc) Alloc(size int64) (gpualloc.Block, error) {
	if a.vm == nil {
		addr, err := a.b.Malloc(size)
		if err != nil {
			return gpualloc.Block{}, err
		}
		a.CountDeviceMalloc(size)
		a.CountAlloc(size, size, false)
		return gpualloc.Block{Addr: addr, Size: size, Requested: size}, nil
	}
	gr := a.vm.Granularity()
	n := (size + gr - 1) / gr
	base, err := a.vm.Reserve(n * gr)
	if err != nil {
		return gpualloc.Block{}, err
	}
	var hs []uint64
	for i := range n {
		h, err := a.vm.Create(gr)
		if err != nil {
			for j, h := range hs {
				if !a.createFirst {
					a.must(a.vm.Unmap(base+uint64(j)*uint64(gr), gr))
					a.CountUnmap()
				}
				a.must(a.vm.Release(h))
				a.CountDeviceFree(gr)
				if a.createFirst {
					a.CountDeviceMalloc(gr) // never mapped, never reserved
				}
			}
			a.must(a.vm.Unreserve(base, n*gr))
			if errors.Is(err, gpualloc.ErrOutOfMemory) {
				a.CountOOM()
			}
			return gpualloc.Block{}, err
		}
		if !a.createFirst {
			a.CountDeviceMalloc(gr)
			a.must(a.vm.Map(base+uint64(i)*uint64(gr), h))
			a.CountMap()
		}
		hs = append(hs, h)
	}
	if a.createFirst {
		for i, h := range hs {
			a.must(a.vm.Map(base+uint64(i)*uint64(gr), h))
			a.CountMap()
			a.CountDeviceMalloc(gr)
		}
	}
	a.live[base] = hs
	a.CountAlloc(size, n*gr, false)
	return gpualloc.Block{Addr: base, Size: n * gr, Requested: size}, nil
}

func (a *pageAlloc) must(err error) {
	if err != nil {
		panic(err)
	}
}

func (a *pageAlloc) Free(b gpualloc.Block) error {
	a.CountFree(b.Requested, b.Size)
	if a.vm == nil {
		a.CountDeviceFree(b.Size)
		return a.b.Free(b.Addr, b.Size)
	}
	gr := a.vm.Granularity()
	for j, h := range a.live[b.Addr] {
		a.must(a.vm.Unmap(b.Addr+uint64(j)*uint64(gr), gr))
		a.CountUnmap()
		a.must(a.vm.Release(h))
		a.CountDeviceFree(gr)
	}
	delete(a.live, b.Addr)
	return a.vm.Unreserve(b.Addr, b.Size)
}

func TestReplayCountsVirtualMemory(t *testing.T) {
	tr := newTrace().alloc(1, 3<<20).alloc(2, 100).free(1).alloc(3, 5<<20).free(2).free(3)
	res, err := Replay(tr.reader(), Config{Open: openPages, Strategy: "pages", Capacity: 8 * g, Verify: true})
	require.NoError(t, err)
	// 2 + 1 pages, then 3 pages with 1 live: peak 4 pages.
	assert.Equal(t, int64(6), res.DeviceMallocs, "one create per page")
	assert.Equal(t, int64(6), res.DeviceFrees, "one release per page")
	assert.Equal(t, 6*g, res.DeviceMallocBytes)
	assert.Equal(t, int64(6), res.DeviceMaps)
	assert.Equal(t, int64(6), res.DeviceUnmaps)
	assert.Equal(t, 4*g, res.PeakReservedBytes, "physical memory is reserved memory")
	assert.Equal(t, int64(0), res.CacheHits)
	require.Len(t, res.Devices, 1)
	dr := res.Devices[0]
	assert.Equal(t, int64(6), dr.DeviceMaps)
	assert.Equal(t, int64(6), dr.DeviceUnmaps)
	assert.Equal(t, int64(0), dr.ReservedBytes)

	// Out of memory half way through a request: what was created is
	// released, and the replay goes on.
	tr = newTrace().alloc(1, 6*g).alloc(2, 3*g).free(1).free(2)
	res, err = Replay(tr.reader(), Config{Open: openPages, Capacity: 8 * g, Verify: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.OOMs)
	assert.Equal(t, int64(8), res.DeviceMallocs)
	assert.Equal(t, 8*g, res.PeakReservedBytes)
}

// TestReplayReservesMappedMemory: physical memory is reserved once it is
// mapped. A request whose pages are all created before any is mapped, as
// PyTorch's expandable segments make them, and whose last page the device
// refuses, gives back pages that were never mapped: device allocations
// and frees, but never reserved memory, as PyTorch's reserved bytes
// never count them.
func TestReplayReservesMappedMemory(t *testing.T) {
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		a, err := openPages(b)
		a.(*pageAlloc).createFirst = true
		return a, err
	}
	tr := newTrace().alloc(1, 6*g).alloc(2, 3*g).free(1).free(2)
	res, err := Replay(tr.reader(), Config{Open: open, Capacity: 8 * g, Verify: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.OOMs)
	assert.Equal(t, int64(8), res.DeviceMallocs, "6 pages, then 2 of 3 before the device refused")
	assert.Equal(t, int64(8), res.DeviceFrees)
	assert.Equal(t, int64(6), res.DeviceMaps)
	assert.Equal(t, 6*g, res.PeakReservedBytes, "the 2 pages never mapped are not reserved")
	assert.Equal(t, 6*g, res.AtPeakLiveBytes+res.AtPeakRoundingBytes+res.AtPeakFragmentedBytes+res.AtPeakCachedBytes)
}

// plainBackend is a Backend without virtual memory.
type plainBackend struct{ gpualloc.Backend }

func TestReplayHidesVirtualMemoryTheBackendLacks(t *testing.T) {
	var saw []bool
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		_, ok := b.(gpualloc.VirtualMemory)
		saw = append(saw, ok)
		return openPages(b)
	}
	tr := newTrace().alloc(1, 3<<20).free(1)
	_, err := Replay(tr.reader(), Config{Open: open, Verify: true})
	require.NoError(t, err)
	res, err := Replay(tr.reader(), Config{Open: open, Verify: true, NewBackend: func(int) (gpualloc.Backend, error) {
		d, err := virtual.New(virtual.Options{})
		return plainBackend{d}, err
	}})
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false}, saw)
	assert.Equal(t, int64(0), res.DeviceMaps)
	assert.Equal(t, int64(1), res.DeviceMallocs)
}

func TestReplayTimesVirtualMemoryCalls(t *testing.T) {
	tr := newTrace().alloc(1, 3<<20).free(1)
	res, err := Replay(tr.reader(), Config{Open: openPages, MeasureTime: true})
	require.NoError(t, err)
	require.NotNil(t, res.DeviceCallNSTotal)
	assert.Positive(t, *res.DeviceCallNSTotal)
}
