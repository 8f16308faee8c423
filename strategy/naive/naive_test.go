package naive_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool/pooltest"
	"github.com/gpualloc/gpualloc/strategy/naive"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
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

// TestSharedPool checks that a Pool reaches the shared pool with its name
// and its rounding: a device that refuses is retried after the cache is
// released, and requests of one rounded size share a free list.
func TestSharedPool(t *testing.T) {
	dev := strategytest.NewDevice(GiB)
	p, err := naive.New(dev, naive.DefaultConfig())
	require.NoError(t, err)
	err = pooltest.Retry(t, p, dev, 100000, 5000)
	assert.EqualError(t, err, "naive: alloc of 5000 bytes (8192 rounded): strategytest: device malloc of 8192 bytes: injected failure: out of memory")

	require.NoError(t, p.ReleaseAll())
	a := pooltest.Alloc(t, p, 4097)
	pooltest.Free(t, p, a)
	assert.Equal(t, a.Addr, pooltest.Alloc(t, p, 8192).Addr, "4097 and 8192 bytes both round to 8192")
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

func TestSelectFromEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		getenv  func(string) (string, bool)
		want    naive.Config
		wantErr string
	}{
		{"default strategy", "", pooltest.Env(), naive.DefaultConfig(), ""},
		{"MXNet pool type", "", pooltest.Env("MXNET_GPU_MEM_POOL_TYPE", "Naive"), naive.DefaultConfig(), ""},
		{
			"MXNet variables", "",
			pooltest.Env("MXNET_GPU_MEM_POOL_TYPE", "Naive", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "8192",
				"MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE", "1", "MXNET_GPU_MEM_POOL_RESERVE", "0"),
			naive.Config{Page: 8192, LargeRound: 1, Reserve: 0}, "",
		},
		{
			"MXNet 2 page size", "",
			pooltest.Env("MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			naive.Config{Page: 1024, LargeRound: 2 * MiB, Reserve: 5}, "",
		},
		{
			"MXNet 1 page size wins", "",
			pooltest.Env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "2048", "MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			naive.Config{Page: 2048, LargeRound: 2 * MiB, Reserve: 5}, "",
		},
		{
			"spec wins over variables", "naive:page=8KiB,reserve=10",
			pooltest.Env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "16", "MXNET_GPU_MEM_POOL_RESERVE", "x"),
			naive.Config{Page: 8192, LargeRound: 2 * MiB, Reserve: 10}, "",
		},
		{
			"GPUALLOC_POOL_TYPE", "",
			pooltest.Env("GPUALLOC_POOL_TYPE", "naive:large_round=4MiB", "MXNET_GPU_MEM_POOL_TYPE", "Unknown"),
			naive.Config{Page: 4096, LargeRound: 4 * MiB, Reserve: 5}, "",
		},
		{
			"non-numeric page", "", pooltest.Env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "big"), naive.Config{},
			`MXNET_GPU_MEM_POOL_PAGE_SIZE="big": not a size: want bytes or a number with a unit such as MiB`,
		},
		{
			"page too small", "", pooltest.Env("MXNET_GPU_POOL_PAGE_SIZE", "16"), naive.Config{},
			`MXNET_GPU_POOL_PAGE_SIZE="16": must be at least 32`,
		},
		{
			"zero large round", "", pooltest.Env("MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE", "0"), naive.Config{},
			`MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE="0": must be positive`,
		},
		{
			"non-numeric reserve", "", pooltest.Env("MXNET_GPU_MEM_POOL_RESERVE", "5%"), naive.Config{},
			`MXNET_GPU_MEM_POOL_RESERVE="5%": not an integer`,
		},
		{
			"reserve too large", "", pooltest.Env("MXNET_GPU_MEM_POOL_RESERVE", "200"), naive.Config{},
			`MXNET_GPU_MEM_POOL_RESERVE="200": must be a percentage from 0 to 100`,
		},
		{
			"bad spec value", "naive:page=16", pooltest.Env(), naive.Config{},
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

// BenchmarkAllocFree measures the cache-hit path with naive's rounding: an
// Alloc served from a free list and the Free that puts the block back. The
// benchmarks call the Pool's methods directly, not through an interface, so
// that they time the pool alone.
func BenchmarkAllocFree(b *testing.B) {
	p, err := naive.New(strategytest.NewDevice(GiB), naive.DefaultConfig())
	require.NoError(b, err)
	sizes := pooltest.HitSizes(b, p)
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
	sizes, ring := pooltest.WorkingSet(b, p)
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
