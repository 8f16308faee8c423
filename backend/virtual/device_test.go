package virtual

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

var _ gpualloc.Backend = (*Device)(nil)

func newDevice(t testing.TB, opt Options) *Device {
	t.Helper()
	d, err := New(opt)
	require.NoError(t, err)
	return d
}

// policies runs f once for each address policy.
func policies(t *testing.T, f func(t *testing.T, reuse bool)) {
	for _, reuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reuse=%t", reuse), func(t *testing.T) { f(t, reuse) })
	}
}

func TestNew(t *testing.T) {
	d := newDevice(t, Options{Index: 3})
	assert.Equal(t, DefaultCapacity, d.Capacity())
	assert.Equal(t, 3, d.Index())
	for _, opt := range []Options{{Index: -1}, {Index: MaxIndex + 1}, {Capacity: -5}} {
		_, err := New(opt)
		assert.Error(t, err, "%+v", opt)
	}
}

// TestAddresses checks the addresses of a device that never reuses them:
// each region at the first multiple of 512 after the previous one, from
// the device's own base.
func TestAddresses(t *testing.T) {
	d := newDevice(t, Options{Capacity: 1 << 30})
	var got []uint64
	for _, size := range []int64{100, 1000, 3 << 20, 512} {
		a, err := d.Malloc(size)
		require.NoError(t, err)
		got = append(got, a)
	}
	a := Base
	assert.Equal(t, []uint64{a, a + 512, a + 512 + 1024, a + 512 + 1024 + 3<<20}, got)

	d3 := newDevice(t, Options{Index: 3})
	a3, err := d3.Malloc(1)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x7f4000000000+3<<40), a3)
}

func TestNeverReusesAddresses(t *testing.T) {
	d := newDevice(t, Options{Capacity: 1 << 20})
	seen := map[uint64]bool{}
	for i := range 1000 {
		size := int64(1 + i*37%5000)
		a, err := d.Malloc(size)
		require.NoError(t, err)
		assert.Zero(t, a%Alignment)
		assert.False(t, seen[a], "address %#x handed out twice", a)
		seen[a] = true
		require.NoError(t, d.Free(a, size))
	}
	assert.Empty(t, d.live, "bookkeeping is bounded by the live regions")
	st := d.Stats()
	assert.Equal(t, Stats{Mallocs: 1000, Frees: 1000, MallocBytes: st.MallocBytes, PeakUsed: st.PeakUsed}, st)
}

// TestFirstFit checks the addresses of a device that reuses them, and what
// it holds.
func TestFirstFit(t *testing.T) {
	d := newDevice(t, Options{Capacity: 1 << 20, Reuse: true})
	a, err := d.Malloc(1000)
	require.NoError(t, err)
	assert.Equal(t, Base, a)
	b, err := d.Malloc(512)
	require.NoError(t, err)
	assert.Equal(t, Base+1024, b, "regions start at multiples of 512 after the previous one")
	c, err := d.Malloc(1)
	require.NoError(t, err)
	assert.Equal(t, Base+1536, c)

	require.NoError(t, d.Free(b, 512))
	// First fit: a region that fits the hole goes there, a larger one after.
	e, err := d.Malloc(600)
	require.NoError(t, err)
	assert.Equal(t, Base+2048, e, "600 bytes do not fit the 512-byte hole")
	f, err := d.Malloc(500)
	require.NoError(t, err)
	assert.Equal(t, b, f, "the hole is reused")

	assert.Equal(t, []Region{{a, 1000}, {f, 500}, {c, 1}, {e, 600}}, d.Regions())
	assert.Equal(t, Stats{Used: 2101, PeakUsed: 2101, Regions: 4, Mallocs: 5, Frees: 1, MallocBytes: 2613}, d.Stats())
	for _, r := range d.Regions() {
		require.NoError(t, d.Free(r.Addr, r.Size))
	}
	assert.Equal(t, int64(0), d.Stats().Used)
	assert.Equal(t, int64(2101), d.Stats().PeakUsed)
	assert.NoError(t, d.Err())
}

func TestHolds(t *testing.T) {
	policies(t, func(t *testing.T, reuse bool) {
		d := newDevice(t, Options{Capacity: 1 << 20, Reuse: reuse})
		a, err := d.Malloc(1000)
		require.NoError(t, err)
		b, err := d.Malloc(512)
		require.NoError(t, err)
		assert.Equal(t, []Region{{a, 1000}, {b, 512}}, d.Regions())
		assert.True(t, d.Holds(a, 1000))
		assert.True(t, d.Holds(a+999, 1))
		assert.False(t, d.Holds(a+999, 2), "past the region's end")
		assert.False(t, d.Holds(a+1000, 1), "in the padding")
		assert.False(t, d.Holds(a, 1024), "across two regions")
		assert.False(t, d.Holds(Base-1, 1))
		assert.False(t, d.Holds(a, -1))
		require.NoError(t, d.Free(b, 512))
		assert.False(t, d.Holds(b, 1))
	})
}

