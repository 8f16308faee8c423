package pytorch_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
)

const es = "expandable_segments:True"

// plain hides a backend's virtual memory: expandable segments then take
// their pages from Malloc.
type plain struct{ gpualloc.Backend }

// modes are the two ways expandable segments get their pages: Create and
// Map on a backend with virtual memory, Malloc on one without.
var modes = []struct {
	name string
	vm   bool
}{{"vm", true}, {"malloc", false}}

// newExp returns an allocator with configuration conf on a fresh device of
// capacity bytes, its virtual memory hidden unless vm.
func newExp(t *testing.T, conf string, capacity int64, vm bool) (*pytorch.Allocator, *virtual.Device) {
	t.Helper()
	dev := strategytest.NewDevice(capacity)
	var b gpualloc.Backend = dev
	if !vm {
		b = plain{dev}
	}
	a, err := pytorch.New(b, mustConf(t, conf))
	require.NoError(t, err)
	return a, dev
}

// inModes runs test as a subtest for each of modes, on an allocator with
// expandable segments on a fresh device of capacity bytes.
func inModes(t *testing.T, capacity int64, test func(t *testing.T, a *pytorch.Allocator, dev *virtual.Device)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a, dev := newExp(t, es, capacity, m.vm)
			test(t, a, dev)
		})
	}
}

// allocations and frees are the device's allocation and free calls, Malloc
// and Create, Free and Release.
func allocations(ds virtual.Stats) int64 { return ds.Mallocs + ds.Creates }
func frees(ds virtual.Stats) int64       { return ds.Frees + ds.Releases }

// rangeSize is the address space of an expandable segment on a device of
// capacity bytes with pages of page bytes: 1 1/8 the capacity in whole
// pages (segment_size * max_handles).
func rangeSize(capacity, page int64) int64 {
	return (capacity + capacity/8 + page - 1) / page * page
}

// checkDevice checks that the allocator's counters are the device's.
func checkDevice(t *testing.T, a *pytorch.Allocator, dev *virtual.Device) {
	t.Helper()
	st, ds := a.Stats(), dev.Stats()
	require.Zero(t, ds.InvalidCalls, "%v", dev.Err())
	require.Equal(t, ds.Used, st.Reserved, "reserved")
	require.Equal(t, ds.Used, a.MemoryStats().ReservedBytes.Current, "reserved_bytes")
	require.Equal(t, allocations(ds), st.DeviceMallocs, "device allocations")
	require.Equal(t, frees(ds), st.DeviceFrees, "device frees")
	require.Equal(t, ds.MallocBytes+ds.CreateBytes, st.DeviceMallocBytes, "device allocation bytes")
	require.Equal(t, ds.Maps, st.DeviceMaps, "maps")
	require.Equal(t, ds.Unmaps, st.DeviceUnmaps, "unmaps")
}

func TestExpandableGrowth(t *testing.T) {
	inModes(t, 8*GiB, func(t *testing.T, a *pytorch.Allocator, dev *virtual.Device) {
		// Large pool: 20 MiB pages; the range grows at its end.
		b1 := alloc(t, a, 15*MiB, 0)
		assert.Equal(t, int64(20*MiB), dev.Stats().Used)
		b2 := alloc(t, a, 10*MiB, 0) // 5 MiB free at the end, grown by one page
		assert.Equal(t, b1.End(), b2.Addr)
		assert.Equal(t, int64(40*MiB), dev.Stats().Used)
		assert.Equal(t, int64(2), allocations(dev.Stats()))
		b3 := alloc(t, a, 50*MiB, 0) // 15 MiB free, 35 more: two pages
		assert.Equal(t, b2.End(), b3.Addr)
		assert.Equal(t, int64(80*MiB), dev.Stats().Used)
		st := a.Stats()
		assert.Equal(t, int64(80*MiB), st.Reserved)
		assert.Equal(t, int64(80*MiB), a.MemoryStats().ReservedBytes.Current)
		assert.Equal(t, int64(4), st.DeviceMallocs)
		// Small pool: 2 MiB pages, a range of its own.
		s1 := alloc(t, a, 600*KiB, 0)
		s2 := alloc(t, a, 400*KiB, 0)
		assert.Equal(t, s1.End(), s2.Addr)
		assert.Equal(t, int64(82*MiB), dev.Stats().Used)
		s3 := alloc(t, a, 1000*KiB, 0) // fits in the first 2 MiB page
		assert.Equal(t, s2.End(), s3.Addr)
		assert.Equal(t, int64(82*MiB), dev.Stats().Used)
		s4 := alloc(t, a, 1000*KiB, 0) // grows the small range by one page
		assert.Equal(t, s3.End(), s4.Addr)
		assert.Equal(t, int64(84*MiB), dev.Stats().Used)
		assert.False(t, s1.Addr >= b1.Addr && s1.Addr < b1.Addr+uint64(8*GiB))
		checkDevice(t, a, dev)
		for _, b := range []gpualloc.Block{b1, b2, b3, s1, s2, s3, s4} {
			require.NoError(t, a.Free(b))
		}
		require.NoError(t, a.ReleaseAll())
		assert.Equal(t, int64(0), dev.Stats().Used)
		assert.Equal(t, int64(0), a.Stats().Reserved)
		assert.Zero(t, dev.Stats().Ranges)
		checkDevice(t, a, dev)
	})
}

