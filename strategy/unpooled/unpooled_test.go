package unpooled_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/strategy/unpooled"
)

func TestConformance(t *testing.T) {
	strategytest.Run(t, alloctest.Open(unpooled.New, unpooled.DefaultConfig()), &strategytest.Options{Align: virtual.Alignment})
}

// newAllocator returns an allocator on a fresh device of capacity bytes,
// and the device.
func newAllocator(t *testing.T, capacity int64) (*unpooled.Allocator, *virtual.Device) {
	t.Helper()
	return alloctest.New(t, capacity, unpooled.New, unpooled.DefaultConfig())
}

func TestEveryCallGoesToTheDevice(t *testing.T) {
	a, dev := newAllocator(t, 1<<30)
	var blocks []gpualloc.Block
	for _, size := range []int64{1, 4097, 100000, 5000000} {
		b, err := a.Alloc(size)
		require.NoError(t, err)
		assert.Equal(t, size, b.Size, "no rounding")
		assert.Equal(t, size, b.Requested)
		blocks = append(blocks, b)
	}
	total := int64(1 + 4097 + 100000 + 5000000)
	assert.Equal(t, total, dev.Stats().Used)
	for _, b := range blocks {
		require.NoError(t, a.Free(b))
	}
	assert.Zero(t, dev.Stats().Used, "nothing is cached")
	assert.Equal(t, gpualloc.Stats{
		PeakRequested: total, PeakAllocated: total, PeakReserved: total,
		Allocs: 4, Frees: 4, DeviceMallocs: 4, DeviceFrees: 4, DeviceMallocBytes: total,
	}, a.Stats())
	require.NoError(t, a.ReleaseAll())
	assert.Equal(t, "unpooled", a.Spec())
}

func TestOutOfMemory(t *testing.T) {
	a, dev := newAllocator(t, 1<<20)
	b, err := a.Alloc(1 << 19)
	require.NoError(t, err)
	_, err = a.Alloc(1<<19 + 1)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "unpooled: alloc of 524289 bytes: virtual: device 0: malloc of 524289 bytes with 524288 of 1048576 bytes in use: out of memory")
	assert.Equal(t, int64(1), a.Stats().OOMs)
	assert.Zero(t, a.Stats().Retries, "nothing to release, no retry")
	assert.Equal(t, int64(1), dev.Stats().FailedMallocs)
	_, err = a.Alloc(1 << 19)
	require.NoError(t, err, "still usable")
	require.NoError(t, a.Free(b))
}

func TestInvalid(t *testing.T) {
	a, _ := newAllocator(t, 1<<30)
	_, err := a.Alloc(0)
	require.ErrorIs(t, err, gpualloc.ErrInvalidSize)
	assert.EqualError(t, err, "unpooled: alloc of 0 bytes: invalid size")

	b, err := a.Alloc(1000)
	require.NoError(t, err)
	changed := b
	changed.Size = 1024
	err = a.Free(changed)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, fmt.Sprintf("unpooled: free of %#x with Size 1024, Requested 1000: the live block there has 1000 bytes: invalid free", b.Addr))
	require.NoError(t, a.Free(b))
	err = a.Free(b)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, fmt.Sprintf("unpooled: free of %#x (1000 bytes): no live block there: invalid free", b.Addr))

	// A free the device refuses leaves the block live.
	a, err = unpooled.New(alloctest.Refusing{Device: strategytest.NewDevice(1 << 20)}, unpooled.DefaultConfig())
	require.NoError(t, err)
	b, err = a.Alloc(100)
	require.NoError(t, err)
	require.EqualError(t, a.Free(b), fmt.Sprintf("unpooled: free of %#x (100 bytes): device busy", b.Addr))
	assert.Zero(t, a.Stats().Frees)
	assert.Equal(t, int64(100), a.Stats().Requested)

	_, err = unpooled.New(nil, unpooled.DefaultConfig())
	assert.EqualError(t, err, "unpooled: nil Backend")
}

func TestSelectFromEnvironment(t *testing.T) {
	getenv := func(k string) (string, bool) {
		if k == "MXNET_GPU_MEM_POOL_TYPE" {
			return "Unpooled", true
		}
		return "", false
	}
	sel, err := gpualloc.Select("", getenv)
	require.NoError(t, err)
	assert.Equal(t, "MXNET_GPU_MEM_POOL_TYPE", sel.Source())
	assert.Equal(t, "unpooled", sel.String())
	a, err := sel.Open(strategytest.NewDevice(1 << 30))
	require.NoError(t, err)
	assert.IsType(t, &unpooled.Allocator{}, a)

	_, err = gpualloc.Resolve(gpualloc.Spec{Name: "unpooled", Params: []gpualloc.KeyValue{{Key: "page", Value: "4096"}}}, nil)
	assert.EqualError(t, err, `unpooled: unknown parameter "page" (known: none)`)
}

func TestAllocFreeAllocatesNothing(t *testing.T) {
	a, _ := newAllocator(t, 1<<30)
	sizes := alloctest.HitSizes
	i := 0
	// Warm up the live map and the device's region list.
	for range 100 {
		b, _ := a.Alloc(sizes[i%len(sizes)])
		_ = a.Free(b)
		i++
	}
	n := testing.AllocsPerRun(1000, func() {
		b, _ := a.Alloc(sizes[i%len(sizes)])
		_ = a.Free(b)
		i++
	})
	assert.Zero(t, n, "allocations per Alloc+Free in steady state")
}

// BenchmarkAllocFree measures an Alloc and a Free, each a call to the
// strategytest device.
func BenchmarkAllocFree(b *testing.B) {
	a, err := unpooled.New(strategytest.NewDevice(1<<30), unpooled.DefaultConfig())
	require.NoError(b, err)
	alloctest.AllocFree(b, a, alloctest.HitSizes)
}
