package bestfit_test

import (
	"fmt"
	"testing"

	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// strategy is bestfit to the shared tests.
var strategy = alloctest.Strategy[bestfit.Config, *bestfit.Pool]{Name: "bestfit", New: bestfit.New, Default: bestfit.DefaultConfig()}

func TestConformance(t *testing.T) {
	strategy.Conformance(t, []bestfit.Config{
		{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: bestfit.GrowDouble, Chunk: 2 * MiB},
		{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: bestfit.GrowExact, Chunk: 1},
		{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: bestfit.GrowExact, Chunk: 1},
		{Round: 256, MinBlock: 1024, SplitThreshold: 1 * MiB, Grow: bestfit.GrowChunk, Chunk: 3*MiB + 1},
		{Round: 512, MinBlock: 512, SplitThreshold: 0, Grow: bestfit.GrowDouble, Chunk: 64 * MiB, Initial: 64 * MiB},
		{Round: 4096, MinBlock: 8192, SplitThreshold: 4096, Grow: bestfit.GrowChunk, Chunk: 100 * MiB, Initial: 1},
	}, &strategytest.Options{Caching: true})
}

func TestNewValidates(t *testing.T) {
	with := strategy.With
	strategy.NewValidates(t, []alloctest.ConfigCase[bestfit.Config]{
		{Config: with(func(c *bestfit.Config) { c.Round, c.MinBlock, c.SplitThreshold = 256, 256, 0 })},
		{Config: with(func(c *bestfit.Config) { c.Round, c.MinBlock = 1<<20, 3<<20 })},
		{Config: with(func(c *bestfit.Config) { c.Grow, c.Chunk = bestfit.GrowExact, 1 })},
		{Config: with(func(c *bestfit.Config) { c.Round = 128 }), Err: "bestfit: round=128: must be a power of two of at least 256"},
		{Config: with(func(c *bestfit.Config) { c.Round = 768 }), Err: "bestfit: round=768: must be a power of two of at least 256"},
		{Config: with(func(c *bestfit.Config) { c.Round = 0 }), Err: "bestfit: round=0: must be a power of two of at least 256"},
		{Config: with(func(c *bestfit.Config) { c.Round = -512 }), Err: "bestfit: round=-512: must be a power of two of at least 256"},
		{Config: with(func(c *bestfit.Config) { c.MinBlock = 256 }), Err: "bestfit: min_block=256: must be a positive multiple of round (512)"},
		{Config: with(func(c *bestfit.Config) { c.MinBlock = 1000 }), Err: "bestfit: min_block=1000: must be a positive multiple of round (512)"},
		{Config: with(func(c *bestfit.Config) { c.SplitThreshold = -1 }), Err: "bestfit: split_threshold=-1: must not be negative"},
		{Config: with(func(c *bestfit.Config) { c.Grow = 3 }), Err: "bestfit: grow=Growth(3): must be exact, chunk or double"},
		{Config: with(func(c *bestfit.Config) { c.Chunk = 0 }), Err: "bestfit: chunk=0: must be positive"},
		{Config: with(func(c *bestfit.Config) { c.Initial = -1 }), Err: "bestfit: initial=-1: must not be negative"},
	})
}

func TestRegistry(t *testing.T) {
	spec := func(c bestfit.Config) string {
		return fmt.Sprintf("bestfit:round=%d,min_block=%d,split_threshold=%d,grow=%s,chunk=%d,initial=%d",
			c.Round, c.MinBlock, c.SplitThreshold, c.Grow, c.Chunk, c.Initial)
	}
	strategy.Select(t, 2*GiB, spec, []alloctest.SelectCase[bestfit.Config]{
		{Spec: "bestfit", Want: bestfit.DefaultConfig()},
		{Spec: "BestFit", Want: bestfit.DefaultConfig()},
		{
			Spec: "bestfit:round=256,min_block=256,split_threshold=256,grow=double,chunk=2MiB",
			Want: bestfit.Config{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: bestfit.GrowDouble, Chunk: 2 * MiB},
		},
		{
			Spec: "bestfit:grow=exact,initial=1GiB",
			Want: bestfit.Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: bestfit.GrowExact, Chunk: 20 * MiB, Initial: GiB},
		},
		{Spec: "bestfit:grow=linear", Err: "bestfit: grow=linear: must be exact, chunk or double"},
		{Spec: "bestfit:round=300", Err: "bestfit: round=300: must be a power of two of at least 256"},
		{Spec: "bestfit:chunk=lots", Err: "bestfit: chunk=lots: not a size: want bytes or a number with a unit such as MiB"},
		{
			Spec: "bestfit:initial=4GiB",
			Err:  "bestfit: initial segment of 4294967296 bytes: virtual: device 0: malloc of 4294967296 bytes with 0 of 2147483648 bytes in use: out of memory",
		},
		{Spec: "bestfit:page=4096", Err: `bestfit: unknown parameter "page" (known: round, min_block, split_threshold, grow, chunk, initial)`},
	})
}

func TestDefaultSpec(t *testing.T) {
	strategy.DefaultSpec(t, "bestfit:round=512,min_block=512,split_threshold=512,grow=chunk,chunk=20971520,initial=0")
}