func TestExpandableLowestFit(t *testing.T) {
	inModes(t, 8*GiB, func(t *testing.T, a *pytorch.Allocator, dev *virtual.Device) {
		b1 := alloc(t, a, 20*MiB, 0)
		b2 := alloc(t, a, 20*MiB, 0)
		b3 := alloc(t, a, 20*MiB, 0)
		require.NoError(t, a.Free(b1))
		require.NoError(t, a.Free(b2))
		require.NoError(t, a.ReleaseAll()) // unmaps the first two pages
		assert.Equal(t, int64(20*MiB), dev.Stats().Used)
		// A 30 MiB request maps at the lowest address that fits: the hole.
		b4 := alloc(t, a, 30*MiB, 0)
		assert.Equal(t, b1.Addr, b4.Addr)
		assert.Equal(t, int64(60*MiB), dev.Stats().Used)
		// 10 MiB are free after b4, in the second page.
		b5 := alloc(t, a, 10*MiB, 0)
		assert.Equal(t, b4.End(), b5.Addr)
		assert.Equal(t, int64(60*MiB), dev.Stats().Used)
		// A request larger than the hole goes after b3.
		require.NoError(t, a.Free(b4))
		require.NoError(t, a.Free(b5))
		require.NoError(t, a.ReleaseAll())
		b6 := alloc(t, a, 50*MiB, 0)
		assert.Equal(t, b3.End(), b6.Addr, "the 40 MiB hole is too small and b3 is live: 50 MiB go after b3")
		checkDevice(t, a, dev)
	})
}

func TestExpandableReleasePartial(t *testing.T) {
	inModes(t, 8*GiB, func(t *testing.T, a *pytorch.Allocator, dev *virtual.Device) {
		b1 := alloc(t, a, 30*MiB, 0) // pages 0 and 1
		b2 := alloc(t, a, 5*MiB, 0)  // in page 1
		require.NoError(t, a.Free(b1))
		require.NoError(t, a.ReleaseAll()) // page 0 wholly free, page 1 not
		assert.Equal(t, int64(20*MiB), dev.Stats().Used)
		assert.Equal(t, int64(20*MiB), a.Stats().Reserved)
		largest, total := a.FreeSpace()
		assert.Equal(t, int64(15*MiB), total)
		assert.Equal(t, int64(10*MiB), largest)
		require.NoError(t, a.Free(b2))
		require.NoError(t, a.ReleaseAll())
		assert.Equal(t, int64(0), dev.Stats().Used)
		assert.Equal(t, allocations(dev.Stats()), frees(dev.Stats()))
		checkDevice(t, a, dev)
	})
}

func TestExpandableStreams(t *testing.T) {
	inModes(t, 8*GiB, func(t *testing.T, a *pytorch.Allocator, dev *virtual.Device) {
		b0 := alloc(t, a, 5*MiB, 0)
		b1 := alloc(t, a, 5*MiB, 1) // stream 1 has a range of its own
		assert.Equal(t, int64(40*MiB), dev.Stats().Used)
		assert.NotEqual(t, b0.End(), b1.Addr)
		require.NoError(t, a.Free(b0))
		b2 := alloc(t, a, 5*MiB, 1) // from stream 1's page, not stream 0's
		assert.Equal(t, b1.End(), b2.Addr)
		assert.Equal(t, int64(40*MiB), dev.Stats().Used)
		checkDevice(t, a, dev)
	})
}

