package naive_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/naive"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

func TestConformance(t *testing.T) {
	for _, c := range []naive.Config{
		naive.DefaultConfig(),
		{Page: 32, LargeRound: 1, Reserve: 0},
		{Page: 1000, LargeRound: 3 * MiB, Reserve: 100},
		{Page: 512, LargeRound: 512, Reserve: 50},
	} {
		t.Run(fmt.Sprintf("page=%d,large_round=%d,reserve=%d", c.Page, c.LargeRound, c.Reserve), func(t *testing.T) {
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				return naive.New(b, c)
			}, &strategytest.Options{Caching: true, Align: strategytest.DeviceAlign})
		})
	}
}

func TestRoundSize(t *testing.T) {
	def := naive.DefaultConfig()
	tests := []struct {
		c          naive.Config
		size, want int64
	}{
		// The examples of MXNet's rounding.
		{def, 1, 4096},
		{def, 4096, 4096},
		{def, 4097, 8192},
		{def, 100000, 102400},
		{def, 2 * MiB, 2 * MiB},
		{def, 2*MiB + 1, 4 * MiB},
		{def, 5000000, 6291456},
		// Large sizes keep rounding to multiples of large_round.
		{def, 16*GiB + 1, 16*GiB + 2*MiB},
		{def, 80 * GiB, 80 * GiB},
		// Other configurations.
		{naive.Config{Page: 32, LargeRound: 1}, 1, 32},
		{naive.Config{Page: 32, LargeRound: 1}, 33, 64},
		{naive.Config{Page: 4096, LargeRound: 1}, 5000000, 5001216},
		{naive.Config{Page: 1000, LargeRound: 2 * MiB}, 1, 1000},
		{naive.Config{Page: 1000, LargeRound: 2 * MiB}, 2097000, 2097000},
		{naive.Config{Page: 1000, LargeRound: 2 * MiB}, 2097001, 4 * MiB},
		{naive.Config{Page: 4096, LargeRound: 3000}, 5000, 9000},
		// Out of range.
		{def, 0, 0},
		{def, -1, 0},
		{def, math.MaxInt64 - 4095, 0},
		{def, math.MaxInt64, 0},
		{naive.Config{Page: 32, LargeRound: 1}, math.MaxInt64 - 31, math.MaxInt64 - 31},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.c.RoundSize(tt.size), "%+v.RoundSize(%d)", tt.c, tt.size)
	}
}

func TestNewValidates(t *testing.T) {
	dev := strategytest.NewDevice(GiB)
	tests := []struct {
		c       naive.Config
		wantErr string
	}{
		{naive.DefaultConfig(), ""},
		{naive.Config{Page: 32, LargeRound: 1, Reserve: 0}, ""},
		{naive.Config{Page: 33, LargeRound: 7, Reserve: 100}, ""},
		{naive.Config{Page: 31, LargeRound: 2 * MiB, Reserve: 5}, "naive: page=31: must be at least 32"},
		{naive.Config{Page: 0, LargeRound: 2 * MiB, Reserve: 5}, "naive: page=0: must be at least 32"},
		{naive.Config{Page: 4096, LargeRound: 0, Reserve: 5}, "naive: large_round=0: must be positive"},
		{naive.Config{Page: 4096, LargeRound: -1, Reserve: 5}, "naive: large_round=-1: must be positive"},
		{naive.Config{Page: 4096, LargeRound: 1, Reserve: -1}, "naive: reserve=-1: must be a percentage from 0 to 100"},
		{naive.Config{Page: 4096, LargeRound: 1, Reserve: 101}, "naive: reserve=101: must be a percentage from 0 to 100"},
	}
	for _, tt := range tests {
		p, err := naive.New(dev, tt.c)
		if tt.wantErr == "" {
			require.NoError(t, err, "%+v", tt.c)
			assert.Equal(t, tt.c, p.Config())
			continue
		}
		assert.EqualError(t, err, tt.wantErr, "%+v", tt.c)
		assert.Nil(t, p)
	}
	_, err := naive.New(nil, naive.DefaultConfig())
	assert.EqualError(t, err, "naive: nil Backend")
}

func TestSpec(t *testing.T) {
	p, err := naive.New(strategytest.NewDevice(GiB), naive.Config{Page: 512, LargeRound: 1, Reserve: 0})
	require.NoError(t, err)
	assert.Equal(t, "naive:page=512,large_round=1,reserve=0", p.Spec())
}

func newPool(t *testing.T, capacity int64, c naive.Config) (*naive.Pool, *strategytest.Device) {
	t.Helper()
	dev := strategytest.NewDevice(capacity)
	p, err := naive.New(dev, c)
	require.NoError(t, err)
	return p, dev
}

