package virtual

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

var _ gpualloc.VirtualMemory = (*Device)(nil)

const g = Granularity

// TestVirtualMemoryRules runs calls of gpualloc.VirtualMemory on a device
// holding one range of 4 pages with 2 pages of physical memory mapped at
// its start and 1 page not mapped. A call the rules refuse fails with the
// error wanted, is counted as an invalid call (unless it ran out of
// memory) and changes nothing else; the books' check of the call
// (vmem.Space.CanMap, ...), where there is one, returns the call's error
// and changes nothing.
func TestVirtualMemoryRules(t *testing.T) {
	type state struct {
		d      *Device
		base   uint64
		h, h2  uint64 // h mapped at base, h2 not mapped
		before Stats
	}
	for _, c := range []struct {
		name      string
		call, can func(s *state) error
		want      error
	}{
		{"reserve of 0 bytes", func(s *state) error { _, err := s.d.Reserve(0); return err }, nil, gpualloc.ErrInvalidSize},
		{"reserve of part of a page", func(s *state) error { _, err := s.d.Reserve(g + 1); return err }, nil, gpualloc.ErrInvalidSize},
		{"reserve past the window", func(s *state) error { _, err := s.d.Reserve(int64(ReserveSpacing)); return err }, nil, gpualloc.ErrOutOfMemory},
		{"create of part of a page", func(s *state) error { _, err := s.d.Create(g / 2); return err }, nil, gpualloc.ErrInvalidSize},
		{"create past capacity", func(s *state) error { _, err := s.d.Create(4 * g); return err }, nil, gpualloc.ErrOutOfMemory},
		{"map", func(s *state) error { return s.d.Map(s.base+2*uint64(g), s.h2) },
			func(s *state) error { return s.d.vm.CanMap(s.base+2*uint64(g), s.h2) }, nil},
		{"map over a mapping", func(s *state) error { return s.d.Map(s.base+uint64(g), s.h2) },
			func(s *state) error { return s.d.vm.CanMap(s.base+uint64(g), s.h2) }, gpualloc.ErrInvalidFree},
		{"map past the range's end", func(s *state) error { return s.d.Map(s.base+3*uint64(g), s.h) },
			func(s *state) error { return s.d.vm.CanMap(s.base+3*uint64(g), s.h) }, gpualloc.ErrInvalidFree},
		{"map outside every range", func(s *state) error { return s.d.Map(Base, s.h2) },
			func(s *state) error { return s.d.vm.CanMap(Base, s.h2) }, gpualloc.ErrInvalidFree},
		{"map not aligned", func(s *state) error { return s.d.Map(s.base+2*uint64(g)+512, s.h2) },
			func(s *state) error { return s.d.vm.CanMap(s.base+2*uint64(g)+512, s.h2) }, gpualloc.ErrInvalidFree},
		{"map of no memory", func(s *state) error { return s.d.Map(s.base+2*uint64(g), 99) },
			func(s *state) error { return s.d.vm.CanMap(s.base+2*uint64(g), 99) }, gpualloc.ErrInvalidFree},
		{"unmap", func(s *state) error { return s.d.Unmap(s.base, 2*g) },
			func(s *state) error { return s.d.vm.CanUnmap(s.base, 2*g) }, nil},
		{"unmap where nothing is mapped", func(s *state) error { return s.d.Unmap(s.base+2*uint64(g), g) },
			func(s *state) error { return s.d.vm.CanUnmap(s.base+2*uint64(g), g) }, gpualloc.ErrInvalidFree},
		{"unmap inside a mapping", func(s *state) error { return s.d.Unmap(s.base+uint64(g), g) },
			func(s *state) error { return s.d.vm.CanUnmap(s.base+uint64(g), g) }, gpualloc.ErrInvalidFree},
		{"unmap with the wrong size", func(s *state) error { return s.d.Unmap(s.base, g) },
			func(s *state) error { return s.d.vm.CanUnmap(s.base, g) }, gpualloc.ErrInvalidFree},
		{"release", func(s *state) error { return s.d.Release(s.h2) },
			func(s *state) error { return s.d.vm.CanRelease(s.h2) }, nil},
		{"release of mapped memory", func(s *state) error { return s.d.Release(s.h) },
			func(s *state) error { return s.d.vm.CanRelease(s.h) }, gpualloc.ErrInvalidFree},
		{"release twice", func(s *state) error {
			require.NoError(t, s.d.Release(s.h2))
			s.before = s.d.Stats()
			return s.d.Release(s.h2)
		}, nil, gpualloc.ErrInvalidFree},
		{"unreserve with a mapping", func(s *state) error { return s.d.Unreserve(s.base, 4*g) },
			func(s *state) error { return s.d.vm.CanUnreserve(s.base, 4*g) }, gpualloc.ErrInvalidFree},
		{"unreserve of part of a range", func(s *state) error { return s.d.Unreserve(s.base, 2*g) },
			func(s *state) error { return s.d.vm.CanUnreserve(s.base, 2*g) }, gpualloc.ErrInvalidFree},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDevice(t, Options{Index: 1, Capacity: 5 * g})
			s := &state{d: d}
			var err error
			s.base, err = d.Reserve(4 * g)
			require.NoError(t, err)
			assert.Equal(t, ReserveBase+ReserveSpacing, s.base, "device 1's window")
			s.h, err = d.Create(2 * g)
			require.NoError(t, err)
			s.h2, err = d.Create(g)
			require.NoError(t, err)
			require.NoError(t, d.Map(s.base, s.h))
			s.before = d.Stats()
			var cerr error
			if c.can != nil {
				cerr = c.can(s)
				require.Equal(t, s.before, d.Stats(), "the check changes nothing")
			}
			err = c.call(s)
			if c.can != nil {
				assert.Equal(t, fmt.Sprint(err), fmt.Sprint(cerr), "the check returns the call's error")
			}
			if c.want == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, c.want)
			after := d.Stats()
			if c.want == gpualloc.ErrOutOfMemory {
				after.FailedMallocs = s.before.FailedMallocs
				assert.NoError(t, d.Err(), "running out is not an invalid call")
			} else {
				assert.Equal(t, s.before.InvalidCalls+1, after.InvalidCalls)
				assert.Equal(t, err, d.Err())
				after.InvalidCalls = s.before.InvalidCalls
			}
			assert.Equal(t, s.before, after, "a refused call changes nothing")
		})
	}
}