func TestExpandableOOM(t *testing.T) {
	inModes(t, 100*MiB, func(t *testing.T, a *pytorch.Allocator, dev *virtual.Device) {
		b1 := alloc(t, a, 70*MiB, 0) // 4 pages: 80 MiB
		_, err := a.Alloc(35 * MiB)  // 25 MiB more than the 10 MiB free: 2 pages, the second refused
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.Equal(t, int64(80*MiB), dev.Stats().Used, "the page made before the refusal is given back")
		assert.Equal(t, int64(1), a.MemoryStats().NumOOMs.Current)
		assert.Equal(t, int64(80*MiB), a.MemoryStats().ReservedBytes.Peak,
			"reserved_bytes count pages once all are mapped, as PyTorch's do")
		checkDevice(t, a, dev)
		b2 := alloc(t, a, 25*MiB, 0) // one page more is fine
		assert.Equal(t, b1.End(), b2.Addr)
		require.NoError(t, a.Free(b1))
		require.NoError(t, a.Free(b2))
		require.NoError(t, a.ReleaseAll())
		assert.Equal(t, int64(0), dev.Stats().Used)
		checkDevice(t, a, dev)
	})
}

func TestExpandableSplit(t *testing.T) {
	inModes(t, 8*GiB, func(t *testing.T, a *pytorch.Allocator, _ *virtual.Device) {
		// In the large pool too a remainder of 512 bytes or more is split off.
		b1 := alloc(t, a, 20*MiB-512, 0)
		b2 := alloc(t, a, 2*MiB, 0)
		assert.Equal(t, int64(20*MiB-512), b1.Size)
		assert.Equal(t, b1.End(), b2.Addr)
	})
}

