package naive_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/internal/mxnetpool/pooltest"
	"github.com/gpualloc/gpualloc/strategy/naive"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	MiB = 1 << 20
	GiB = 1 << 30
)

// strategy is naive to the shared tests.
var strategy = alloctest.Strategy[naive.Config, *naive.Pool]{Name: "naive", New: naive.New, Default: naive.DefaultConfig()}

func TestConformance(t *testing.T) {
	strategy.Conformance(t, []naive.Config{
		{Page: 32, LargeRound: 1, Reserve: 0},
		{Page: 1000, LargeRound: 3 * MiB, Reserve: 100},
		{Page: 512, LargeRound: 512, Reserve: 50},
	}, &strategytest.Options{Caching: true, Align: virtual.Alignment})
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
	strategy.NewValidates(t, []alloctest.ConfigCase[naive.Config]{
		{Config: naive.Config{Page: 32, LargeRound: 1, Reserve: 0}},
		{Config: naive.Config{Page: 33, LargeRound: 7, Reserve: 100}},
		{Config: naive.Config{Page: 31, LargeRound: 2 * MiB, Reserve: 5}, Err: "naive: page=31: must be at least 32"},
		{Config: naive.Config{Page: 0, LargeRound: 2 * MiB, Reserve: 5}, Err: "naive: page=0: must be at least 32"},
		{Config: naive.Config{Page: 4096, LargeRound: 0, Reserve: 5}, Err: "naive: large_round=0: must be positive"},
		{Config: naive.Config{Page: 4096, LargeRound: -1, Reserve: 5}, Err: "naive: large_round=-1: must be positive"},
		{Config: naive.Config{Page: 4096, LargeRound: 1, Reserve: -1}, Err: "naive: reserve=-1: must be a percentage from 0 to 100"},
		{Config: naive.Config{Page: 4096, LargeRound: 1, Reserve: 101}, Err: "naive: reserve=101: must be a percentage from 0 to 100"},
	})
}

func TestSpec(t *testing.T) {
	p := strategy.NewPool(t, GiB, naive.Config{Page: 512, LargeRound: 1, Reserve: 0})
	assert.Equal(t, "naive:page=512,large_round=1,reserve=0", p.Spec())
}

// TestSharedPool checks that a Pool reaches the shared pool with its name
// and its rounding: a device that refuses is retried after the cache is
// released, and requests of one rounded size share a free list.
func TestSharedPool(t *testing.T) {
	pooltest.SharedPool(t, strategy, 4097, 8192, "4097 and 8192 bytes both round to 8192")
}

func TestRegistry(t *testing.T) {
	s := strategy.Params(t, "Naive", []string{"page", "large_round", "reserve"}, []string{"4096", "2097152", "5"})
	pooltest.Params(t, s)
	assert.Equal(t, []string{"MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE"}, s.Params[1].Env)
}

func TestSelectFromEnvironment(t *testing.T) {
	spec := func(c naive.Config) string {
		return fmt.Sprintf("naive:page=%d,large_round=%d,reserve=%d", c.Page, c.LargeRound, c.Reserve)
	}
	strategy.Select(t, GiB, spec, []alloctest.SelectCase[naive.Config]{
		{Name: "default strategy", Want: naive.DefaultConfig()},
		{Name: "MXNet pool type", Env: alloctest.Env("MXNET_GPU_MEM_POOL_TYPE", "Naive"), Want: naive.DefaultConfig()},
		{
			Name: "MXNet variables",
			Env: alloctest.Env("MXNET_GPU_MEM_POOL_TYPE", "Naive", "MXNET_GPU_MEM_POOL_PAGE_SIZE", "8192",
				"MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE", "1", "MXNET_GPU_MEM_POOL_RESERVE", "0"),
			Want: naive.Config{Page: 8192, LargeRound: 1, Reserve: 0},
		},
		{
			Name: "MXNet 2 page size", Env: alloctest.Env("MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			Want: naive.Config{Page: 1024, LargeRound: 2 * MiB, Reserve: 5},
		},
		{
			Name: "MXNet 1 page size wins", Env: alloctest.Env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "2048", "MXNET_GPU_POOL_PAGE_SIZE", "1024"),
			Want: naive.Config{Page: 2048, LargeRound: 2 * MiB, Reserve: 5},
		},
		{
			Name: "spec wins over variables", Spec: "naive:page=8KiB,reserve=10", Env: alloctest.Env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "16", "MXNET_GPU_MEM_POOL_RESERVE", "x"),
			Want: naive.Config{Page: 8192, LargeRound: 2 * MiB, Reserve: 10},
		},
		{
			Name: "GPUALLOC_POOL_TYPE", Env: alloctest.Env("GPUALLOC_POOL_TYPE", "naive:large_round=4MiB", "MXNET_GPU_MEM_POOL_TYPE", "Unknown"),
			Want: naive.Config{Page: 4096, LargeRound: 4 * MiB, Reserve: 5},
		},
		{Name: "non-numeric page", Env: alloctest.Env("MXNET_GPU_MEM_POOL_PAGE_SIZE", "big"), Err: `MXNET_GPU_MEM_POOL_PAGE_SIZE="big": not a size: want bytes or a number with a unit such as MiB`},
		{Name: "page too small", Env: alloctest.Env("MXNET_GPU_POOL_PAGE_SIZE", "16"), Err: `MXNET_GPU_POOL_PAGE_SIZE="16": must be at least 32`},
		{Name: "zero large round", Env: alloctest.Env("MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE", "0"), Err: `MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE="0": must be positive`},
		{Name: "non-numeric reserve", Env: alloctest.Env("MXNET_GPU_MEM_POOL_RESERVE", "5%"), Err: `MXNET_GPU_MEM_POOL_RESERVE="5%": not an integer`},
		{Name: "reserve too large", Env: alloctest.Env("MXNET_GPU_MEM_POOL_RESERVE", "200"), Err: `MXNET_GPU_MEM_POOL_RESERVE="200": must be a percentage from 0 to 100`},
		{Name: "bad spec value", Spec: "naive:page=16", Err: `naive: page=16: must be at least 32`},
	})
}

// BenchmarkAllocFree measures the cache-hit path with naive's rounding: an
// Alloc served from a free list and the Free that puts the block back.
func BenchmarkAllocFree(b *testing.B) {
	pooltest.AllocFree(b, strategy.NewPool(b, GiB, naive.DefaultConfig()))
}

// BenchmarkWorkingSet keeps 256 blocks of mixed sizes live and replaces
// the oldest one each iteration, so free lists of many sizes are in use.
func BenchmarkWorkingSet(b *testing.B) {
	alloctest.WorkingSet(b, strategy.NewPool(b, 64*GiB, naive.DefaultConfig()), 1)
}
