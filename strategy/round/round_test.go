package round_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/round"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
	TiB = 1 << 40
)

func TestConformance(t *testing.T) {
	for _, c := range []round.Config{
		round.DefaultConfig(),
		{Page: 32, Cutoff: 20, Reserve: 0},
		{Page: 512, Cutoff: 22, Reserve: 100},
		{Page: 1 << 20, Cutoff: 34, Reserve: 50},
	} {
		t.Run(fmt.Sprintf("page=%d,cutoff=%d,reserve=%d", c.Page, c.Cutoff, c.Reserve), func(t *testing.T) {
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				return round.New(b, c)
			}, &strategytest.Options{Caching: true, Align: strategytest.DeviceAlign})
		})
	}
	// Requests beyond MXNet's last bucket (16 GiB), on a large device.
	t.Run("beyond 16GiB", func(t *testing.T) {
		strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
			return round.New(b, round.Config{Page: 4096, Cutoff: 20, Reserve: 5})
		}, &strategytest.Options{Caching: true, Align: strategytest.DeviceAlign, Capacity: 4 * TiB, MaxSize: 64 * GiB, Ops: 1000})
	})
}

func TestRoundSize(t *testing.T) {
	def := round.DefaultConfig()
	c20 := round.Config{Page: 4096, Cutoff: 20}
	c34 := round.Config{Page: 4096, Cutoff: 34}
	tests := []struct {
		c          round.Config
		size, want int64
		bucket     int
	}{
		// The examples of MXNet's rounding, at cutoff 24.
		{def, 1, 4 * KiB, 12},
		{def, 2, 4 * KiB, 12},
		{def, 4095, 4 * KiB, 12},
		{def, 4096, 4 * KiB, 12},
		{def, 4097, 8 * KiB, 13},
		{def, 100000, 128 * KiB, 17},
		{def, 5000000, 8 * MiB, 23},
		{def, 16 * MiB, 16 * MiB, 24},
		{def, 16*MiB + 1, 32 * MiB, 25},
		{def, 40 * MiB, 48 * MiB, 26},
		{def, 48*MiB + 1, 64 * MiB, 27},
		// MXNet's last bucket is 16 GiB; beyond, rounding stays linear.
		{def, 16 * GiB, 16 * GiB, 1024 - 1 + 24},
		{def, 16*GiB + 1, 16*GiB + 16*MiB, 1024 + 24},
		{def, 100*GiB + 1, 100*GiB + 16*MiB, 6400 + 24},
		// The cutoff's bounds.
		{c20, 1 * MiB, 1 * MiB, 20},
		{c20, 1*MiB + 1, 2 * MiB, 21},
		{c20, 40*MiB + 1, 41 * MiB, 60},
		{c20, 16*GiB + 1, 16*GiB + 1*MiB, 16384 + 20},
		{c34, 16 * GiB, 16 * GiB, 34},
		{c34, 16*GiB + 1, 32 * GiB, 35},
		{c34, 40 * GiB, 48 * GiB, 36},
		{c34, 5000000, 8 * MiB, 23},
		// Other pages.
		{round.Config{Page: 32, Cutoff: 24}, 1, 32, 5},
		{round.Config{Page: 32, Cutoff: 24}, 33, 64, 6},
		{round.Config{Page: 1 << 20, Cutoff: 20}, 1, 1 * MiB, 20},
		{round.Config{Page: 1 << 20, Cutoff: 20}, 1*MiB + 1, 2 * MiB, 21},
		// Sizes out of range.
		{def, 0, 4 * KiB, 12},
		{def, math.MaxInt64 - 16*MiB + 1, math.MaxInt64 - 16*MiB + 1, 1<<39 - 1 - 1 + 24},
		{def, math.MaxInt64 - 16*MiB + 2, 0, 1<<39 - 1 + 24},
		{def, math.MaxInt64, 0, 1<<39 - 1 + 24},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.c.RoundSize(tt.size), "%+v.RoundSize(%d)", tt.c, tt.size)
		assert.Equal(t, tt.bucket, tt.c.Bucket(tt.size), "%+v.Bucket(%d)", tt.c, tt.size)
		if tt.want != 0 {
			assert.Equal(t, tt.want, tt.c.BucketSize(tt.bucket), "%+v.BucketSize(%d)", tt.c, tt.bucket)
		}
	}
	assert.Zero(t, def.BucketSize(-1))
}

