package tlsf_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/strategy/tlsf"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

func TestConformance(t *testing.T) {
	for _, c := range []tlsf.Config{
		tlsf.DefaultConfig(),
		{Round: 256, MinBlock: 256, Chunk: 2 * MiB},
		{Round: 256, MinBlock: 1024, Chunk: 3*MiB + 1},
		{Round: 4096, MinBlock: 4096, Chunk: 64 * MiB},
		{Round: 512, MinBlock: 512, Chunk: 1},
	} {
		t.Run(fmt.Sprintf("round=%d,min_block=%d,chunk=%d", c.Round, c.MinBlock, c.Chunk), func(t *testing.T) {
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				return tlsf.New(b, c)
			}, &strategytest.Options{Caching: true})
		})
	}
}

func TestNewValidates(t *testing.T) {
	dev := strategytest.NewDevice(GiB)
	tests := []struct {
		c       tlsf.Config
		wantErr string
	}{
		{tlsf.DefaultConfig(), ""},
		{tlsf.Config{Round: 256, MinBlock: 256, Chunk: 1}, ""},
		{tlsf.Config{Round: 4096, MinBlock: 12288, Chunk: 64 * MiB}, ""},
		{tlsf.Config{Round: 128, MinBlock: 512, Chunk: MiB}, "tlsf: round=128: must be a power of two of at least 256"},
		{tlsf.Config{Round: 1000, MinBlock: 1000, Chunk: MiB}, "tlsf: round=1000: must be a power of two of at least 256"},
		{tlsf.Config{Round: 512, MinBlock: 0, Chunk: MiB}, "tlsf: min_block=0: must be a positive multiple of round (512)"},
		{tlsf.Config{Round: 512, MinBlock: 768, Chunk: MiB}, "tlsf: min_block=768: must be a positive multiple of round (512)"},
		{tlsf.Config{Round: 512, MinBlock: 512, Chunk: 0}, "tlsf: chunk=0: must be positive"},
	}
	for _, tt := range tests {
		p, err := tlsf.New(dev, tt.c)
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
	_, err := tlsf.New(nil, tlsf.DefaultConfig())
	assert.EqualError(t, err, "tlsf: nil Backend")
}

func TestRegistry(t *testing.T) {
	tests := []struct {
		spec    string
		want    tlsf.Config
		wantErr string
	}{
		{"tlsf", tlsf.DefaultConfig(), ""},
		{"TLSF:chunk=64MiB", tlsf.Config{Round: 512, MinBlock: 512, Chunk: 64 * MiB}, ""},
		{"tlsf:round=256,min_block=256", tlsf.Config{Round: 256, MinBlock: 256, Chunk: 20 * MiB}, ""},
		{"tlsf:round=100", tlsf.Config{}, "tlsf: round=100: must be a power of two of at least 256"},
		{"tlsf:chunk=0", tlsf.Config{}, "tlsf: chunk=0: must be positive"},
		{"tlsf:grow=exact", tlsf.Config{}, `tlsf: unknown parameter "grow" (known: round, min_block, chunk)`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			sp, err := gpualloc.ParseSpec(tt.spec)
			require.NoError(t, err)
			params, err := gpualloc.Resolve(sp, nil)
			if err == nil {
				var a gpualloc.Allocator
				a, err = params.Open(strategytest.NewDevice(GiB))
				if err == nil {
					require.Empty(t, tt.wantErr)
					p, ok := a.(*tlsf.Pool)
					require.True(t, ok, "%T", a)
					assert.Equal(t, tt.want, p.Config())
					assert.Equal(t, fmt.Sprintf("tlsf:round=%d,min_block=%d,chunk=%d", tt.want.Round, tt.want.MinBlock, tt.want.Chunk), p.Spec())
					return
				}
			}
			require.NotEmpty(t, tt.wantErr, "unexpected error %v", err)
			assert.EqualError(t, err, tt.wantErr)
		})
	}
}

func TestDefaultSpec(t *testing.T) {
	p, err := tlsf.New(strategytest.NewDevice(GiB), tlsf.DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "tlsf:round=512,min_block=512,chunk=20971520", p.Spec())
	params, err := gpualloc.Resolve(gpualloc.Spec{Name: "tlsf"}, nil)
	require.NoError(t, err)
	assert.Equal(t, p.Spec(), params.String(), "the registry's defaults are DefaultConfig")
}