// TestExpandableVirtualMemory checks the device calls of expandable
// segments on a backend with virtual memory, PyTorch's ExpandableSegment
// call for call: a range of 1 1/8 the capacity in whole pages reserved per
// (stream, pool), one Create and one Map per page mapped, with no Map when
// a Create is refused, one Unmap and one Release per page unmapped, and
// the range's Unreserve when nothing is left mapped in it.
func TestExpandableVirtualMemory(t *testing.T) {
	type op struct {
		size   int64 // > 0: alloc on stream; < 0: free of the block of alloc -size-1; 0: ReleaseAll
		stream uint64
	}
	free := func(i int) op { return op{size: int64(-i - 1)} }
	release := op{}
	large := rangeSize(8*GiB, 20*MiB)
	small := rangeSize(8*GiB, 2*MiB)
	for _, c := range []struct {
		name     string
		capacity int64
		ops      []op
		want     virtual.Stats // the virtual memory counters, Physical and FailedMallocs
		oom      int           // allocs that fail with ErrOutOfMemory
	}{
		{"large page", 8 * GiB, []op{{size: 15 * MiB}},
			virtual.Stats{Reserves: 1, AddressSpace: large, Ranges: 1, Creates: 1, CreateBytes: 20 * MiB, Physical: 20 * MiB, Maps: 1, Mappings: 1}, 0},
		{"range of 1 1/8 the capacity", 1000 * MiB, []op{{size: 15 * MiB}},
			virtual.Stats{Reserves: 1, AddressSpace: 1140 * MiB, Ranges: 1, Creates: 1, CreateBytes: 20 * MiB, Physical: 20 * MiB, Maps: 1, Mappings: 1}, 0},
		{"range in whole pages", 1001 * MiB, []op{{size: 15 * MiB}},
			virtual.Stats{Reserves: 1, AddressSpace: 1140 * MiB, Ranges: 1, Creates: 1, CreateBytes: 20 * MiB, Physical: 20 * MiB, Maps: 1, Mappings: 1}, 0},
		{"two pages at once", 8 * GiB, []op{{size: 35 * MiB}},
			virtual.Stats{Reserves: 1, AddressSpace: large, Ranges: 1, Creates: 2, CreateBytes: 40 * MiB, Physical: 40 * MiB, Maps: 2, Mappings: 2}, 0},
		{"small page", 8 * GiB, []op{{size: 600 * KiB}},
			virtual.Stats{Reserves: 1, AddressSpace: small, Ranges: 1, Creates: 1, CreateBytes: 2 * MiB, Physical: 2 * MiB, Maps: 1, Mappings: 1}, 0},
		{"a range per pool", 8 * GiB, []op{{size: 600 * KiB}, {size: 15 * MiB}},
			virtual.Stats{Reserves: 2, AddressSpace: small + large, Ranges: 2, Creates: 2, CreateBytes: 22 * MiB, Physical: 22 * MiB, Maps: 2, Mappings: 2}, 0},
		{"a range per stream", 8 * GiB, []op{{size: 15 * MiB}, {size: 15 * MiB, stream: 1}},
			virtual.Stats{Reserves: 2, AddressSpace: 2 * large, Ranges: 2, Creates: 2, CreateBytes: 40 * MiB, Physical: 40 * MiB, Maps: 2, Mappings: 2}, 0},
		{"a free unmaps nothing", 8 * GiB, []op{{size: 15 * MiB}, free(0)},
			virtual.Stats{Reserves: 1, AddressSpace: large, Ranges: 1, Creates: 1, CreateBytes: 20 * MiB, Physical: 20 * MiB, Maps: 1, Mappings: 1}, 0},
		{"release unmaps, releases and unreserves", 8 * GiB, []op{{size: 35 * MiB}, free(0), release},
			virtual.Stats{Reserves: 1, Unreserves: 1, Creates: 2, CreateBytes: 40 * MiB, Releases: 2, Maps: 2, Unmaps: 2}, 0},
		{"release of the free pages only", 8 * GiB, []op{{size: 30 * MiB}, {size: 5 * MiB}, free(0), release},
			virtual.Stats{Reserves: 1, AddressSpace: large, Ranges: 1, Creates: 2, CreateBytes: 40 * MiB, Physical: 20 * MiB, Releases: 1, Maps: 2, Unmaps: 1, Mappings: 1}, 0},
		{"a range reused after its release", 8 * GiB, []op{{size: 15 * MiB}, free(0), release, {size: 15 * MiB}},
			virtual.Stats{Reserves: 2, Unreserves: 1, AddressSpace: large, Ranges: 1, Creates: 2, CreateBytes: 40 * MiB, Physical: 20 * MiB, Releases: 1, Maps: 2, Unmaps: 1, Mappings: 1}, 0},
		// The request fails twice: once, and again after the cache is
		// released (which unmaps nothing here).
		{"second create refused: no map", 100 * MiB, []op{{size: 70 * MiB}, {size: 35 * MiB}},
			virtual.Stats{Reserves: 1, AddressSpace: rangeSize(100*MiB, 20*MiB), Ranges: 1, Creates: 6, CreateBytes: 120 * MiB, Physical: 80 * MiB,
				Releases: 2, Maps: 4, Mappings: 4, FailedMallocs: 2}, 1},
		{"first create refused: the empty range stays", 10 * MiB, []op{{size: 15 * MiB}},
			virtual.Stats{Reserves: 1, AddressSpace: rangeSize(10*MiB, 20*MiB), Ranges: 1, FailedMallocs: 2}, 1},
		{"first create refused: release gives the empty range up", 10 * MiB, []op{{size: 15 * MiB}, release},
			virtual.Stats{Reserves: 1, Unreserves: 1, FailedMallocs: 2}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, dev := newExp(t, es, c.capacity, true)
			var blocks []gpualloc.Block
			ooms := 0
			for _, o := range c.ops {
				switch {
				case o.size > 0:
					b, err := a.AllocStream(o.size, o.stream)
					if errors.Is(err, gpualloc.ErrOutOfMemory) {
						ooms++
						continue
					}
					require.NoError(t, err)
					assert.True(t, dev.Holds(b.Addr, b.Size), "the block lies in mapped memory")
					blocks = append(blocks, b)
				case o.size < 0:
					require.NoError(t, a.Free(blocks[-o.size-1]))
				default:
					require.NoError(t, a.ReleaseAll())
				}
			}
			assert.Equal(t, c.oom, ooms, "allocs out of memory")
			ds := dev.Stats()
			got := virtual.Stats{
				Reserves: ds.Reserves, Unreserves: ds.Unreserves, AddressSpace: ds.AddressSpace, Ranges: ds.Ranges,
				Creates: ds.Creates, CreateBytes: ds.CreateBytes, Physical: ds.Physical, Releases: ds.Releases,
				Maps: ds.Maps, Unmaps: ds.Unmaps, Mappings: ds.Mappings, FailedMallocs: ds.FailedMallocs,
			}
			assert.Equal(t, c.want, got)
			assert.Zero(t, ds.Mallocs, "no Malloc with virtual memory")
			checkDevice(t, a, dev)
		})
	}
}

// gran is a device that reports another granularity.
type gran struct {
	*virtual.Device
	g int64
}

func (d gran) Granularity() int64 { return d.g }

// TestExpandableGranularity checks which virtual memory expandable segments
// use: one whose granularity divides both page sizes (2 MiB and 20 MiB).
func TestExpandableGranularity(t *testing.T) {
	for _, c := range []struct {
		g  int64
		vm bool
	}{
		{2 * MiB, true}, {MiB, true}, {512 * KiB, true}, {4 * KiB, true},
		{4 * MiB, false}, {3 * MiB, false}, {20 * MiB, false}, {0, false}, {-2 * MiB, false},
	} {
		t.Run(fmt.Sprint(c.g), func(t *testing.T) {
			dev := strategytest.NewDevice(8 * GiB)
			a, err := pytorch.New(gran{dev, c.g}, mustConf(t, es))
			require.NoError(t, err)
			alloc(t, a, 15*MiB, 0)
			alloc(t, a, 15*KiB, 0)
			ds := dev.Stats()
			if c.vm {
				assert.Equal(t, virtual.Stats{Creates: 2, Maps: 2, Reserves: 2}, virtual.Stats{Creates: ds.Creates, Maps: ds.Maps, Reserves: ds.Reserves, Mallocs: ds.Mallocs})
			} else {
				assert.Equal(t, virtual.Stats{Mallocs: 2}, virtual.Stats{Creates: ds.Creates, Maps: ds.Maps, Reserves: ds.Reserves, Mallocs: ds.Mallocs})
			}
		})
	}
}

