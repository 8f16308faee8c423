package bfc_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/bfc"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	MiB = 1 << 20
	GiB = 1 << 30
)

// strategy is bfc to the shared tests.
var strategy = alloctest.Strategy[bfc.Config, *bfc.Pool]{Name: "bfc", New: bfc.New, Default: bfc.DefaultConfig()}

func TestConformance(t *testing.T) {
	strategy.Conformance(t, []bfc.Config{
		{AllowGrowth: true, MemoryFraction: 1},
		{MemoryFraction: 1, GarbageCollection: true},
		{MemoryFraction: 0.75},
		{AllowGrowth: true, MemoryFraction: 1, GarbageCollection: true, FragmentationFraction: 0.5},
		{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 3*GiB + 1000, GarbageCollection: true},
	}, &strategytest.Options{Caching: true})
}

func TestNewValidates(t *testing.T) {
	with := strategy.With
	strategy.NewValidates(t, []alloctest.ConfigCase[bfc.Config]{
		{Config: bfc.Config{MemoryFraction: 0.75}},
		{Config: with(func(c *bfc.Config) { c.MemoryLimit = 1 })},
		{Config: with(func(c *bfc.Config) { c.FragmentationFraction = 1 })},
		{Config: with(func(c *bfc.Config) { c.MemoryFraction = 0 }), Err: "bfc: memory_fraction=0: must be more than 0 and at most 1"},
		{Config: with(func(c *bfc.Config) { c.MemoryFraction = 1.5 }), Err: "bfc: memory_fraction=1.5: must be more than 0 and at most 1"},
		{Config: with(func(c *bfc.Config) { c.MemoryFraction = -0.5 }), Err: "bfc: memory_fraction=-0.5: must be more than 0 and at most 1"},
		{Config: with(func(c *bfc.Config) { c.MemoryLimit = -1 }), Err: "bfc: memory_limit=-1: must not be negative"},
		{Config: with(func(c *bfc.Config) { c.FragmentationFraction = -0.1 }), Err: "bfc: fragmentation_fraction=-0.1: must be from 0 to 1"},
		{Config: with(func(c *bfc.Config) { c.FragmentationFraction = 2 }), Err: "bfc: fragmentation_fraction=2: must be from 0 to 1"},
	})
}

func TestMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		c    bfc.Config
		want int64
	}{
		{bfc.DefaultConfig(), 10 * GiB},
		{bfc.Config{MemoryFraction: 0.75}, 7.5 * GiB},
		{bfc.Config{MemoryFraction: 0.3}, 3221225472}, // 10 GiB * 0.3 in double, truncated
		{bfc.Config{MemoryFraction: 0.75, MemoryLimit: 123456789}, 123456789},
	} {
		p, err := bfc.New(strategytest.NewDevice(10*GiB), tt.c)
		require.NoError(t, err)
		assert.Equal(t, tt.want, p.MemoryLimit(), "%+v", tt.c)
	}
}

func spec(c bfc.Config) string {
	return fmt.Sprintf("bfc:allow_growth=%t,preallocate=%t,memory_fraction=%g,memory_limit=%d,garbage_collection=%t,fragmentation_fraction=%g",
		c.AllowGrowth, !c.AllowGrowth, c.MemoryFraction, c.MemoryLimit, c.GarbageCollection, c.FragmentationFraction)
}