// TestCapacity checks that capacity counts the bytes asked for, without
// the padding between regions.
func TestCapacity(t *testing.T) {
	policies(t, func(t *testing.T, reuse bool) {
		d := newDevice(t, Options{Index: 1, Capacity: 10000, Reuse: reuse})
		free, total := d.MemInfo()
		assert.Equal(t, int64(10000), free)
		assert.Equal(t, int64(10000), total)

		a, err := d.Malloc(6000)
		require.NoError(t, err)
		free, total = d.MemInfo()
		assert.Equal(t, int64(4000), free)
		assert.Equal(t, int64(10000), total)

		_, err = d.Malloc(4001)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.EqualError(t, err, "virtual: device 1: malloc of 4001 bytes with 6000 of 10000 bytes in use: out of memory")

		b, err := d.Malloc(4000) // exactly full: alignment padding does not count
		require.NoError(t, err)
		assert.Equal(t, a+6144, b)
		free, _ = d.MemInfo()
		assert.Zero(t, free)

		require.NoError(t, d.Free(a, 6000))
		require.NoError(t, d.Free(b, 4000))
		assert.Equal(t, Stats{Mallocs: 2, Frees: 2, MallocBytes: 10000, FailedMallocs: 1, PeakUsed: 10000}, d.Stats())
	})
}

func TestFailMallocs(t *testing.T) {
	d := newDevice(t, Options{Capacity: 1 << 30})
	d.FailMallocs(2)
	_, err := d.Malloc(1)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "virtual: device 0: malloc of 1 bytes: injected failure: out of memory")
	_, err = d.Create(Granularity)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "Create is refused too")
	_, err = d.Malloc(1)
	require.NoError(t, err)
	st := d.Stats()
	assert.Equal(t, int64(2), st.FailedMallocs)
	assert.Equal(t, int64(1), st.Mallocs)
	assert.Zero(t, st.Creates)
	assert.Zero(t, st.InvalidCalls)
}

func TestInvalidCalls(t *testing.T) {
	policies(t, func(t *testing.T, reuse bool) {
		d := newDevice(t, Options{Capacity: 1 << 20, Reuse: reuse})
		a, err := d.Malloc(4096)
		require.NoError(t, err)

		err = d.Free(a+512, 4096)
		require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
		assert.EqualError(t, err, "virtual: device 0: free of 0x7f4000000200 (4096 bytes), not a live region: invalid free")
		first := err

		err = d.Free(a, 2048)
		require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
		assert.EqualError(t, err, "virtual: device 0: free of 0x7f4000000000 with size 2048, allocated with size 4096: invalid free")

		for _, size := range []int64{0, -1} {
			_, err = d.Malloc(size)
			require.ErrorIs(t, err, gpualloc.ErrInvalidSize)
		}
		assert.True(t, d.Holds(a, 4096), "an invalid free frees nothing")
		require.NoError(t, d.Free(a, 4096))
		err = d.Free(a, 4096)
		require.ErrorIs(t, err, gpualloc.ErrInvalidFree, "double free")

		st := d.Stats()
		assert.Equal(t, int64(5), st.InvalidCalls)
		assert.Equal(t, first, d.Err(), "Err reports the first invalid call")
		assert.Equal(t, int64(1), st.Frees, "failed frees are not counted")
		assert.Zero(t, st.FailedMallocs, "invalid sizes are not failed mallocs")
		assert.Zero(t, st.Used)
	})
}

func TestAllocatesNothing(t *testing.T) {
	policies(t, func(t *testing.T, reuse bool) {
		d := newDevice(t, Options{Capacity: 1 << 30, Reuse: reuse})
		var live []uint64
		for i := range 16 {
			a, err := d.Malloc(int64(i+1) * 1000)
			require.NoError(t, err)
			live = append(live, a)
		}
		require.NoError(t, d.Free(live[5], 6000))
		n := testing.AllocsPerRun(100, func() {
			a, _ := d.Malloc(5000)
			_ = d.Free(a, 5000)
		})
		assert.Zero(t, n)
	})
}

// BenchmarkMallocFree frees and mallocs one of 64 live regions of 4 KiB at
// a time.
func BenchmarkMallocFree(b *testing.B) {
	for _, reuse := range []bool{false, true} {
		b.Run(fmt.Sprintf("reuse=%t", reuse), func(b *testing.B) {
			d := newDevice(b, Options{Reuse: reuse})
			var ring [64]uint64
			for i := range ring {
				ring[i], _ = d.Malloc(4096)
			}
			i := 0
			for b.Loop() {
				if err := d.Free(ring[i], 4096); err != nil {
					b.Fatal(err)
				}
				var err error
				if ring[i], err = d.Malloc(4096); err != nil {
					b.Fatal(err)
				}
				i = (i + 1) % len(ring)
			}
		})
	}
}