func alloc(t *testing.T, p *naive.Pool, size int64) gpualloc.Block {
	t.Helper()
	b, err := p.Alloc(size)
	require.NoError(t, err, "Alloc(%d)", size)
	return b
}

func free(t *testing.T, p *naive.Pool, b gpualloc.Block) {
	t.Helper()
	require.NoError(t, p.Free(b), "Free(%+v)", b)
}

func TestExactSizeLIFO(t *testing.T) {
	p, dev := newPool(t, GiB, naive.DefaultConfig())
	a, b, c := alloc(t, p, 5000), alloc(t, p, 6000), alloc(t, p, 8192)
	free(t, p, a)
	free(t, p, b)
	free(t, p, c)

	// 4097 to 8192 bytes all round to 8192: the last freed comes back first.
	assert.Equal(t, c.Addr, alloc(t, p, 4097).Addr)
	assert.Equal(t, b.Addr, alloc(t, p, 8000).Addr)
	assert.Equal(t, a.Addr, alloc(t, p, 8192).Addr)
	assert.Equal(t, int64(3), p.Stats().CacheHits)
	assert.Equal(t, int64(3), dev.Stats().Mallocs)

	// A cached block serves only its exact rounded size.
	d := alloc(t, p, 12288)
	free(t, p, d)
	e := alloc(t, p, 4096)
	assert.NotEqual(t, d.Addr, e.Addr, "a 12 KiB block does not serve a 4 KiB request")
	assert.Equal(t, int64(5), dev.Stats().Mallocs)
}

func TestFreeCachesAndReleaseAllReturns(t *testing.T) {
	p, dev := newPool(t, GiB, naive.DefaultConfig())
	var blocks []gpualloc.Block
	for _, size := range []int64{1, 4096, 100000, 100000, 5000000} {
		blocks = append(blocks, alloc(t, p, size))
	}
	for _, b := range blocks {
		free(t, p, b)
	}
	held := int64(4096 + 4096 + 102400 + 102400 + 6291456)
	assert.Equal(t, held, dev.Stats().Used, "Free returns nothing to the device")
	assert.Equal(t, gpualloc.Stats{
		Reserved: held, PeakRequested: 1 + 4096 + 100000 + 100000 + 5000000,
		PeakAllocated: held, PeakReserved: held,
		Allocs: 5, Frees: 5, DeviceMallocs: 5, DeviceMallocBytes: held,
	}, p.Stats())

	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used)
	assert.Equal(t, int64(5), p.Stats().DeviceFrees)
	assert.Zero(t, p.Stats().Reserved)
	require.NoError(t, p.ReleaseAll(), "releasing an empty cache")
	assert.Equal(t, int64(5), p.Stats().DeviceFrees)

	// After a release, the pool allocates afresh.
	b := alloc(t, p, 100000)
	assert.Equal(t, int64(6), dev.Stats().Mallocs)
	free(t, p, b)
}

// The reserve rule: before a device allocation, if
// free <= total*reserve/100 or size > free - total*reserve/100,
// the whole cache is released.
func TestReserveRule(t *testing.T) {
	const (
		capacity = 3200000 // 5% is 160000
		reserve  = 160000
		cached   = 32000 // one cached block of this size
	)
	c := naive.Config{Page: 32, LargeRound: 1, Reserve: 5}
	tests := []struct {
		name        string
		free        int64 // device bytes free before the request, the cached block counted as used
		size        int64
		wantRelease bool
	}{
		{"plenty of room", 1000000, 64, false},
		{"leaves exactly the reserve", reserve + 6400, 6400, false},
		{"would eat into the reserve", reserve + 6400, 6432, true},
		{"free is the reserve", reserve, 32, true},
		{"free is below the reserve", reserve - 32, 32, true},
		{"free is just above the reserve", reserve + 32, 32, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, dev := newPool(t, capacity, c)
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
	p, dev := newPool(t, 1<<62, naive.Config{Page: 4096, LargeRound: 2 * MiB, Reserve: 100})
	free(t, p, alloc(t, p, 4096))
	b := alloc(t, p, 8192)
	assert.Equal(t, int64(1), p.Stats().DeviceFrees, "with reserve=100 every miss releases the cache")
	assert.Equal(t, int64(8192), dev.Stats().Used)
	free(t, p, b)
}

func TestRetry(t *testing.T) {
	p, dev := newPool(t, GiB, naive.DefaultConfig())
	cachedBlock := alloc(t, p, 100000)
	free(t, p, cachedBlock)

	// The device refuses once although MemInfo shows room: the pool
	// releases its cache and tries again.
	dev.FailMallocs(1)
	b := alloc(t, p, 5000)
	st := p.Stats()
	assert.Equal(t, int64(1), st.Retries)
	assert.Equal(t, int64(1), st.DeviceFrees, "the cache was released before the retry")
	assert.Zero(t, st.OOMs)
	assert.Equal(t, int64(8192), dev.Stats().Used)
	assert.Equal(t, int64(8192), b.Size)

	// Twice: the allocation fails, and the pool stays usable.
	dev.FailMallocs(2)
	_, err := p.Alloc(5000)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "naive: alloc of 5000 bytes (8192 rounded): strategytest: device malloc of 8192 bytes: injected failure: out of memory")
	st = p.Stats()
	assert.Equal(t, int64(2), st.Retries)
	assert.Equal(t, int64(1), st.OOMs)
	assert.Equal(t, int64(1), st.Allocs-st.Frees)

	c := alloc(t, p, 5000)
	free(t, p, b)
	free(t, p, c)
	assert.Equal(t, int64(3), p.Stats().Allocs)
}

func TestOutOfMemory(t *testing.T) {
	p, dev := newPool(t, 64*MiB, naive.DefaultConfig())
	for _, size := range []int64{64*MiB + 1, math.MaxInt64} {
		_, err := p.Alloc(size)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "Alloc(%d)", size)
	}
	_, err := p.Alloc(math.MaxInt64)
	assert.EqualError(t, err, "naive: alloc of 9223372036854775807 bytes: rounded size overflows: out of memory")

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
	_, err = p.Alloc(4096)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, int64(4), p.Stats().OOMs)
	free(t, p, b)
	assert.Equal(t, b.Addr, alloc(t, p, 16*MiB).Addr)
}

