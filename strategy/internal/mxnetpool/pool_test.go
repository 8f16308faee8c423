package mxnetpool_test

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool/pooltest"
	"github.com/gpualloc/gpualloc/strategy/internal/param"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	MiB = 1 << 20
	GiB = 1 << 30
)

var (
	alloc = pooltest.Alloc
	free  = pooltest.Free
)

// roundTo512 rounds up to a multiple of 512, or to 0 past 2^40 bytes.
func roundTo512(size int64) int64 {
	if size > 1<<40 {
		return 0
	}
	return (size + 511) &^ 511
}

// roundPow2 rounds up to a power of two of at least 512, or to 0 past 2^40
// bytes.
func roundPow2(size int64) int64 {
	if size > 1<<40 {
		return 0
	}
	return max(int64(1)<<bits.Len64(uint64(size-1)), 512)
}

// rounders are rounding functions of the two kinds the strategies use:
// naive's to a multiple of a page, round's to a power of two.
var rounders = []struct {
	name  string
	round func(int64) int64
}{
	{"multiple", roundTo512},
	{"power of two", roundPow2},
}

func options(reserve int) mxnetpool.Options {
	return mxnetpool.Options{Name: "test", Spec: "test:unit=512", Reserve: reserve, Round: roundTo512}
}

// forEachRound runs f as a subtest for each of the rounders, with options
// that round with it.
func forEachRound(t *testing.T, reserve int, f func(t *testing.T, o mxnetpool.Options)) {
	for _, r := range rounders {
		t.Run(r.name, func(t *testing.T) {
			o := options(reserve)
			o.Round = r.round
			f(t, o)
		})
	}
}

