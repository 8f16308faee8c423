package round_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool/pooltest"
	"github.com/gpualloc/gpualloc/strategy/round"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
	TiB = 1 << 40
)

// strategy is round to the shared tests.
var strategy = alloctest.Strategy[round.Config, *round.Pool]{Name: "round", New: round.New, Default: round.DefaultConfig()}

func TestConformance(t *testing.T) {
	strategy.Conformance(t, []round.Config{
		{Page: 32, Cutoff: 20, Reserve: 0},
		{Page: 512, Cutoff: 22, Reserve: 100},
		{Page: 1 << 20, Cutoff: 34, Reserve: 50},
	}, &strategytest.Options{Caching: true, Align: virtual.Alignment})
	// Requests beyond MXNet's last bucket (16 GiB), on a large device.
	t.Run("beyond 16GiB", func(t *testing.T) {
		strategytest.Run(t, strategy.Open(round.Config{Page: 4096, Cutoff: 20, Reserve: 5}), &strategytest.Options{Caching: true, Align: virtual.Alignment, Capacity: 4 * TiB, MaxSize: 64 * GiB, Ops: 1000})
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
	strategy.NewValidates(t, []alloctest.ConfigCase[round.Config]{
		{Config: round.Config{Page: 32, Cutoff: 20}},
		{Config: round.Config{Page: 1 << 34, Cutoff: 34, Reserve: 100}},
		{Config: round.Config{Page: 1 << 20, Cutoff: 20}},
		{Config: round.Config{Page: 31, Cutoff: 24, Reserve: 5}, Err: "round: page=31: must be at least 32"},
		{Config: round.Config{Page: 16, Cutoff: 24, Reserve: 5}, Err: "round: page=16: must be at least 32"},
		{Config: round.Config{Page: 3000, Cutoff: 24, Reserve: 5}, Err: "round: page=3000: must be a power of two"},
		{Config: round.Config{Page: 4096, Cutoff: 19, Reserve: 5}, Err: "round: cutoff=19: must be from 20 to 34"},
		{Config: round.Config{Page: 4096, Cutoff: 35, Reserve: 5}, Err: "round: cutoff=35: must be from 20 to 34"},
		{Config: round.Config{Page: 1 << 21, Cutoff: 20, Reserve: 5}, Err: "round: cutoff=20: must be at least log2(page) = 21"},
		{Config: round.Config{Page: 1 << 35, Cutoff: 34, Reserve: 5}, Err: "round: page=34359738368: must be at most 2^34 (16 GiB), as the cutoff, at most 34, must be at least log2(page)"},
		{Config: round.Config{Page: 1 << 62, Cutoff: 24, Reserve: 5}, Err: "round: page=4611686018427387904: must be at most 2^34 (16 GiB), as the cutoff, at most 34, must be at least log2(page)"},
		{Config: round.Config{Page: 4096, Cutoff: 24, Reserve: -1}, Err: "round: reserve=-1: must be a percentage from 0 to 100"},
		{Config: round.Config{Page: 4096, Cutoff: 24, Reserve: 101}, Err: "round: reserve=101: must be a percentage from 0 to 100"},
	})
}

func TestSpec(t *testing.T) {
	p := strategy.NewPool(t, GiB, round.Config{Page: 512, Cutoff: 20, Reserve: 0})
	assert.Equal(t, "round:page=512,cutoff=20,reserve=0", p.Spec())
}

// TestSharedPool checks that a Pool reaches the shared pool with its name
// and its rounding: a device that refuses is retried after the cache is
// released, and requests of one bucket share a free list.
func TestSharedPool(t *testing.T) {
	pooltest.SharedPool(t, strategy, 65537, 131072, "65537 to 131072 bytes share a bucket")
}

func TestBeyondLastBucket(t *testing.T) {
	p, dev := alloctest.New(t, TiB, round.New, round.DefaultConfig())
	a := pooltest.Alloc(t, p, 20*GiB)
	assert.Equal(t, int64(20*GiB), a.Size)
	pooltest.Free(t, p, a)
	b := pooltest.Alloc(t, p, 20*GiB-16*MiB+1)
	assert.Equal(t, a.Addr, b.Addr, "served from the cache beyond MXNet's bucket array")
	pooltest.Free(t, p, b)
	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used)
	assert.Equal(t, int64(1), p.Stats().DeviceFrees)
}

func TestRegistry(t *testing.T) {
	s := strategy.Params(t, "ROUND", []string{"page", "cutoff", "reserve"}, []string{"4096", "24", "5"})
	pooltest.Params(t, s)
	assert.Equal(t, []string{"MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF"}, s.Params[1].Env)
}

func TestSelectFromEnvironment(t *testing.T) {
	const typ = "MXNET_GPU_MEM_POOL_TYPE"
	spec := func(c round.Config) string {
		return fmt.Sprintf("round:page=%d,cutoff=%d,reserve=%d", c.Page, c.Cutoff, c.Reserve)
	}
	strategy.Select(t, GiB, spec, []alloctest.SelectCase[round.Config]{
		{Name: "MXNet pool type", Env: alloctest.Env(typ, "Round"), Want: round.DefaultConfig()},
		{
			Name: "MXNet cutoff", Env: alloctest.Env(typ, "Round", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "20"),
			Want: round.Config{Page: 4096, Cutoff: 20, Reserve: 5},
		},
		{
			Name: "MXNet variables", Env: alloctest.Env(typ, "round", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "65536", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "30", "MXNET_GPU_MEM_POOL_RESERVE", "0"),
			Want: round.Config{Page: 65536, Cutoff: 30, Reserve: 0},
		},
		{
			Name: "MXNet 2 page size", Env: alloctest.Env(typ, "Round", "MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			Want: round.Config{Page: 1024, Cutoff: 24, Reserve: 5},
		},
		{
			Name: "MXNet 1 page size wins", Env: alloctest.Env(typ, "Round", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "2048", "MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			Want: round.Config{Page: 2048, Cutoff: 24, Reserve: 5},
		},
		{
			Name: "spec wins over variables", Spec: "round:cutoff=22,page=1MiB", Env: alloctest.Env(typ, "Naive", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "x"),
			Want: round.Config{Page: 1 << 20, Cutoff: 22, Reserve: 5},
		},
		{
			Name: "GPUALLOC_POOL_TYPE", Env: alloctest.Env("GPUALLOC_POOL_TYPE", "round:cutoff=21", typ, "Naive"),
			Want: round.Config{Page: 4096, Cutoff: 21, Reserve: 5},
		},
		{Name: "non-numeric page", Env: alloctest.Env(typ, "Round", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "four"), Err: `MXNET_GPU_MEM_POOL_PAGE_SIZE="four": not a size: want bytes or a number with a unit such as MiB`},
		{Name: "page not a power of two", Env: alloctest.Env(typ, "Round", "MXNET_GPU_POOL_PAGE_SIZE", "3000"), Err: `MXNET_GPU_POOL_PAGE_SIZE="3000": must be a power of two`},
		{Name: "non-numeric cutoff", Env: alloctest.Env(typ, "Round", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "24MiB"), Err: `MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF="24MiB": not an integer`},
		{Name: "cutoff too large", Env: alloctest.Env(typ, "Round", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "40"), Err: `MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF="40": must be from 20 to 34`},
		{Name: "cutoff below log2(page)", Env: alloctest.Env(typ, "Round", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "4MiB", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "21"), Err: `MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF="21": must be at least log2(page) = 22`},
		{Name: "non-numeric reserve", Env: alloctest.Env(typ, "Round", "MXNET_GPU_MEM_POOL_RESERVE", "five"), Err: `MXNET_GPU_MEM_POOL_RESERVE="five": not an integer`},
		{Name: "bad spec value", Spec: "round:cutoff=19", Err: `round: cutoff=19: must be from 20 to 34`},
	})
}

// BenchmarkAllocFree measures the cache-hit path with round's rounding: an
// Alloc served from a free list and the Free that puts the block back.
func BenchmarkAllocFree(b *testing.B) {
	pooltest.AllocFree(b, strategy.NewPool(b, GiB, round.DefaultConfig()))
}

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes live and replaces
// the oldest one each iteration, so free lists of many sizes are in use.
func BenchmarkWorkingSet(b *testing.B) {
	alloctest.WorkingSet(b, strategy.NewPool(b, 64*GiB, round.DefaultConfig()), 1)
}