// Every size rounds to the smallest bucket size that holds it, and a
// bucket's size falls in that bucket.
func TestBucketsAreTight(t *testing.T) {
	for _, c := range []round.Config{round.DefaultConfig(), {Page: 32, Cutoff: 20}, {Page: 4096, Cutoff: 34}} {
		for b := c.Bucket(1); b < c.Bucket(1)+2000; b++ {
			size := c.BucketSize(b)
			require.Equal(t, b, c.Bucket(size), "%+v: Bucket(BucketSize(%d) = %d)", c, b, size)
			require.Equal(t, b+1, c.Bucket(size+1), "%+v: Bucket(%d)", c, size+1)
		}
	}
}

func TestNewValidates(t *testing.T) {
	dev := strategytest.NewDevice(GiB)
	tests := []struct {
		c       round.Config
		wantErr string
	}{
		{round.DefaultConfig(), ""},
		{round.Config{Page: 32, Cutoff: 20}, ""},
		{round.Config{Page: 1 << 34, Cutoff: 34, Reserve: 100}, ""},
		{round.Config{Page: 1 << 20, Cutoff: 20}, ""},
		{round.Config{Page: 31, Cutoff: 24, Reserve: 5}, "round: page=31: must be at least 32"},
		{round.Config{Page: 16, Cutoff: 24, Reserve: 5}, "round: page=16: must be at least 32"},
		{round.Config{Page: 3000, Cutoff: 24, Reserve: 5}, "round: page=3000: must be a power of two"},
		{round.Config{Page: 4096, Cutoff: 19, Reserve: 5}, "round: cutoff=19: must be from 20 to 34"},
		{round.Config{Page: 4096, Cutoff: 35, Reserve: 5}, "round: cutoff=35: must be from 20 to 34"},
		{round.Config{Page: 1 << 21, Cutoff: 20, Reserve: 5}, "round: cutoff=20: must be at least log2(page) = 21"},
		{round.Config{Page: 4096, Cutoff: 24, Reserve: -1}, "round: reserve=-1: must be a percentage from 0 to 100"},
		{round.Config{Page: 4096, Cutoff: 24, Reserve: 101}, "round: reserve=101: must be a percentage from 0 to 100"},
	}
	for _, tt := range tests {
		p, err := round.New(dev, tt.c)
		if tt.wantErr == "" {
			require.NoError(t, err, "%+v", tt.c)
			assert.Equal(t, tt.c, p.Config())
			continue
		}
		assert.EqualError(t, err, tt.wantErr, "%+v", tt.c)
		assert.Nil(t, p)
	}
	_, err := round.New(nil, round.DefaultConfig())
	assert.EqualError(t, err, "round: nil Backend")
}

func TestSpec(t *testing.T) {
	p, err := round.New(strategytest.NewDevice(GiB), round.Config{Page: 512, Cutoff: 20, Reserve: 0})
	require.NoError(t, err)
	assert.Equal(t, "round:page=512,cutoff=20,reserve=0", p.Spec())
}

func newPool(t *testing.T, capacity int64, c round.Config) (*round.Pool, *strategytest.Device) {
	t.Helper()
	dev := strategytest.NewDevice(capacity)
	p, err := round.New(dev, c)
	require.NoError(t, err)
	return p, dev
}

func alloc(t *testing.T, p *round.Pool, size int64) gpualloc.Block {
	t.Helper()
	b, err := p.Alloc(size)
	require.NoError(t, err, "Alloc(%d)", size)
	return b
}

func free(t *testing.T, p *round.Pool, b gpualloc.Block) {
	t.Helper()
	require.NoError(t, p.Free(b), "Free(%+v)", b)
}