func TestRegistry(t *testing.T) {
	def := bfc.DefaultConfig()
	jax := bfc.Config{MemoryFraction: 0.75, GarbageCollection: true}
	env := alloctest.Env
	strategy.Select(t, 2*GiB, spec, []alloctest.SelectCase[bfc.Config]{
		{Spec: "bfc", Want: def},
		{Spec: "BFC", Want: def},
		{Spec: "bfc:allow_growth=false", Want: bfc.Config{MemoryFraction: 1, GarbageCollection: true}},
		{Spec: "bfc:preallocate=true,memory_fraction=0.75", Want: jax},
		{Spec: "bfc:preallocate=False", Want: def},
		{Spec: "bfc:allow_growth=true,preallocate=false", Want: def},
		{Spec: "bfc:memory_limit=1GiB,garbage_collection=false,fragmentation_fraction=0.25",
			Want: bfc.Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: GiB, FragmentationFraction: 0.25}},
		{Name: "TF_FORCE_GPU_ALLOW_GROWTH=false", Spec: "bfc", Env: env("TF_FORCE_GPU_ALLOW_GROWTH", "false"),
			Want: bfc.Config{MemoryFraction: 1, GarbageCollection: true}},
		{Name: "TF_FORCE_GPU_ALLOW_GROWTH=true", Spec: "bfc", Env: env("TF_FORCE_GPU_ALLOW_GROWTH", "true"), Want: def},
		{Name: "a spec beats TF_FORCE_GPU_ALLOW_GROWTH", Spec: "bfc:allow_growth=true", Env: env("TF_FORCE_GPU_ALLOW_GROWTH", "false"), Want: def},
		{Name: "XLA_PYTHON_CLIENT_PREALLOCATE with JAX's fraction", Spec: "bfc",
			Env: env("XLA_PYTHON_CLIENT_PREALLOCATE", "true", "XLA_PYTHON_CLIENT_MEM_FRACTION", ".75"), Want: jax},
		{Name: "XLA_PYTHON_CLIENT_PREALLOCATE=0", Spec: "bfc", Env: env("XLA_PYTHON_CLIENT_PREALLOCATE", "0"), Want: def},
		{Name: "XLA_CLIENT_MEM_FRACTION first", Spec: "bfc",
			Env:  env("XLA_CLIENT_MEM_FRACTION", "0.5", "XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"),
			Want: bfc.Config{AllowGrowth: true, MemoryFraction: 0.5, GarbageCollection: true}},
		{Name: "TF_ENABLE_GPU_GARBAGE_COLLECTION=false", Spec: "bfc", Env: env("TF_ENABLE_GPU_GARBAGE_COLLECTION", "false"),
			Want: bfc.Config{AllowGrowth: true, MemoryFraction: 1}},
		{Name: "GPUALLOC_POOL_TYPE", Env: env("GPUALLOC_POOL_TYPE", "bfc:allow_growth=false"),
			Want: bfc.Config{MemoryFraction: 1, GarbageCollection: true}},

		{Spec: "bfc:allow_growth=yes", Err: "bfc: allow_growth=yes: want true, false or auto (TensorFlow reads exactly true or false)"},
		{Name: "TF_FORCE_GPU_ALLOW_GROWTH=True", Spec: "bfc", Env: env("TF_FORCE_GPU_ALLOW_GROWTH", "True"),
			Err: `TF_FORCE_GPU_ALLOW_GROWTH="True": want true, false or auto (TensorFlow reads exactly true or false)`},
		{Name: "TF_ENABLE_GPU_GARBAGE_COLLECTION=1", Spec: "bfc", Env: env("TF_ENABLE_GPU_GARBAGE_COLLECTION", "1"),
			Err: `TF_ENABLE_GPU_GARBAGE_COLLECTION="1": want true or false (TensorFlow reads exactly these)`},
		{Name: "XLA_PYTHON_CLIENT_PREALLOCATE=no", Spec: "bfc", Env: env("XLA_PYTHON_CLIENT_PREALLOCATE", "no"),
			Err: `XLA_PYTHON_CLIENT_PREALLOCATE="no": want true, True, 1, false, False, 0 or auto, as JAX reads them`},
		{Spec: "bfc:allow_growth=true,preallocate=true",
			Err: "bfc: preallocate=true: contradicts allow_growth=true: preallocate is the opposite of allow_growth"},
		{Name: "TF and JAX variables that contradict", Spec: "bfc",
			Env: env("TF_FORCE_GPU_ALLOW_GROWTH", "false", "XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
			Err: `XLA_PYTHON_CLIENT_PREALLOCATE="false": contradicts allow_growth=false: preallocate is the opposite of allow_growth`},
		{Spec: "bfc:memory_fraction=0", Err: "bfc: memory_fraction=0: must be more than 0 and at most 1"},
		{Name: "XLA_PYTHON_CLIENT_MEM_FRACTION=1.2", Spec: "bfc", Env: env("XLA_PYTHON_CLIENT_MEM_FRACTION", "1.2"),
			Err: `XLA_PYTHON_CLIENT_MEM_FRACTION="1.2": must be more than 0 and at most 1`},
		{Spec: "bfc:memory_fraction=most", Err: "bfc: memory_fraction=most: not a number"},
		{Spec: "bfc:memory_limit=lots", Err: "bfc: memory_limit=lots: not a size: want bytes or a number with a unit such as MiB"},
		{Spec: "bfc:fragmentation_fraction=3", Err: "bfc: fragmentation_fraction=3: must be from 0 to 1"},
		{Spec: "bfc:per_process_gpu_memory_fraction=1", Err: `bfc: unknown parameter "per_process_gpu_memory_fraction" (known: allow_growth, preallocate, memory_fraction, memory_limit, garbage_collection, fragmentation_fraction)`},
	})
}

func TestParams(t *testing.T) {
	strategy.Params(t, "BFC",
		[]string{"allow_growth", "preallocate", "memory_fraction", "memory_limit", "garbage_collection", "fragmentation_fraction"},
		[]string{"auto", "auto", "1", "0", "true", "0"})
}

// TestDefaultSpec checks that the registry's defaults open a pool of the
// default configuration, whose spec gives every value resolved.
func TestDefaultSpec(t *testing.T) {
	want := "bfc:allow_growth=true,preallocate=false,memory_fraction=1,memory_limit=0,garbage_collection=true,fragmentation_fraction=0"
	assert.Equal(t, want, strategy.NewPool(t, GiB, bfc.DefaultConfig()).Spec())
	assert.Equal(t, want, spec(bfc.DefaultConfig()))
	a, err := gpualloc.Open("bfc", strategytest.NewDevice(GiB))
	require.NoError(t, err)
	assert.Equal(t, bfc.DefaultConfig(), a.(*bfc.Pool).Config())
	assert.Equal(t, want, a.(gpualloc.Specer).Spec())
	// The spec reopens the same pool.
	b, err := gpualloc.Open(want, strategytest.NewDevice(GiB))
	require.NoError(t, err)
	assert.Equal(t, want, b.(gpualloc.Specer).Spec())
}
