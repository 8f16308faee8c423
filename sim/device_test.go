package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

var _ gpualloc.Backend = (*Device)(nil)

func TestDeviceAddresses(t *testing.T) {
	d, err := NewDevice(0, 1<<30)
	require.NoError(t, err)

	a, err := d.Malloc(100)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x7f4000000000), a)

	b, err := d.Malloc(1000)
	require.NoError(t, err)
	assert.Equal(t, a+512, b, "next 512-byte boundary after 100 bytes")

	c, err := d.Malloc(3 << 20)
	require.NoError(t, err)
	assert.Equal(t, b+1024, c)

	e, err := d.Malloc(512)
	require.NoError(t, err)
	assert.Equal(t, c+3<<20, e)

	d1, err := NewDevice(3, 0)
	require.NoError(t, err)
	assert.Equal(t, DefaultCapacity, d1.Capacity())
	a1, err := d1.Malloc(1)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x7f4000000000+3<<40), a1)
	assert.Equal(t, 3, d1.Index())
}

func TestDeviceNeverReusesAddresses(t *testing.T) {
	d, err := NewDevice(0, 1<<20)
	require.NoError(t, err)
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
	assert.Equal(t, DeviceStats{Mallocs: 1000, Frees: 1000, MallocBytes: d.Stats().MallocBytes, PeakUsed: d.Stats().PeakUsed}, d.Stats())
}

func TestDeviceCapacity(t *testing.T) {
	d, err := NewDevice(1, 10000)
	require.NoError(t, err)
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
	assert.EqualError(t, err, "sim: device 1: malloc of 4001 bytes with 6000 of 10000 bytes in use: out of memory")

	b, err := d.Malloc(4000) // exactly full: alignment padding does not count
	require.NoError(t, err)
	free, _ = d.MemInfo()
	assert.Zero(t, free)

	require.NoError(t, d.Free(a, 6000))
	require.NoError(t, d.Free(b, 4000))
	assert.Equal(t, DeviceStats{
		Mallocs: 2, Frees: 2, MallocBytes: 10000, FailedMallocs: 1,
		Used: 0, PeakUsed: 10000, Live: 0,
	}, d.Stats())
}

func TestDeviceErrors(t *testing.T) {
	d, err := NewDevice(0, 1<<20)
	require.NoError(t, err)
	a, err := d.Malloc(4096)
	require.NoError(t, err)

	err = d.Free(a+512, 4096)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, "sim: device 0: free of 0x7f4000000200 (4096 bytes), not a live region: invalid free")

	err = d.Free(a, 2048)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, "sim: device 0: free of 0x7f4000000000 with size 2048, allocated with size 4096: invalid free")

	require.NoError(t, d.Free(a, 4096))
	err = d.Free(a, 4096)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree, "double free")

	_, err = d.Malloc(0)
	require.ErrorIs(t, err, gpualloc.ErrInvalidSize)
	_, err = d.Malloc(-1)
	require.ErrorIs(t, err, gpualloc.ErrInvalidSize)

	st := d.Stats()
	assert.Equal(t, int64(1), st.Frees, "failed frees are not counted")
	assert.Equal(t, int64(2), st.FailedMallocs)
	assert.Zero(t, st.Used)

	_, err = NewDevice(-1, 0)
	assert.Error(t, err)
	_, err = NewDevice(MaxDevice+1, 0)
	assert.Error(t, err)
	_, err = NewDevice(0, -5)
	assert.Error(t, err)
}

func BenchmarkDeviceMallocFree(b *testing.B) {
	d, err := NewDevice(0, DefaultCapacity)
	require.NoError(b, err)
	var ring [64]uint64
	for i := range ring {
		ring[i], _ = d.Malloc(4096)
	}
	i := 0
	for b.Loop() {
		if err := d.Free(ring[i], 4096); err != nil {
			b.Fatal(err)
		}
		ring[i], err = d.Malloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % len(ring)
	}
}