// failing is a device whose virtual memory calls fail on demand, with an
// error that is neither out of memory nor invalid use (a driver failure).
type failing struct {
	*virtual.Device
	fail map[string]int // call -> the number of calls of it to let through before failing once; -1: none
}

var errDriver = errors.New("driver failure")

func (f *failing) failNow(call string) bool {
	n, ok := f.fail[call]
	if !ok || n < 0 {
		return false
	}
	if n == 0 {
		f.fail[call] = -1
		return true
	}
	f.fail[call] = n - 1
	return false
}

func (f *failing) Reserve(size int64) (uint64, error) {
	if f.failNow("reserve") {
		return 0, fmt.Errorf("reserve: %w", gpualloc.ErrOutOfMemory)
	}
	return f.Device.Reserve(size)
}

func (f *failing) Unreserve(addr uint64, size int64) error {
	if f.failNow("unreserve") {
		return errDriver
	}
	return f.Device.Unreserve(addr, size)
}

func (f *failing) Map(addr, h uint64) error {
	if f.failNow("map") {
		return errDriver
	}
	return f.Device.Map(addr, h)
}

func (f *failing) Unmap(addr uint64, size int64) error {
	if f.failNow("unmap") {
		return errDriver
	}
	return f.Device.Unmap(addr, size)
}

func (f *failing) Release(h uint64) error {
	if f.failNow("release") {
		return errDriver
	}
	return f.Device.Release(h)
}

// TestExpandableDeviceFailures checks that a virtual memory call that
// fails leaves the allocator's books and the device in agreement, the
// allocator usable, and the error reported: a failed Map gives back the
// pages of the request, a failed Unmap or Release leaves its page mapped,
// a failed Reserve is an error, never an out-of-memory (as PyTorch's
// C10_CUDA_DRIVER_CHECK makes it).
func TestExpandableDeviceFailures(t *testing.T) {
	for _, c := range []struct {
		name    string
		call    string
		after   int     // calls of it that succeed first
		allocs  []int64 // then these allocs, all freed, and a ReleaseAll
		failOn  string  // "alloc" or "release": the step that fails
		physAft int64   // physical memory after the failing step
		want    virtual.Stats
	}{
		{"map refused", "map", 0, []int64{15 * MiB}, "alloc", 0,
			virtual.Stats{Creates: 1, Releases: 1}},
		{"second map refused", "map", 1, []int64{35 * MiB}, "alloc", 0,
			virtual.Stats{Creates: 2, Releases: 2, Maps: 1, Unmaps: 1}},
		{"reserve refused", "reserve", 0, []int64{15 * MiB}, "alloc", 0,
			virtual.Stats{}},
		{"unmap refused", "unmap", 0, []int64{15 * MiB}, "release", 20 * MiB,
			virtual.Stats{Creates: 1, Maps: 1}},
		{"second unmap refused", "unmap", 1, []int64{35 * MiB}, "release", 20 * MiB,
			virtual.Stats{Creates: 2, Releases: 1, Maps: 2, Unmaps: 1}},
		{"release refused: the page is mapped again", "release", 0, []int64{15 * MiB}, "release", 20 * MiB,
			virtual.Stats{Creates: 1, Maps: 2, Unmaps: 1}},
		{"unreserve refused", "unreserve", 0, []int64{15 * MiB}, "release", 0,
			virtual.Stats{Creates: 1, Releases: 1, Maps: 1, Unmaps: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := strategytest.NewDevice(8 * GiB)
			f := &failing{Device: dev, fail: map[string]int{c.call: c.after}}
			a, err := pytorch.New(f, mustConf(t, es))
			require.NoError(t, err)
			var blocks []gpualloc.Block
			for _, size := range c.allocs {
				b, err := a.Alloc(size)
				if c.failOn == "alloc" {
					require.Error(t, err)
					assert.NotErrorIs(t, err, gpualloc.ErrOutOfMemory, "a driver failure is not an out-of-memory")
					continue
				}
				require.NoError(t, err)
				blocks = append(blocks, b)
			}
			for _, b := range blocks {
				require.NoError(t, a.Free(b))
			}
			err = a.ReleaseAll()
			if c.failOn == "release" {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			ds := dev.Stats()
			got := virtual.Stats{Creates: ds.Creates, Releases: ds.Releases, Maps: ds.Maps, Unmaps: ds.Unmaps}
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.physAft, ds.Physical)
			checkDevice(t, a, dev)
			largest, total := a.FreeSpace()
			assert.Equal(t, ds.Used, total, "what stays mapped stays free in the pool")
			assert.LessOrEqual(t, largest, total)

			// Once the device works again, everything goes back.
			clear(f.fail)
			b, err := a.Alloc(15 * MiB)
			require.NoError(t, err)
			require.NoError(t, a.Free(b))
			require.NoError(t, a.ReleaseAll())
			ds = dev.Stats()
			assert.Zero(t, ds.Used)
			assert.Zero(t, ds.Mappings)
			if c.call != "unreserve" {
				assert.Zero(t, ds.Ranges)
			}
			checkDevice(t, a, dev)
		})
	}
}