func TestBucketLIFO(t *testing.T) {
	p, dev := newPool(t, GiB, round.DefaultConfig())
	a, b, c := alloc(t, p, 70000), alloc(t, p, 100000), alloc(t, p, 131072)
	free(t, p, a)
	free(t, p, b)
	free(t, p, c)

	// 65537 to 131072 bytes share a bucket: the last freed comes back first.
	assert.Equal(t, c.Addr, alloc(t, p, 65537).Addr)
	assert.Equal(t, b.Addr, alloc(t, p, 80000).Addr)
	assert.Equal(t, a.Addr, alloc(t, p, 131072).Addr)
	assert.Equal(t, int64(3), p.Stats().CacheHits)
	assert.Equal(t, int64(3), dev.Stats().Mallocs)

	// A cached block serves only its own bucket.
	d := alloc(t, p, 300000)
	free(t, p, d)
	e := alloc(t, p, 4096)
	assert.NotEqual(t, d.Addr, e.Addr, "a 512 KiB block does not serve a 4 KiB request")
	assert.Equal(t, int64(5), dev.Stats().Mallocs)
}

func TestBeyondLastBucket(t *testing.T) {
	p, dev := newPool(t, TiB, round.DefaultConfig())
	a := alloc(t, p, 20*GiB)
	assert.Equal(t, int64(20*GiB), a.Size)
	free(t, p, a)
	b := alloc(t, p, 20*GiB-16*MiB+1)
	assert.Equal(t, a.Addr, b.Addr, "served from the cache beyond MXNet's bucket array")
	free(t, p, b)
	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used)
	assert.Equal(t, int64(1), p.Stats().DeviceFrees)
}

func TestFreeCachesAndReleaseAllReturns(t *testing.T) {
	p, dev := newPool(t, GiB, round.DefaultConfig())
	var blocks []gpualloc.Block
	for _, size := range []int64{1, 4096, 100000, 100000, 5000000, 40 * MiB} {
		blocks = append(blocks, alloc(t, p, size))
	}
	for _, b := range blocks {
		free(t, p, b)
	}
	held := int64(4096 + 4096 + 131072 + 131072 + 8*MiB + 48*MiB)
	assert.Equal(t, held, dev.Stats().Used, "Free returns nothing to the device")
	assert.Equal(t, gpualloc.Stats{
		Reserved: held, PeakRequested: 1 + 4096 + 100000 + 100000 + 5000000 + 40*MiB,
		PeakAllocated: held, PeakReserved: held,
		Allocs: 6, Frees: 6, DeviceMallocs: 6, DeviceMallocBytes: held,
	}, p.Stats())

	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used)
	assert.Equal(t, int64(6), p.Stats().DeviceFrees)
	require.NoError(t, p.ReleaseAll(), "releasing an empty cache")
	assert.Equal(t, int64(6), p.Stats().DeviceFrees)
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
		{"would eat into the reserve", reserve + 2*MiB - 4096, 2 * MiB, true},
		{"free is the reserve", reserve, 4096, true},
		{"free is below the reserve", reserve - 4096, 4096, true},
		{"free is just above the reserve", reserve + 4096, 4096, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, dev := newPool(t, capacity, round.Config{Page: 4096, Cutoff: 34, Reserve: 5})
			// Live fillers, each a power of two, leave tt.free bytes.
			rest := capacity - cached - tt.free
			for bit := int64(1) << 40; bit >= 4096; bit >>= 1 {
				if rest&bit != 0 {
					alloc(t, p, bit)
				}
			}
			require.Zero(t, rest%4096)
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
		})
	}
}

