package sim

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

var _ gpualloc.VirtualMemory = (*Device)(nil)

const g = Granularity

// TestDeviceVirtualMemoryRules runs each rule of gpualloc.VirtualMemory on
// a device holding one range of 4 pages with 2 pages of physical memory
// mapped at its start, and checks the error and that nothing changed.
func TestDeviceVirtualMemoryRules(t *testing.T) {
	type state struct {
		d      *Device
		base   uint64
		h, h2  uint64 // h mapped at base, h2 not mapped
		before DeviceStats
	}
	for _, c := range []struct {
		name string
		call func(s *state) error
		want error
	}{
		{"reserve of 0 bytes", func(s *state) error { _, err := s.d.Reserve(0); return err }, gpualloc.ErrInvalidSize},
		{"reserve of part of a page", func(s *state) error { _, err := s.d.Reserve(g + 1); return err }, gpualloc.ErrInvalidSize},
		{"reserve past the window", func(s *state) error { _, err := s.d.Reserve(int64(VirtualSpacing)); return err }, gpualloc.ErrOutOfMemory},
		{"create of part of a page", func(s *state) error { _, err := s.d.Create(g / 2); return err }, gpualloc.ErrInvalidSize},
		{"create past capacity", func(s *state) error { _, err := s.d.Create(4 * g); return err }, gpualloc.ErrOutOfMemory},
		{"map over a mapping", func(s *state) error { return s.d.Map(s.base+uint64(g), s.h2) }, gpualloc.ErrInvalidFree},
		{"map past the range's end", func(s *state) error { return s.d.Map(s.base+3*uint64(g), s.h) }, gpualloc.ErrInvalidFree},
		{"map outside every range", func(s *state) error { return s.d.Map(DeviceBase, s.h2) }, gpualloc.ErrInvalidFree},
		{"map not aligned", func(s *state) error { return s.d.Map(s.base+2*uint64(g)+512, s.h2) }, gpualloc.ErrInvalidFree},
		{"map of no memory", func(s *state) error { return s.d.Map(s.base+2*uint64(g), 99) }, gpualloc.ErrInvalidFree},
		{"unmap where nothing is mapped", func(s *state) error { return s.d.Unmap(s.base+2*uint64(g), g) }, gpualloc.ErrInvalidFree},
		{"unmap inside a mapping", func(s *state) error { return s.d.Unmap(s.base+uint64(g), g) }, gpualloc.ErrInvalidFree},
		{"unmap with the wrong size", func(s *state) error { return s.d.Unmap(s.base, g) }, gpualloc.ErrInvalidFree},
		{"release of mapped memory", func(s *state) error { return s.d.Release(s.h) }, gpualloc.ErrInvalidFree},
		{"release twice", func(s *state) error {
			require.NoError(t, s.d.Release(s.h2))
			s.before = s.d.Stats()
			return s.d.Release(s.h2)
		}, gpualloc.ErrInvalidFree},
		{"unreserve with a mapping", func(s *state) error { return s.d.Unreserve(s.base, 4*g) }, gpualloc.ErrInvalidFree},
		{"unreserve of part of a range", func(s *state) error { return s.d.Unreserve(s.base, 2*g) }, gpualloc.ErrInvalidFree},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := NewDevice(1, 5*g)
			require.NoError(t, err)
			s := &state{d: d}
			s.base, err = d.Reserve(4 * g)
			require.NoError(t, err)
			assert.Equal(t, VirtualBase+VirtualSpacing, s.base, "device 1's window")
			s.h, err = d.Create(2 * g)
			require.NoError(t, err)
			s.h2, err = d.Create(g)
			require.NoError(t, err)
			require.NoError(t, d.Map(s.base, s.h))
			s.before = d.Stats()
			err = c.call(s)
			assert.ErrorIs(t, err, c.want)
			after := d.Stats()
			after.FailedMallocs = s.before.FailedMallocs
			assert.Equal(t, s.before, after, "a refused call changes nothing")
		})
	}
}

func TestDeviceVirtualMemory(t *testing.T) {
	d, err := NewDevice(0, 8*g)
	require.NoError(t, err)
	a, err := d.Reserve(4 * g)
	require.NoError(t, err)
	b, err := d.Reserve(2 * g)
	require.NoError(t, err)
	assert.Equal(t, VirtualBase, a)
	assert.Equal(t, a+4*uint64(g), b, "first fit after the first range")

	h1, err := d.Create(g)
	require.NoError(t, err)
	h2, err := d.Create(2 * g)
	require.NoError(t, err)
	m, err := d.Malloc(1000)
	require.NoError(t, err)
	free, total := d.MemInfo()
	assert.Equal(t, 8*g-3*g-1000, free, "physical memory and Malloc's regions count against capacity")
	assert.Equal(t, 8*g, total)

	// The same memory mapped twice: in a and in b (GMLake's stitching).
	require.NoError(t, d.Map(a+uint64(g), h1))
	require.NoError(t, d.Map(a+2*uint64(g), h2))
	require.NoError(t, d.Map(b+uint64(g), h1))
	assert.True(t, d.Mapped(a+uint64(g), 3*g), "adjacent mappings cover a block across them")
	assert.True(t, d.Mapped(a+uint64(g)+100, 100))
	assert.False(t, d.Mapped(a, g+1), "the first page is not mapped")
	assert.False(t, d.Mapped(a+uint64(g), 4*g), "past the range")
	assert.False(t, d.Mapped(m, 1000), "Malloc's regions are not mapped ranges")

	require.NoError(t, d.Unmap(b+uint64(g), g))
	require.NoError(t, d.Unmap(a+uint64(g), g))
	require.NoError(t, d.Release(h1))
	require.NoError(t, d.Unreserve(b, 2*g))
	c, err := d.Reserve(g)
	require.NoError(t, err)
	assert.Equal(t, b, c, "a freed range is reused")

	st := d.Stats()
	assert.Equal(t, DeviceStats{
		Mallocs: 1, MallocBytes: 1000, Used: 2*g + 1000, PeakUsed: 3*g + 1000, Live: 1,
		Creates: 2, Releases: 1, CreateBytes: 3 * g, Physical: 2 * g, Maps: 3, Unmaps: 2,
		Reserves: 3, Unreserves: 1, AddressSpace: 5 * g,
	}, st)
}

// pageAlloc is a strategy on a gpualloc.VirtualMemory: every Alloc reserves
// a range, creates its pages one by one and maps them; Free undoes it all.
// On a backend without the interface it falls back to Malloc.
type pageAlloc struct {
	gpualloc.Meter
	b    gpualloc.Backend
	vm   gpualloc.VirtualMemory
	live map[uint64][]uint64 // range -> handles
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
				a.must(a.vm.Unmap(base+uint64(j)*uint64(gr), gr))
				a.must(a.vm.Release(h))
				a.CountUnmap()
				a.CountDeviceFree(gr)
			}
			a.must(a.vm.Unreserve(base, n*gr))
			if errors.Is(err, gpualloc.ErrOutOfMemory) {
				a.CountOOM()
			}
			return gpualloc.Block{}, err
		}
		a.CountDeviceMalloc(gr)
		a.must(a.vm.Map(base+uint64(i)*uint64(gr), h))
		a.CountMap()
		hs = append(hs, h)
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
		d, err := NewDevice(0, 0)
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