func TestConformance(t *testing.T) {
	for _, reserve := range []int{0, 5, 100} {
		forEachRound(t, reserve, func(t *testing.T, o mxnetpool.Options) {
			t.Run(fmt.Sprintf("reserve=%d", reserve), func(t *testing.T) {
				strategytest.Run(t, alloctest.Open(mxnetpool.New, o), &strategytest.Options{Caching: true, Align: virtual.Alignment})
			})
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

func TestRegister(t *testing.T) {
	unit := gpualloc.Param{Name: "unit", Default: "512", Doc: "blocks are multiples of this many bytes"}
	mxnetpool.Register("mxnetpooltest", "a pool of the tests", "what a page is", unit,
		func(r *param.Reader) mxnetpool.Options {
			o := mxnetpool.Options{Name: "mxnetpooltest", Round: roundTo512}
			o.Spec = fmt.Sprintf("mxnetpooltest:page=%d,unit=%d", r.Size("page"), r.Size("unit"))
			o.Reserve = mxnetpool.Reserve(r)
			return o
		}, mxnetpool.New)

	s, err := gpualloc.Lookup("mxnetpooltest")
	require.NoError(t, err)
	assert.Equal(t, "a pool of the tests", s.Summary)
	pooltest.Params(t, s)
	require.Len(t, s.Params, 3)
	assert.Equal(t, []string{"page", "unit", "reserve"}, []string{s.Params[0].Name, s.Params[1].Name, s.Params[2].Name})
	assert.Equal(t, "what a page is", s.Params[0].Doc)
	assert.Equal(t, unit, s.Params[1])

	open := func(spec string) (gpualloc.Allocator, error) {
		sp, err := gpualloc.ParseSpec(spec)
		require.NoError(t, err)
		p, err := gpualloc.Resolve(sp, nil)
		require.NoError(t, err)
		return p.Open(strategytest.NewDevice(1 << 30))
	}
	a, err := open("mxnetpooltest:unit=1KiB")
	require.NoError(t, err)
	assert.Equal(t, "mxnetpooltest:page=4096,unit=1024", a.(gpualloc.Specer).Spec())
	_, err = open("mxnetpooltest:unit=big")
	assert.ErrorContains(t, err, "unit=big: not a size")
	_, err = open("mxnetpooltest:reserve=101")
	assert.ErrorContains(t, err, "reserve=101: must be a percentage from 0 to 100")
}

func TestFreeListLIFO(t *testing.T) {
	forEachRound(t, 5, func(t *testing.T, o mxnetpool.Options) {
		p, dev := alloctest.New(t, GiB, mxnetpool.New, o)
		size := o.Round(100000)
		a, b, c := alloc(t, p, size-1), alloc(t, p, size-100), alloc(t, p, size)
		free(t, p, a)
		free(t, p, b)
		free(t, p, c)

		// Requests of one rounded size share a free list: the last freed
		// comes back first.
		assert.Equal(t, c.Addr, alloc(t, p, size-100).Addr)
		assert.Equal(t, b.Addr, alloc(t, p, size).Addr)
		assert.Equal(t, a.Addr, alloc(t, p, size-1).Addr)
		assert.Equal(t, int64(3), p.Stats().CacheHits)
		assert.Equal(t, int64(3), dev.Stats().Mallocs)

		// A cached block serves only its exact rounded size.
		d := alloc(t, p, 4*size)
		free(t, p, d)
		e := alloc(t, p, 1)
		assert.NotEqual(t, d.Addr, e.Addr, "a large block does not serve a small request")
		assert.Equal(t, int64(5), dev.Stats().Mallocs)
	})
}

func TestFreeCachesAndReleaseAllReturns(t *testing.T) {
	forEachRound(t, 5, func(t *testing.T, o mxnetpool.Options) {
		p, dev := alloctest.New(t, GiB, mxnetpool.New, o)
		var blocks []gpualloc.Block
		var requested, held int64
		for _, size := range []int64{1, 4096, 100000, 100000, 5000000} {
			blocks = append(blocks, alloc(t, p, size))
			requested += size
			held += o.Round(size)
		}
		largest, total := p.FreeSpace()
		assert.Zero(t, largest, "nothing cached yet")
		assert.Zero(t, total)
		for _, b := range blocks {
			free(t, p, b)
		}
		assert.Equal(t, held, dev.Stats().Used, "Free returns nothing to the device")
		largest, total = p.FreeSpace()
		assert.Equal(t, o.Round(5000000), largest, "the largest cached block")
		assert.Equal(t, held, total, "every cached byte is free space")
		b := alloc(t, p, 5000000) // a hit takes the block out of the free space
		largest, total = p.FreeSpace()
		assert.Equal(t, o.Round(100000), largest)
		assert.Equal(t, held-o.Round(5000000), total)
		free(t, p, b)
		assert.Equal(t, gpualloc.Stats{
			Reserved: held, PeakRequested: requested, PeakAllocated: held, PeakReserved: held,
			Allocs: 6, Frees: 6, DeviceMallocs: 5, DeviceMallocBytes: held, CacheHits: 1,
		}, p.Stats())

		require.NoError(t, p.ReleaseAll())
		assert.Zero(t, dev.Stats().Used)
		largest, total = p.FreeSpace()
		assert.Zero(t, largest, "released")
		assert.Zero(t, total)
		assert.Equal(t, int64(5), p.Stats().DeviceFrees)
		assert.Zero(t, p.Stats().Reserved)
		require.NoError(t, p.ReleaseAll(), "releasing an empty cache")
		assert.Equal(t, int64(5), p.Stats().DeviceFrees)

		// After a release, the pool allocates afresh.
		free(t, p, alloc(t, p, 100000))
		assert.Equal(t, int64(6), dev.Stats().Mallocs)
	})
}

// The reserve rule: before a device allocation, if
// free <= total*reserve/100 or size > free - total*reserve/100,
// the whole cache is released.
func TestReserveRule(t *testing.T) {
	const (
		capacity = 100 * MiB // 5% is 5242880 bytes
		reserve  = 5242880
		cached   = 1 * MiB // one cached block of this size
	)
	tests := []struct {
		name        string
		free        int64 // device bytes free before the request, the cached block counted as used
		size        int64
		wantRelease bool
	}{
		{"plenty of room", 50 * MiB, 4096, false},
		{"leaves exactly the reserve", reserve + 2*MiB, 2 * MiB, false},
		{"would eat into the reserve", reserve + 2*MiB, 2*MiB + 512, true},
		{"free is the reserve", reserve, 512, true},
		{"free is below the reserve", reserve - 512, 512, true},
		{"free is just above the reserve", reserve + 512, 512, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, dev := alloctest.New(t, capacity, mxnetpool.New, options(5))
			alloc(t, p, capacity-cached-tt.free) // live filler
			free(t, p, alloc(t, p, cached))
			f, _ := dev.MemInfo()
			require.Equal(t, tt.free, f)

			alloc(t, p, tt.size)
			st := p.Stats()
			if tt.wantRelease {
				assert.Equal(t, int64(1), st.DeviceFrees, "the cache was released")
			} else {
				assert.Zero(t, st.DeviceFrees, "the cache was kept")
			}
			assert.Zero(t, st.Retries, "the device never refused")
			assert.Zero(t, dev.Stats().FailedMallocs)
			assert.Equal(t, dev.Stats().Used, st.Reserved)
		})
	}
}

func TestReserveRuleLargeDevice(t *testing.T) {
	// total*reserve must not overflow, even for a device of 2^62 bytes.
	p, dev := alloctest.New(t, 1<<62, mxnetpool.New, options(100))
	free(t, p, alloc(t, p, 4096))
	b := alloc(t, p, 8192)
	assert.Equal(t, int64(1), p.Stats().DeviceFrees, "with reserve=100 every miss releases the cache")
	assert.Equal(t, int64(8192), dev.Stats().Used)
	free(t, p, b)
}

func TestRetry(t *testing.T) {
	forEachRound(t, 5, func(t *testing.T, o mxnetpool.Options) {
		p, dev := alloctest.New(t, GiB, mxnetpool.New, o)
		err := pooltest.Retry(t, p, dev, 100000, 5000)
		r := o.Round(5000)
		assert.EqualError(t, err, fmt.Sprintf("test: alloc of 5000 bytes (%d rounded): virtual: device 0: malloc of %d bytes: injected failure: out of memory", r, r))
	})
}

func TestOutOfMemory(t *testing.T) {
	p, dev := alloctest.New(t, 64*MiB, mxnetpool.New, options(5))
	_, err := p.Alloc(64*MiB + 1)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)

	// A full device with a cache: the cache goes back, the request fits.
	var blocks []gpualloc.Block
	for range 8 {
		blocks = append(blocks, alloc(t, p, 8*MiB))
	}
	free(t, p, blocks[0])
	free(t, p, blocks[1])
	b := alloc(t, p, 16*MiB)
	assert.Equal(t, int64(2), p.Stats().DeviceFrees)
	assert.Equal(t, int64(64*MiB), dev.Stats().Used)
	_, err = p.Alloc(1)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, int64(2), p.Stats().OOMs)
	free(t, p, b)
	assert.Equal(t, b.Addr, alloc(t, p, 16*MiB).Addr)
}

func TestRoundedSizeOverflows(t *testing.T) {
	p, err := mxnetpool.New(strategytest.NewDevice(1<<30), options(5))
	require.NoError(t, err)
	_, err = p.Alloc(math.MaxInt64)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "test: alloc of 9223372036854775807 bytes: rounded size overflows: out of memory")
	assert.Equal(t, int64(1), p.Stats().OOMs)
}