// failing is a backend whose Malloc fails with a given error.
type failing struct {
	*strategytest.Device
	err error
}

func (f failing) Malloc(int64) (uint64, error) { return 0, f.err }

func TestDeviceErrorIsNotRetried(t *testing.T) {
	boom := errors.New("device lost")
	p, err := naive.New(failing{strategytest.NewDevice(GiB), boom}, naive.DefaultConfig())
	require.NoError(t, err)
	_, err = p.Alloc(1)
	require.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Zero(t, p.Stats().Retries)
	assert.Zero(t, p.Stats().OOMs)
}

func TestInvalid(t *testing.T) {
	p, dev := newPool(t, GiB, naive.DefaultConfig())
	for _, size := range []int64{0, -1} {
		_, err := p.Alloc(size)
		require.ErrorIs(t, err, gpualloc.ErrInvalidSize)
	}
	_, err := p.Alloc(0)
	assert.EqualError(t, err, "naive: alloc of 0 bytes: invalid size")

	b := alloc(t, p, 100000)
	before := p.Stats()
	changed := b
	changed.Requested = 100001
	err = p.Free(changed)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, fmt.Sprintf("naive: free of %#x with Size 102400, Requested 100001: the live block there has Size 102400, Requested 100000: invalid free", b.Addr))
	free(t, p, b)
	err = p.Free(b)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, fmt.Sprintf("naive: free of %#x (102400 bytes): no live block there: invalid free", b.Addr))
	after := p.Stats()
	assert.Equal(t, before.Frees+1, after.Frees, "only the valid free counted")
	assert.Zero(t, dev.Stats().InvalidCalls)
}

func TestAllocFreeAllocatesNothing(t *testing.T) {
	p, _ := newPool(t, GiB, naive.DefaultConfig())
	sizes := []int64{1, 4097, 100000, 5000000}
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
}

func TestRegistry(t *testing.T) {
	s, err := gpualloc.Lookup("Naive")
	require.NoError(t, err)
	assert.Equal(t, "naive", s.Name)
	var names, defaults []string
	for _, p := range s.Params {
		names = append(names, p.Name)
		defaults = append(defaults, p.Default)
	}
	assert.Equal(t, []string{"page", "large_round", "reserve"}, names)
	assert.Equal(t, []string{"4096", "2097152", "5"}, defaults)
	assert.Equal(t, []string{"MXNET_GPU_MEM_POOL_PAGE_SIZE", "MXNET_GPU_POOL_PAGE_SIZE"}, s.Params[0].Env)
	assert.Equal(t, []string{"MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE"}, s.Params[1].Env)
	assert.Equal(t, []string{"MXNET_GPU_MEM_POOL_RESERVE"}, s.Params[2].Env)
}