func TestRetry(t *testing.T) {
	p, dev := newPool(t, GiB, round.DefaultConfig())
	free(t, p, alloc(t, p, 100000))

	// The device refuses once although MemInfo shows room: the pool
	// releases its cache and tries again.
	dev.FailMallocs(1)
	b := alloc(t, p, 5000)
	st := p.Stats()
	assert.Equal(t, int64(1), st.Retries)
	assert.Equal(t, int64(1), st.DeviceFrees, "the cache was released before the retry")
	assert.Zero(t, st.OOMs)
	assert.Equal(t, int64(8192), dev.Stats().Used)

	// Twice: the allocation fails, and the pool stays usable.
	dev.FailMallocs(2)
	_, err := p.Alloc(5000)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "round: alloc of 5000 bytes (8192 rounded): strategytest: device malloc of 8192 bytes: injected failure: out of memory")
	st = p.Stats()
	assert.Equal(t, int64(2), st.Retries)
	assert.Equal(t, int64(1), st.OOMs)

	c := alloc(t, p, 5000)
	free(t, p, b)
	free(t, p, c)
}

func TestOutOfMemory(t *testing.T) {
	p, dev := newPool(t, 64*MiB, round.DefaultConfig())
	for _, size := range []int64{64*MiB + 1, math.MaxInt64} {
		_, err := p.Alloc(size)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "Alloc(%d)", size)
	}
	_, err := p.Alloc(math.MaxInt64)
	assert.EqualError(t, err, "round: alloc of 9223372036854775807 bytes: rounded size overflows: out of memory")

	// A full device with a cache: the cache goes back, the request fits.
	var blocks []gpualloc.Block
	for range 8 {
		blocks = append(blocks, alloc(t, p, 8*MiB))
	}
	free(t, p, blocks[0])
	free(t, p, blocks[1])
	b := alloc(t, p, 9*MiB) // 16 MiB
	assert.Equal(t, int64(16*MiB), b.Size)
	assert.Equal(t, int64(2), p.Stats().DeviceFrees)
	assert.Equal(t, int64(64*MiB), dev.Stats().Used)
	_, err = p.Alloc(1)
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
	p, err := round.New(failing{strategytest.NewDevice(GiB), boom}, round.DefaultConfig())
	require.NoError(t, err)
	_, err = p.Alloc(1)
	require.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Zero(t, p.Stats().Retries)
	assert.Zero(t, p.Stats().OOMs)
}

func TestInvalid(t *testing.T) {
	p, _ := newPool(t, GiB, round.DefaultConfig())
	_, err := p.Alloc(0)
	require.ErrorIs(t, err, gpualloc.ErrInvalidSize)
	assert.EqualError(t, err, "round: alloc of 0 bytes: invalid size")

	b := alloc(t, p, 100000)
	changed := b
	changed.Size = 65536
	err = p.Free(changed)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, fmt.Sprintf("round: free of %#x with Size 65536, Requested 100000: the live block there has Size 131072, Requested 100000: invalid free", b.Addr))
	free(t, p, b)
	err = p.Free(b)
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, fmt.Sprintf("round: free of %#x (131072 bytes): no live block there: invalid free", b.Addr))
	assert.Equal(t, int64(1), p.Stats().Frees)
}

func TestAllocFreeAllocatesNothing(t *testing.T) {
	p, _ := newPool(t, GiB, round.DefaultConfig())
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
}

