package mxnetpool_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// roundTo512 rounds up to a multiple of 512, or to 0 past 2^40 bytes.
func roundTo512(size int64) int64 {
	if size > 1<<40 {
		return 0
	}
	return (size + 511) &^ 511
}

func options(reserve int) mxnetpool.Options {
	return mxnetpool.Options{Name: "test", Spec: "test:unit=512", Reserve: reserve, Round: roundTo512}
}

func TestConformance(t *testing.T) {
	for _, reserve := range []int{0, 5, 100} {
		t.Run(fmt.Sprintf("reserve=%d", reserve), func(t *testing.T) {
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				return mxnetpool.New(b, options(reserve))
			}, &strategytest.Options{Caching: true, Align: strategytest.DeviceAlign})
		})
	}
}

func TestNew(t *testing.T) {
	dev := strategytest.NewDevice(1 << 30)
	p, err := mxnetpool.New(dev, options(5))
	require.NoError(t, err)
	assert.Equal(t, "test:unit=512", p.Spec())

	_, err = mxnetpool.New(nil, options(5))
	assert.EqualError(t, err, "test: nil Backend")
	for _, reserve := range []int{-1, 101} {
		_, err = mxnetpool.New(dev, options(reserve))
		var pe *gpualloc.ParamError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, gpualloc.ParamError{Key: "reserve", Msg: "must be a percentage from 0 to 100"}, *pe)
	}
	assert.EqualError(t, err, "test: reserve=101: must be a percentage from 0 to 100")
}

func TestRoundedSizeOverflows(t *testing.T) {
	p, err := mxnetpool.New(strategytest.NewDevice(1<<30), options(5))
	require.NoError(t, err)
	_, err = p.Alloc(math.MaxInt64)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "test: alloc of 9223372036854775807 bytes: rounded size overflows: out of memory")
	assert.Equal(t, int64(1), p.Stats().OOMs)
}

// recording is a device that records the regions freed, in order.
type recording struct {
	*strategytest.Device
	freed []uint64
}

func (r *recording) Free(addr uint64, size int64) error {
	r.freed = append(r.freed, addr)
	return r.Device.Free(addr, size)
}

func TestReleaseOrder(t *testing.T) {
	dev := &recording{Device: strategytest.NewDevice(1 << 30)}
	p, err := mxnetpool.New(dev, options(0))
	require.NoError(t, err)
	var blocks []gpualloc.Block
	for _, size := range []int64{4096, 512, 4096, 1024, 512} {
		b, err := p.Alloc(size)
		require.NoError(t, err)
		blocks = append(blocks, b)
	}
	for _, i := range []int{1, 2, 4, 0, 3} {
		require.NoError(t, p.Free(blocks[i]))
	}
	require.NoError(t, p.ReleaseAll())
	// Lists in the order they were first filled (512, 4096, 1024), each
	// oldest block first.
	want := []uint64{blocks[1].Addr, blocks[4].Addr, blocks[2].Addr, blocks[0].Addr, blocks[3].Addr}
	assert.Equal(t, want, dev.freed)

	// After a release, lists are ordered afresh: 1024 first this time.
	dev.freed = nil
	var again []uint64
	for _, size := range []int64{1024, 512} {
		b, err := p.Alloc(size)
		require.NoError(t, err)
		require.NoError(t, p.Free(b))
		again = append(again, b.Addr)
	}
	require.NoError(t, p.ReleaseAll())
	assert.Equal(t, again, dev.freed)
}