// env returns a getenv that knows the given NAME=value pairs.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestSelectFromEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		getenv  func(string) (string, bool)
		want    naive.Config
		wantErr string
	}{
		{"default strategy", "", env(), naive.DefaultConfig(), ""},
		{"MXNet pool type", "", env("MXNET_GPU_MEM_POOL_TYPE", "Naive"), naive.DefaultConfig(), ""},
		{
			"MXNet variables", "",
			env("MXNET_GPU_MEM_POOL_TYPE", "Naive", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "8192",
				"MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE", "1", "MXNET_GPU_MEM_POOL_RESERVE", "0"),
			naive.Config{Page: 8192, LargeRound: 1, Reserve: 0}, "",
		},
		{
			"MXNet 2 page size", "",
			env("MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			naive.Config{Page: 1024, LargeRound: 2 * MiB, Reserve: 5}, "",
		},
		{
			"MXNet 1 page size wins", "",
			env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "2048", "MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			naive.Config{Page: 2048, LargeRound: 2 * MiB, Reserve: 5}, "",
		},
		{
			"spec wins over variables", "naive:page=8KiB,reserve=10",
			env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "16", "MXNET_GPU_MEM_POOL_RESERVE", "x"),
			naive.Config{Page: 8192, LargeRound: 2 * MiB, Reserve: 10}, "",
		},
		{
			"GPUALLOC_POOL_TYPE", "",
			env("GPUALLOC_POOL_TYPE", "naive:large_round=4MiB", "MXNET_GPU_MEM_POOL_TYPE", "Unknown"),
			naive.Config{Page: 4096, LargeRound: 4 * MiB, Reserve: 5}, "",
		},
		{
			"non-numeric page", "", env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "big"), naive.Config{},
			`MXNET_GPU_MEM_POOL_PAGE_SIZE="big": not a size: want bytes or a number with a unit such as MiB`,
		},
		{
			"page too small", "", env("MXNET_GPU_POOL_PAGE_SIZE", "16"), naive.Config{},
			`MXNET_GPU_POOL_PAGE_SIZE="16": must be at least 32`,
		},
		{
			"zero large round", "", env("MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE", "0"), naive.Config{},
			`MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE="0": must be positive`,
		},
		{
			"non-numeric reserve", "", env("MXNET_GPU_MEM_POOL_RESERVE", "5%"), naive.Config{},
			`MXNET_GPU_MEM_POOL_RESERVE="5%": not an integer`,
		},
		{
			"reserve too large", "", env("MXNET_GPU_MEM_POOL_RESERVE", "200"), naive.Config{},
			`MXNET_GPU_MEM_POOL_RESERVE="200": must be a percentage from 0 to 100`,
		},
		{
			"bad spec value", "naive:page=16", env(), naive.Config{},
			`naive: page=16: must be at least 32`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := gpualloc.Select(tt.spec, tt.getenv)
			require.NoError(t, err)
			a, err := sel.Params.Open(strategytest.NewDevice(GiB))
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			p, ok := a.(*naive.Pool)
			require.True(t, ok, "%T", a)
			assert.Equal(t, tt.want, p.Config())
			assert.Equal(t, fmt.Sprintf("naive:page=%d,large_round=%d,reserve=%d", tt.want.Page, tt.want.LargeRound, tt.want.Reserve), p.Spec())
		})
	}
}

// BenchmarkAllocFree measures the cache-hit path: an Alloc served from a
// free list and the Free that puts the block back.
func BenchmarkAllocFree(b *testing.B) {
	p, err := naive.New(strategytest.NewDevice(GiB), naive.DefaultConfig())
	require.NoError(b, err)
	sizes := []int64{1, 4097, 100000, 5000000}
	for _, s := range sizes {
		blk, err := p.Alloc(s)
		require.NoError(b, err)
		require.NoError(b, p.Free(blk))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		blk, err := p.Alloc(sizes[i&3])
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Free(blk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes live and replaces
// the oldest one each iteration, so free lists of many sizes are in use.
func BenchmarkWorkingSet(b *testing.B) {
	p, err := naive.New(strategytest.NewDevice(64*GiB), naive.DefaultConfig())
	require.NoError(b, err)
	sizes := make([]int64, 1024)
	for i := range sizes {
		sizes[i] = int64(1+i*i*37%(8*MiB)) + int64(i%7)*4096
	}
	ring := make([]gpualloc.Block, 256)
	for i := range ring {
		ring[i], err = p.Alloc(sizes[i])
		require.NoError(b, err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		slot := i & 255
		if err := p.Free(ring[slot]); err != nil {
			b.Fatal(err)
		}
		if ring[slot], err = p.Alloc(sizes[i&1023]); err != nil {
			b.Fatal(err)
		}
	}
}

// refusing is a backend whose Free fails.
type refusing struct{ *strategytest.Device }

func (refusing) Free(uint64, int64) error { return errors.New("device busy") }

func TestReleaseAllDeviceError(t *testing.T) {
	p, err := naive.New(refusing{strategytest.NewDevice(GiB)}, naive.DefaultConfig())
	require.NoError(t, err)
	free(t, p, alloc(t, p, 4096))
	free(t, p, alloc(t, p, 100000))
	err = p.ReleaseAll()
	assert.EqualError(t, err, "naive: release: device busy\ndevice busy")
	assert.Zero(t, p.Stats().DeviceFrees)
	assert.NoError(t, p.ReleaseAll(), "the blocks the device refused left the cache")
}
