package tlsf_test

import (
	"fmt"
	"testing"

	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/strategy/tlsf"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// strategy is tlsf to the shared tests.
var strategy = alloctest.Strategy[tlsf.Config, *tlsf.Pool]{Name: "tlsf", New: tlsf.New, Default: tlsf.DefaultConfig()}

func TestConformance(t *testing.T) {
	strategy.Conformance(t, []tlsf.Config{
		{Round: 256, MinBlock: 256, Chunk: 2 * MiB},
		{Round: 256, MinBlock: 1024, Chunk: 3*MiB + 1},
		{Round: 4096, MinBlock: 4096, Chunk: 64 * MiB},
		{Round: 512, MinBlock: 512, Chunk: 1},
	}, &strategytest.Options{Caching: true})
}

func TestNewValidates(t *testing.T) {
	strategy.NewValidates(t, []alloctest.ConfigCase[tlsf.Config]{
		{Config: tlsf.Config{Round: 256, MinBlock: 256, Chunk: 1}},
		{Config: tlsf.Config{Round: 4096, MinBlock: 12288, Chunk: 64 * MiB}},
		{Config: tlsf.Config{Round: 128, MinBlock: 512, Chunk: MiB}, Err: "tlsf: round=128: must be a power of two of at least 256"},
		{Config: tlsf.Config{Round: 1000, MinBlock: 1000, Chunk: MiB}, Err: "tlsf: round=1000: must be a power of two of at least 256"},
		{Config: tlsf.Config{Round: 512, MinBlock: 0, Chunk: MiB}, Err: "tlsf: min_block=0: must be a positive multiple of round (512)"},
		{Config: tlsf.Config{Round: 512, MinBlock: 768, Chunk: MiB}, Err: "tlsf: min_block=768: must be a positive multiple of round (512)"},
		{Config: tlsf.Config{Round: 512, MinBlock: 512, Chunk: 0}, Err: "tlsf: chunk=0: must be positive"},
	})
}

func TestRegistry(t *testing.T) {
	spec := func(c tlsf.Config) string {
		return fmt.Sprintf("tlsf:round=%d,min_block=%d,chunk=%d", c.Round, c.MinBlock, c.Chunk)
	}
	strategy.Select(t, GiB, spec, []alloctest.SelectCase[tlsf.Config]{
		{Spec: "tlsf", Want: tlsf.DefaultConfig()},
		{Spec: "TLSF:chunk=64MiB", Want: tlsf.Config{Round: 512, MinBlock: 512, Chunk: 64 * MiB}},
		{Spec: "tlsf:round=256,min_block=256", Want: tlsf.Config{Round: 256, MinBlock: 256, Chunk: 20 * MiB}},
		{Spec: "tlsf:round=100", Err: "tlsf: round=100: must be a power of two of at least 256"},
		{Spec: "tlsf:chunk=0", Err: "tlsf: chunk=0: must be positive"},
		{Spec: "tlsf:grow=exact", Err: `tlsf: unknown parameter "grow" (known: round, min_block, chunk)`},
	})
}

func TestDefaultSpec(t *testing.T) {
	strategy.DefaultSpec(t, "tlsf:round=512,min_block=512,chunk=20971520")
}