// TestExpandableRandom replays random traces and checks the invariants
// strategytest checks, on a backend with virtual memory and on one
// without, in lockstep: the two make the same decisions, so that the
// sizes of the blocks, the free space, the reserved memory and the number
// of device allocations and frees are the same; with virtual memory each
// page held is one Create and one Map (a Create refused for want of memory
// gives back those of the request before it, unmapped). The peak of
// reserved memory differs once a request has failed: the pages made
// before the refusal are reserved memory on the backend without virtual
// memory (Malloc), never mapped, and so never reserved, with it.
func TestExpandableRandom(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		for _, conf := range []string{es, es + ",max_split_size_mb:40", es + ",garbage_collection_threshold:0.5,memory_fraction:0.8"} {
			r := rand.New(rand.NewPCG(seed, 7))
			av, dv := newExp(t, conf, 256*MiB, true)
			am, dm := newExp(t, conf, 256*MiB, false)
			type pair struct{ v, m gpualloc.Block }
			var live []pair
			var allocated int64
			failed := false
			for op := 0; op < 4000; op++ {
				switch x := r.IntN(100); {
				case x < 55 || len(live) == 0:
					size := int64(r.IntN(40*MiB)) + 1
					if r.IntN(2) == 0 {
						size = int64(r.IntN(MiB)) + 1
					}
					stream := uint64(r.IntN(2))
					bv, errv := av.AllocStream(size, stream)
					bm, errm := am.AllocStream(size, stream)
					require.Equal(t, errv == nil, errm == nil, "op %d: %v, %v", op, errv, errm)
					if errv != nil {
						require.ErrorIs(t, errv, gpualloc.ErrOutOfMemory)
						require.ErrorIs(t, errm, gpualloc.ErrOutOfMemory)
						failed = true
						continue
					}
					require.Equal(t, bm.Size, bv.Size)
					require.True(t, dv.Holds(bv.Addr, bv.Size), "op %d: block %+v outside mapped memory", op, bv)
					for _, o := range live {
						require.False(t, bv.Addr < o.v.End() && o.v.Addr < bv.End(), "overlap %+v %+v", bv, o.v)
						require.False(t, bm.Addr < o.m.End() && o.m.Addr < bm.End(), "overlap %+v %+v", bm, o.m)
					}
					require.Zero(t, bv.Addr%512)
					require.Zero(t, bm.Addr%512)
					live = append(live, pair{bv, bm})
					allocated += bv.Size
				case x < 97:
					i := r.IntN(len(live))
					require.NoError(t, av.Free(live[i].v))
					require.NoError(t, am.Free(live[i].m))
					allocated -= live[i].v.Size
					live[i] = live[len(live)-1]
					live = live[:len(live)-1]
				default:
					require.NoError(t, av.ReleaseAll())
					require.NoError(t, am.ReleaseAll())
				}
				for _, c := range []struct {
					a   *pytorch.Allocator
					dev *virtual.Device
				}{{av, dv}, {am, dm}} {
					checkDevice(t, c.a, c.dev)
					require.Equal(t, allocated, c.a.Stats().Allocated)
					largest, total := c.a.FreeSpace()
					require.LessOrEqual(t, largest, total)
					require.LessOrEqual(t, total, c.dev.Stats().Used-allocated)
				}
				sv, sm := av.Stats(), am.Stats()
				require.Equal(t, sm.Reserved, sv.Reserved, "op %d", op)
				if failed {
					require.LessOrEqual(t, sv.PeakReserved, sm.PeakReserved, "op %d", op)
				} else {
					require.Equal(t, sm.PeakReserved, sv.PeakReserved, "op %d", op)
				}
				require.Equal(t, sm.DeviceMallocs, sv.DeviceMallocs, "op %d", op)
				require.Equal(t, sm.DeviceFrees, sv.DeviceFrees, "op %d", op)
				require.Equal(t, sm.CacheHits, sv.CacheHits, "op %d", op)
				require.Equal(t, av.MemoryStats(), am.MemoryStats(), "op %d", op)
				lv, tv := av.FreeSpace()
				lm, tm := am.FreeSpace()
				require.Equal(t, [2]int64{lm, tm}, [2]int64{lv, tv}, "op %d", op)
				ds := dv.Stats()
				require.Equal(t, ds.Creates-ds.Releases, int64(ds.Mappings), "op %d: every page made is mapped once", op)
				require.Equal(t, ds.Maps-ds.Unmaps, int64(ds.Mappings), "op %d", op)
			}
			for _, p := range live {
				require.NoError(t, av.Free(p.v))
				require.NoError(t, am.Free(p.m))
			}
			require.NoError(t, av.ReleaseAll())
			require.NoError(t, am.ReleaseAll())
			for _, dev := range []*virtual.Device{dv, dm} {
				ds := dev.Stats()
				require.Zero(t, ds.Used, "%s seed %d", conf, seed)
				require.Zero(t, ds.Ranges, "%s seed %d", conf, seed)
			}
			for _, a := range []*pytorch.Allocator{av, am} {
				_, total := a.FreeSpace()
				require.Zero(t, total)
			}
		}
	}
}