func TestVirtualMemory(t *testing.T) {
	d := newDevice(t, Options{Capacity: 8 * g})
	a, err := d.Reserve(4 * g)
	require.NoError(t, err)
	b, err := d.Reserve(2 * g)
	require.NoError(t, err)
	assert.Equal(t, ReserveBase, a)
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
	assert.True(t, d.Holds(a+uint64(g), 3*g), "adjacent mappings cover a block across them")
	assert.True(t, d.Holds(a+uint64(g)+100, 100))
	assert.False(t, d.Holds(a, g+1), "the first page is not mapped")
	assert.False(t, d.Holds(a+uint64(g), 4*g), "past the range")
	assert.True(t, d.Holds(m, 1000), "a region")
	assert.False(t, d.Holds(m, 1001), "a region is not a mapped range")

	require.NoError(t, d.Unmap(b+uint64(g), g))
	require.NoError(t, d.Unmap(a+uint64(g), g))
	require.NoError(t, d.Release(h1))
	require.NoError(t, d.Unreserve(b, 2*g))
	c, err := d.Reserve(g)
	require.NoError(t, err)
	assert.Equal(t, b, c, "a freed range is reused")

	assert.Equal(t, Stats{
		Mallocs: 1, MallocBytes: 1000, Used: 2*g + 1000, PeakUsed: 3*g + 1000, Regions: 1,
		Creates: 2, Releases: 1, CreateBytes: 3 * g, Physical: 2 * g, Handles: 1, Maps: 3, Unmaps: 2, Mappings: 1,
		Reserves: 3, Unreserves: 1, AddressSpace: 5 * g, Ranges: 2,
	}, d.Stats())
	assert.NoError(t, d.Err())
}