// failing is a backend whose Malloc fails with a given error.
type failing struct {
	*virtual.Device
	err error
}

func (f failing) Malloc(int64) (uint64, error) { return 0, f.err }

func TestDeviceErrorIsNotRetried(t *testing.T) {
	boom := errors.New("device lost")
	p, err := mxnetpool.New(failing{strategytest.NewDevice(GiB), boom}, options(5))
	require.NoError(t, err)
	_, err = p.Alloc(1)
	require.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Zero(t, p.Stats().Retries)
	assert.Zero(t, p.Stats().OOMs)
}

func TestInvalid(t *testing.T) {
	p, dev := alloctest.New(t, GiB, mxnetpool.New, options(5))
	for _, size := range []int64{0, -1} {
		_, err := p.Alloc(size)
		require.ErrorIs(t, err, gpualloc.ErrInvalidSize)
	}
	_, err := p.Alloc(0)
	assert.EqualError(t, err, "test: alloc of 0 bytes: invalid size")

	b := alloc(t, p, 100000) // 100352 bytes
	before := p.Stats()
	for _, changed := range []gpualloc.Block{
		{Addr: b.Addr, Size: b.Size, Requested: 100001, Handle: b.Handle},
		{Addr: b.Addr, Size: 65536, Requested: b.Requested, Handle: b.Handle},
	} {
		err = p.Free(changed)
		require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
		assert.EqualError(t, err, fmt.Sprintf("test: free of %#x with Size %d, Requested %d: the live block there has Size 100352, Requested 100000: invalid free",
			b.Addr, changed.Size, changed.Requested))
	}
	assert.Equal(t, before, p.Stats(), "an invalid free changes nothing")
	free(t, p, b)
	err = p.Free(b)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, fmt.Sprintf("test: free of %#x (100352 bytes): no live block there: invalid free", b.Addr))
	assert.Equal(t, before.Frees+1, p.Stats().Frees, "only the valid free counted")
	assert.Zero(t, dev.Stats().InvalidCalls)
}