// TestExpandableBundled replays the bundled traces with expandable
// segments on the simulator's device, with its virtual memory and without:
// every figure but the device maps and unmaps is the same.
func TestExpandableBundled(t *testing.T) {
	for _, bt := range traces.Bundled() {
		t.Run(bt.Name, func(t *testing.T) {
			var res [2]sim.Result
			for i, hide := range []bool{false, true} {
				r, err := bt.Open()
				require.NoError(t, err)
				res[i], err = sim.Replay(r, sim.Config{
					SeriesBuckets: -1,
					Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) {
						if hide {
							b = plain{b}
						}
						return pytorch.New(b, mustConf(t, es))
					},
				})
				require.NoError(t, err)
			}
			vm, m := res[0], res[1]
			require.Zero(t, vm.OOMs)
			assert.Equal(t, vm.DeviceMallocs, vm.DeviceMaps, "a Map per Create, without out-of-memory")
			assert.Equal(t, vm.DeviceFrees, vm.DeviceUnmaps, "an Unmap per Release")
			assert.Zero(t, m.DeviceMaps)
			vm.DeviceMaps, vm.DeviceUnmaps = 0, 0
			vm.DeviceTimeNSEst, m.DeviceTimeNSEst = 0, 0 // cuMemCreate and cuMemMap against cuMemAlloc
			vm.ElapsedNS, m.ElapsedNS = 0, 0
			vm.EventsPerSec, m.EventsPerSec = 0, 0
			vm.Devices, m.Devices = nil, nil
			// The split at the peak is exact with virtual memory; without
			// it, blocks lie at addresses of the strategy's own, in no
			// page the replay can name (see sim.Result.AtPeakLiveBytes).
			for _, r := range []*sim.Result{&vm, &m} {
				assert.Equal(t, r.PeakReservedBytes, r.AtPeakLiveBytes+r.AtPeakRoundingBytes+r.AtPeakFragmentedBytes+r.AtPeakCachedBytes)
			}
			assert.Zero(t, m.AtPeakFragmentedBytes)
			m.AtPeakFragmentedBytes, m.AtPeakCachedBytes = vm.AtPeakFragmentedBytes, vm.AtPeakCachedBytes
			assert.Equal(t, m, vm)
		})
	}
}

// books is a backend with virtual memory that accepts every call and
// records the pages mapped and unmapped, for restored segments, whose pages
// no backend created.
type books struct {
	next          uint64
	maps, unmaps  []uint64
	reserves      int
	creates, rels int
}

