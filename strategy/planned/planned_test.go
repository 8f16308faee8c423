package planned_test

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/planned"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func TestConformance(t *testing.T) {
	prof := writeProfile(t, steady(8, nil))
	for _, tc := range []struct {
		name string
		edit func(*planned.Config)
	}{
		{"pytorch", nil},
		{"bestfit", func(c *planned.Config) { c.Fallback = planned.FallbackBestFit }},
		{"auto,min_step=1,min_share=0", func(c *planned.Config) { c.MinStep, c.MinShare = 1, 0 }},
		{"profile", func(c *planned.Config) { c.Profile = prof }},
		{"profile,reuse=false,window=1,min_hit=1", func(c *planned.Config) { c.Profile, c.Reuse, c.Window, c.MinHit = prof, false, 1, 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := planned.DefaultConfig()
			if tc.edit != nil {
				tc.edit(&c)
			}
			strategytest.Run(t, func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				return planned.New(b, c)
			}, &strategytest.Options{Caching: true, Align: 512})
		})
	}
}