func TestAllocFreeAllocatesNothing(t *testing.T) {
	forEachRound(t, 5, func(t *testing.T, o mxnetpool.Options) {
		p, _ := alloctest.New(t, GiB, mxnetpool.New, o)
		sizes := []int64{1, 4097, 100000, 5000000, 40 * MiB}
		var live []gpualloc.Block
		for range 4 {
			for _, s := range sizes {
				live = append(live, alloc(t, p, s))
			}
		}
		for _, b := range live {
			free(t, p, b)
		}
		i := 0
		n := testing.AllocsPerRun(1000, func() {
			b, _ := p.Alloc(sizes[i%len(sizes)])
			_ = p.Free(b)
			i++
		})
		assert.Zero(t, n, "allocations per Alloc+Free in steady state")
	})
}

// recording is a device that records the regions freed, in order.
type recording struct {
	*virtual.Device
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
		blocks = append(blocks, alloc(t, p, size))
	}
	for _, i := range []int{1, 2, 4, 0, 3} {
		free(t, p, blocks[i])
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
		b := alloc(t, p, size)
		free(t, p, b)
		again = append(again, b.Addr)
	}
	require.NoError(t, p.ReleaseAll())
	assert.Equal(t, again, dev.freed)
}

// refusing is a backend whose Free fails.
type refusing struct{ *virtual.Device }

func (refusing) Free(uint64, int64) error { return errors.New("device busy") }

func TestReleaseDeviceError(t *testing.T) {
	p, err := mxnetpool.New(refusing{strategytest.NewDevice(GiB)}, options(5))
	require.NoError(t, err)
	free(t, p, alloc(t, p, 4096))
	free(t, p, alloc(t, p, 100000))
	err = p.ReleaseAll()
	assert.EqualError(t, err, "test: release: device busy\ndevice busy")
	assert.Zero(t, p.Stats().DeviceFrees)
	assert.NoError(t, p.ReleaseAll(), "the blocks the device refused left the cache")

	// A release the reserve rule or a retry calls for fails the allocation.
	for _, reserve := range []int{100, 0} {
		dev := refusing{strategytest.NewDevice(GiB)}
		p, err := mxnetpool.New(dev, options(reserve))
		require.NoError(t, err)
		free(t, p, alloc(t, p, 512))
		dev.FailMallocs(1) // with reserve=100, the release comes first
		_, err = p.Alloc(1024)
		assert.EqualError(t, err, "test: alloc of 1024 bytes (1024 rounded): device busy", "reserve=%d", reserve)
		assert.Zero(t, p.Stats().OOMs)
	}
}