func (b *books) Malloc(size int64) (uint64, error)       { b.next += uint64(size); return b.next, nil }
func (b *books) Free(addr uint64, size int64) error      { return nil }
func (b *books) MemInfo() (free, total int64)            { return 80 * GiB, 80 * GiB }
func (b *books) Granularity() int64                      { return 2 * MiB }
func (b *books) Reserve(size int64) (uint64, error)      { b.reserves++; return 1 << 50, nil }
func (b *books) Unreserve(addr uint64, size int64) error { return nil }
func (b *books) Create(size int64) (uint64, error)       { b.creates++; return uint64(b.creates), nil }
func (b *books) Release(handle uint64) error             { b.rels++; return nil }
func (b *books) Map(addr uint64, handle uint64) error    { b.maps = append(b.maps, addr); return nil }
func (b *books) Unmap(addr uint64, size int64) error     { b.unmaps = append(b.unmaps, addr); return nil }

// TestRestoreExpandable restores mapped ranges of a small and a large
// expandable segment and allocates from them as PyTorch would.
func TestRestoreExpandable(t *testing.T) {
	const x, y = uint64(0x7f0000000000), uint64(0x7f4000000000)
	b := &books{}
	a, err := pytorch.New(b, mustConf(t, es))
	require.NoError(t, err)
	blk := func(addr uint64, size, req int64) snapshot.Block {
		st := snapshot.Inactive
		if req > 0 {
			st = snapshot.ActiveAllocated
		}
		return snapshot.Block{Address: addr, Size: size, RequestedSize: req, State: st}
	}
	small := snapshot.Segment{Address: x, TotalSize: 2 * MiB, SegmentType: "small", IsExpandable: true,
		Blocks: []snapshot.Block{blk(x, 512, 500), blk(x+512, 2*MiB-512, 0)}}
	large := snapshot.Segment{Address: y, TotalSize: 20 * MiB, SegmentType: "large", IsExpandable: true,
		Blocks: []snapshot.Block{blk(y, 4*MiB, 4*MiB), blk(y+4*MiB, 16*MiB, 0)}}
	// A second mapped range of the large segment, two pages on.
	large2 := snapshot.Segment{Address: y + 40*MiB, TotalSize: 20 * MiB, SegmentType: "large", IsExpandable: true,
		Blocks: []snapshot.Block{blk(y+40*MiB, 20*MiB, 20*MiB)}}
	var live []gpualloc.Block
	for _, s := range []snapshot.Segment{small, large, large2} {
		l, err := a.Restore(s)
		require.NoError(t, err)
		live = append(live, l...)
	}
	require.Len(t, live, 3)
	assert.Equal(t, int64(42*MiB), a.MemoryStats().ReservedBytes.Current)
	_, err = a.Restore(large)
	assert.ErrorContains(t, err, "overlaps memory restored before")

	got, err := a.Alloc(1000)
	require.NoError(t, err)
	assert.Equal(t, x+512, got.Addr, "the free rest of the small range")
	got2, err := a.Alloc(16 * MiB)
	require.NoError(t, err)
	assert.Equal(t, y+4*MiB, got2.Addr, "the free rest of the large range")
	got3, err := a.Alloc(10 * MiB)
	require.NoError(t, err)
	assert.Equal(t, y+20*MiB, got3.Addr, "the unmapped page between the ranges")
	assert.Equal(t, []uint64{y + 20*MiB}, b.maps)
	assert.Zero(t, b.reserves, "the ranges were restored")

	for _, l := range append(live, got, got2, got3) {
		require.NoError(t, a.Free(l))
	}
	require.NoError(t, a.ReleaseAll())
	assert.Len(t, b.unmaps, 1+3)
	assert.Equal(t, 4, b.rels)
	assert.Zero(t, a.MemoryStats().ReservedBytes.Current)
}

// TestRestoreExpandableTooLarge: segments that a device cannot hold fail
// RestoreExpandable for want of memory, with or without virtual memory,
// whether they lie past the range that the device's size gives (on a
// device well below them) or its pages run out (a little below).
func TestRestoreExpandableTooLarge(t *testing.T) {
	const x = uint64(0x7f0000000000)
	seg := snapshot.Segment{Address: x, TotalSize: 200 * MiB, SegmentType: "large", IsExpandable: true,
		Blocks: []snapshot.Block{
			{Address: x, Size: 100 * MiB, RequestedSize: 100 * MiB, State: snapshot.ActiveAllocated},
			{Address: x + 100*MiB, Size: 100 * MiB, State: snapshot.Inactive}}}
	for _, m := range modes {
		for _, capacity := range []int64{100 * MiB, 180 * MiB} {
			a, _ := newExp(t, es, capacity, m.vm)
			_, _, err := a.RestoreExpandable([]snapshot.Segment{seg})
			require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "%s at %d", m.name, capacity)
		}
		a, _ := newExp(t, es, 200*MiB, m.vm)
		live, _, err := a.RestoreExpandable([]snapshot.Segment{seg})
		require.NoError(t, err, m.name)
		assert.Len(t, live, 1)
	}
}
