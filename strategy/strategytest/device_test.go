package strategytest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

func TestDeviceMallocFree(t *testing.T) {
	d := NewDevice(1 << 20)
	a, err := d.Malloc(1000)
	require.NoError(t, err)
	assert.Equal(t, DeviceBase, a)
	b, err := d.Malloc(512)
	require.NoError(t, err)
	assert.Equal(t, DeviceBase+1024, b, "regions start at multiples of 512 after the previous one")
	c, err := d.Malloc(1)
	require.NoError(t, err)
	assert.Equal(t, DeviceBase+1536, c)

	free, total := d.MemInfo()
	assert.Equal(t, int64(1<<20-1513), free, "free bytes are exact, without padding")
	assert.Equal(t, int64(1<<20), total)
	assert.True(t, d.Holds(a, 1000))
	assert.True(t, d.Holds(a+999, 1))
	assert.False(t, d.Holds(a+999, 2), "past the region's end")
	assert.False(t, d.Holds(a+1000, 1), "in the padding")
	assert.False(t, d.Holds(a, 1024), "across two regions")
	assert.False(t, d.Holds(DeviceBase-1, 1))

	require.NoError(t, d.Free(b, 512))
	assert.False(t, d.Holds(b, 1))
	// First fit: a region that fits the hole goes there, a larger one after.
	e, err := d.Malloc(600)
	require.NoError(t, err)
	assert.Equal(t, DeviceBase+2048, e, "600 bytes do not fit the 512-byte hole")
	f, err := d.Malloc(500)
	require.NoError(t, err)
	assert.Equal(t, b, f, "the hole is reused")

	assert.Equal(t, []Region{{a, 1000}, {f, 500}, {c, 1}, {e, 600}}, d.Regions())
	assert.Equal(t, DeviceStats{
		Capacity: 1 << 20, Used: 2101, PeakUsed: 2101, Regions: 4,
		Mallocs: 5, Frees: 1, MallocBytes: 2613,
	}, d.Stats())
	for _, r := range d.Regions() {
		require.NoError(t, d.Free(r.Addr, r.Size))
	}
	assert.Equal(t, int64(0), d.Stats().Used)
	assert.Equal(t, int64(2101), d.Stats().PeakUsed)
	assert.NoError(t, d.Err())
}

func TestDeviceOutOfMemory(t *testing.T) {
	d := NewDevice(4096)
	_, err := d.Malloc(4097)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "strategytest: device malloc of 4097 bytes with 4096 of 4096 bytes free: out of memory")
	a, err := d.Malloc(4000)
	require.NoError(t, err)
	_, err = d.Malloc(97)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	b, err := d.Malloc(96)
	require.NoError(t, err, "capacity counts bytes, not padding")
	assert.Equal(t, a+4096, b)
	assert.Equal(t, int64(2), d.Stats().FailedMallocs)
	assert.Zero(t, d.Stats().InvalidCalls)
}

func TestDeviceFailMallocs(t *testing.T) {
	d := NewDevice(1 << 20)
	d.FailMallocs(2)
	for range 2 {
		_, err := d.Malloc(1)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	}
	_, err := d.Malloc(1)
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Stats().FailedMallocs)
	assert.Equal(t, int64(1), d.Stats().Mallocs)
}

func TestDeviceInvalidCalls(t *testing.T) {
	d := NewDevice(1 << 20)
	a, err := d.Malloc(4096)
	require.NoError(t, err)

	err = d.Free(a+512, 4096)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, fmt.Sprintf("strategytest: device free of %#x (4096 bytes): no region starts there: invalid free", a+512))
	first := err

	err = d.Free(a, 4095)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.Contains(t, err.Error(), "with size 4095: the region there is 4096 bytes")

	_, err = d.Malloc(0)
	require.ErrorIs(t, err, gpualloc.ErrInvalidSize)

	assert.Equal(t, int64(3), d.Stats().InvalidCalls)
	assert.Equal(t, first, d.Err(), "Err reports the first invalid call")
	assert.True(t, d.Holds(a, 4096), "an invalid free frees nothing")

	require.NoError(t, d.Free(a, 4096))
	err = d.Free(a, 4096)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree, "double free")
}

func TestNewDevicePanics(t *testing.T) {
	assert.PanicsWithValue(t, "strategytest: NewDevice(0): capacity must be positive", func() { NewDevice(0) })
}

func TestDeviceAllocatesNothing(t *testing.T) {
	d := NewDevice(1 << 30)
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
}