func TestRegistry(t *testing.T) {
	s, err := gpualloc.Lookup("ROUND")
	require.NoError(t, err)
	assert.Equal(t, "round", s.Name)
	var names, defaults []string
	for _, p := range s.Params {
		names = append(names, p.Name)
		defaults = append(defaults, p.Default)
	}
	assert.Equal(t, []string{"page", "cutoff", "reserve"}, names)
	assert.Equal(t, []string{"4096", "24", "5"}, defaults)
	assert.Equal(t, []string{"MXNET_GPU_MEM_POOL_PAGE_SIZE", "MXNET_GPU_POOL_PAGE_SIZE"}, s.Params[0].Env)
	assert.Equal(t, []string{"MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF"}, s.Params[1].Env)
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
	const typ = "MXNET_GPU_MEM_POOL_TYPE"
	tests := []struct {
		name    string
		spec    string
		getenv  func(string) (string, bool)
		want    round.Config
		wantErr string
	}{
		{"MXNet pool type", "", env(typ, "Round"), round.DefaultConfig(), ""},
		{
			"MXNet cutoff", "", env(typ, "Round", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "20"),
			round.Config{Page: 4096, Cutoff: 20, Reserve: 5}, "",
		},
		{
			"MXNet variables", "",
			env(typ, "round", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "65536",
				"MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "30", "MXNET_GPU_MEM_POOL_RESERVE", "0"),
			round.Config{Page: 65536, Cutoff: 30, Reserve: 0}, "",
		},
		{
			"MXNet 2 page size", "", env(typ, "Round", "MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			round.Config{Page: 1024, Cutoff: 24, Reserve: 5}, "",
		},
		{
			"MXNet 1 page size wins", "",
			env(typ, "Round", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "2048", "MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			round.Config{Page: 2048, Cutoff: 24, Reserve: 5}, "",
		},
		{
			"spec wins over variables", "round:cutoff=22,page=1MiB",
			env(typ, "Naive", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "x"),
			round.Config{Page: 1 << 20, Cutoff: 22, Reserve: 5}, "",
		},
		{
			"GPUALLOC_POOL_TYPE", "", env("GPUALLOC_POOL_TYPE", "round:cutoff=21", typ, "Naive"),
			round.Config{Page: 4096, Cutoff: 21, Reserve: 5}, "",
		},
		{
			"non-numeric page", "", env(typ, "Round", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "four"), round.Config{},
			`MXNET_GPU_MEM_POOL_PAGE_SIZE="four": not a size: want bytes or a number with a unit such as MiB`,
		},
		{
			"page not a power of two", "", env(typ, "Round", "MXNET_GPU_POOL_PAGE_SIZE", "3000"), round.Config{},
			`MXNET_GPU_POOL_PAGE_SIZE="3000": must be a power of two`,
		},
		{
			"non-numeric cutoff", "", env(typ, "Round", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "24MiB"), round.Config{},
			`MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF="24MiB": not an integer`,
		},
		{
			"cutoff too large", "", env(typ, "Round", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "40"), round.Config{},
			`MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF="40": must be from 20 to 34`,
		},
		{
			"cutoff below log2(page)", "",
			env(typ, "Round", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "4MiB", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "21"), round.Config{},
			`MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF="21": must be at least log2(page) = 22`,
		},
		{
			"non-numeric reserve", "", env(typ, "Round", "MXNET_GPU_MEM_POOL_RESERVE", "five"), round.Config{},
			`MXNET_GPU_MEM_POOL_RESERVE="five": not an integer`,
		},
		{
			"bad spec value", "round:cutoff=19", env(), round.Config{},
			`round: cutoff=19: must be from 20 to 34`,
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
			p, ok := a.(*round.Pool)
			require.True(t, ok, "%T", a)
			assert.Equal(t, tt.want, p.Config())
			assert.Equal(t, fmt.Sprintf("round:page=%d,cutoff=%d,reserve=%d", tt.want.Page, tt.want.Cutoff, tt.want.Reserve), p.Spec())
		})
	}
}

// BenchmarkAllocFree measures the cache-hit path: an Alloc served from a
// bucket's free list and the Free that puts the block back.
func BenchmarkAllocFree(b *testing.B) {
	p, err := round.New(strategytest.NewDevice(GiB), round.DefaultConfig())
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
// the oldest one each iteration, so many buckets are in use.
func BenchmarkWorkingSet(b *testing.B) {
	p, err := round.New(strategytest.NewDevice(64*GiB), round.DefaultConfig())
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
	p, err := round.New(refusing{strategytest.NewDevice(GiB)}, round.DefaultConfig())
	require.NoError(t, err)
	free(t, p, alloc(t, p, 4096))
	free(t, p, alloc(t, p, 100000))
	err = p.ReleaseAll()
	assert.EqualError(t, err, "round: release: device busy\ndevice busy")
	assert.Zero(t, p.Stats().DeviceFrees)
	assert.NoError(t, p.ReleaseAll(), "the blocks the device refused left the cache")
}
