package bestfit_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

func TestConformance(t *testing.T) {
	def := bestfit.DefaultConfig()
	for _, c := range []bestfit.Config{
		def,
		{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: bestfit.GrowDouble, Chunk: 2 * MiB},
		{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: bestfit.GrowExact, Chunk: 1},
		{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: bestfit.GrowExact, Chunk: 1},
		{Round: 256, MinBlock: 1024, SplitThreshold: 1 * MiB, Grow: bestfit.GrowChunk, Chunk: 3*MiB + 1},
		{Round: 512, MinBlock: 512, SplitThreshold: 0, Grow: bestfit.GrowDouble, Chunk: 64 * MiB, Initial: 64 * MiB},
		{Round: 4096, MinBlock: 8192, SplitThreshold: 4096, Grow: bestfit.GrowChunk, Chunk: 100 * MiB, Initial: 1},
	} {
		name := fmt.Sprintf("round=%d,min_block=%d,split_threshold=%d,grow=%s,chunk=%d,initial=%d",
			c.Round, c.MinBlock, c.SplitThreshold, c.Grow, c.Chunk, c.Initial)
		t.Run(name, func(t *testing.T) {
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				return bestfit.New(b, c)
			}, &strategytest.Options{Caching: true})
		})
	}
}

func TestNewValidates(t *testing.T) {
	dev := strategytest.NewDevice(GiB)
	ok := bestfit.DefaultConfig()
	with := func(f func(c *bestfit.Config)) bestfit.Config {
		c := ok
		f(&c)
		return c
	}
	tests := []struct {
		c       bestfit.Config
		wantErr string
	}{
		{ok, ""},
		{with(func(c *bestfit.Config) { c.Round, c.MinBlock, c.SplitThreshold = 256, 256, 0 }), ""},
		{with(func(c *bestfit.Config) { c.Round, c.MinBlock = 1<<20, 3<<20 }), ""},
		{with(func(c *bestfit.Config) { c.Grow, c.Chunk = bestfit.GrowExact, 1 }), ""},
		{with(func(c *bestfit.Config) { c.Round = 128 }), "bestfit: round=128: must be a power of two of at least 256"},
		{with(func(c *bestfit.Config) { c.Round = 768 }), "bestfit: round=768: must be a power of two of at least 256"},
		{with(func(c *bestfit.Config) { c.Round = 0 }), "bestfit: round=0: must be a power of two of at least 256"},
		{with(func(c *bestfit.Config) { c.Round = -512 }), "bestfit: round=-512: must be a power of two of at least 256"},
		{with(func(c *bestfit.Config) { c.MinBlock = 256 }), "bestfit: min_block=256: must be a positive multiple of round (512)"},
		{with(func(c *bestfit.Config) { c.MinBlock = 1000 }), "bestfit: min_block=1000: must be a positive multiple of round (512)"},
		{with(func(c *bestfit.Config) { c.SplitThreshold = -1 }), "bestfit: split_threshold=-1: must not be negative"},
		{with(func(c *bestfit.Config) { c.Grow = 3 }), "bestfit: grow=Growth(3): must be exact, chunk or double"},
		{with(func(c *bestfit.Config) { c.Chunk = 0 }), "bestfit: chunk=0: must be positive"},
		{with(func(c *bestfit.Config) { c.Initial = -1 }), "bestfit: initial=-1: must not be negative"},
	}
	for _, tt := range tests {
		p, err := bestfit.New(dev, tt.c)
		if tt.wantErr == "" {
			require.NoError(t, err, "%+v", tt.c)
			assert.Equal(t, tt.c, p.Config())
			continue
		}
		assert.EqualError(t, err, tt.wantErr, "%+v", tt.c)
		var pe *gpualloc.ParamError
		assert.ErrorAs(t, err, &pe)
		assert.Nil(t, p)
	}
	_, err := bestfit.New(nil, ok)
	assert.EqualError(t, err, "bestfit: nil Backend")
}

func TestRegistry(t *testing.T) {
	tests := []struct {
		spec    string
		want    bestfit.Config
		wantErr string
	}{
		{"bestfit", bestfit.DefaultConfig(), ""},
		{"BestFit", bestfit.DefaultConfig(), ""},
		{
			"bestfit:round=256,min_block=256,split_threshold=256,grow=double,chunk=2MiB",
			bestfit.Config{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: bestfit.GrowDouble, Chunk: 2 * MiB}, "",
		},
		{
			"bestfit:grow=exact,initial=1GiB",
			bestfit.Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: bestfit.GrowExact, Chunk: 20 * MiB, Initial: GiB}, "",
		},
		{"bestfit:grow=linear", bestfit.Config{}, "bestfit: grow=linear: must be exact, chunk or double"},
		{"bestfit:round=300", bestfit.Config{}, "bestfit: round=300: must be a power of two of at least 256"},
		{"bestfit:chunk=lots", bestfit.Config{}, "bestfit: chunk=lots: not a size: want bytes or a number with a unit such as MiB"},
		{"bestfit:initial=4GiB", bestfit.Config{}, "bestfit: initial segment of 4294967296 bytes: "},
		{"bestfit:page=4096", bestfit.Config{}, `bestfit: unknown parameter "page" (known: round, min_block, split_threshold, grow, chunk, initial)`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			sp, err := gpualloc.ParseSpec(tt.spec)
			require.NoError(t, err)
			params, err := gpualloc.Resolve(sp, nil)
			if err == nil {
				var a gpualloc.Allocator
				a, err = params.Open(strategytest.NewDevice(2 * GiB))
				if err == nil {
					require.Empty(t, tt.wantErr)
					p, ok := a.(*bestfit.Pool)
					require.True(t, ok, "%T", a)
					assert.Equal(t, tt.want, p.Config())
					assert.Equal(t, fmt.Sprintf("bestfit:round=%d,min_block=%d,split_threshold=%d,grow=%s,chunk=%d,initial=%d",
						tt.want.Round, tt.want.MinBlock, tt.want.SplitThreshold, tt.want.Grow, tt.want.Chunk, tt.want.Initial), p.Spec())
					return
				}
			}
			require.NotEmpty(t, tt.wantErr, "unexpected error %v", err)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestDefaultSpec(t *testing.T) {
	p, err := bestfit.New(strategytest.NewDevice(GiB), bestfit.DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "bestfit:round=512,min_block=512,split_threshold=512,grow=chunk,chunk=20971520,initial=0", p.Spec())
	params, err := gpualloc.Resolve(gpualloc.Spec{Name: "bestfit"}, nil)
	require.NoError(t, err)
	assert.Equal(t, p.Spec(), params.String(), "the registry's defaults are DefaultConfig")
}
