package planned_test

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/planned"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func TestConformance(t *testing.T) {
	for _, f := range []planned.Fallback{planned.FallbackPyTorch, planned.FallbackBestFit} {
		t.Run(f.String(), func(t *testing.T) {
			c := planned.DefaultConfig()
			c.Fallback = f
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				return planned.New(b, c)
			}, &strategytest.Options{Caching: true, Align: 512})
		})
	}
}
