package dualcursor_test

import (
	"fmt"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/dualcursor"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	MiB = 1 << 20
	GiB = 1 << 30
)

// strategy is dualcursor to the shared tests.
var strategy = alloctest.Strategy[dualcursor.Config, *dualcursor.Pool]{Name: "dualcursor", New: dualcursor.New, Default: dualcursor.DefaultConfig()}

var (
	params   = dualcursor.Categories(gpualloc.CategoryParameter, gpualloc.CategoryOptimizerState)
	allKnown = dualcursor.Categories(gpualloc.CategoryParameter, gpualloc.CategoryOptimizerState, gpualloc.CategoryInput,
		gpualloc.CategoryActivation, gpualloc.CategoryGradient, gpualloc.CategoryTemporary, gpualloc.CategoryAutogradDetail)
)

func TestConformance(t *testing.T) {
	strategy.Conformance(t, []dualcursor.Config{
		{Align: 512, Pad: 32, Block: 4 * MiB, Grow: dualcursor.GrowBlock, Static: params, Unknown: dualcursor.UnknownBeforeFirstFree},
		{Align: 256, Pad: 0, Block: 1, Grow: dualcursor.GrowBlock, Static: params, Unknown: dualcursor.UnknownDynamic, StaticEnd: dualcursor.EndLow},
		{Align: 4096, Pad: 100, Block: 64 * MiB, Grow: dualcursor.GrowBlock, Static: allKnown, Unknown: dualcursor.UnknownStatic},
		{Align: 512, Pad: 32, Block: 0, Grow: dualcursor.GrowNone, Static: params, Unknown: dualcursor.UnknownBeforeFirstFree},
		{Align: 512, Pad: 32, Block: 0, Grow: dualcursor.GrowBlock, Static: 0, Unknown: dualcursor.UnknownDynamic, StaticEnd: dualcursor.EndLow},
	}, &strategytest.Options{Caching: true})
}

func TestNewValidates(t *testing.T) {
	with := strategy.With
	strategy.NewValidates(t, []alloctest.ConfigCase[dualcursor.Config]{
		{Config: with(func(c *dualcursor.Config) { c.Align, c.Pad = 256, 0 })},
		{Config: with(func(c *dualcursor.Config) { c.Block, c.Grow = 0, dualcursor.GrowNone })},
		{Config: with(func(c *dualcursor.Config) {
			c.Static, c.Unknown, c.StaticEnd = 0, dualcursor.UnknownStatic, dualcursor.EndLow
		})},
		{Config: with(func(c *dualcursor.Config) { c.Align = 128 }), Err: "dualcursor: align=128: must be a power of two of at least 256"},
		{Config: with(func(c *dualcursor.Config) { c.Align = 768 }), Err: "dualcursor: align=768: must be a power of two of at least 256"},
		{Config: with(func(c *dualcursor.Config) { c.Align = 0 }), Err: "dualcursor: align=0: must be a power of two of at least 256"},
		{Config: with(func(c *dualcursor.Config) { c.Pad = -1 }), Err: "dualcursor: pad=-1: must not be negative"},
		{Config: with(func(c *dualcursor.Config) { c.Block = -1 }), Err: "dualcursor: block=-1: must not be negative (0: the device's free memory)"},
		{Config: with(func(c *dualcursor.Config) { c.Grow = 2 }), Err: "dualcursor: grow=Growth(2): must be block or none"},
		{Config: with(func(c *dualcursor.Config) { c.Static = 1 << 8 }), Err: "dualcursor: static=0x100: must be categories joined by + (parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail) or none; unknown follows the unknown rule"},
		{Config: with(func(c *dualcursor.Config) { c.Static = dualcursor.Categories(gpualloc.CategoryUnknown) }), Err: "dualcursor: static=unknown: must be categories joined by + (parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail) or none; unknown follows the unknown rule"},
		{Config: with(func(c *dualcursor.Config) { c.Unknown = 3 }), Err: "dualcursor: unknown=Unknown(3): must be before_first_free, dynamic or static"},
		{Config: with(func(c *dualcursor.Config) { c.StaticEnd = 2 }), Err: "dualcursor: static_end=End(2): must be high or low"},
	})
}

func spec(c dualcursor.Config) string {
	return fmt.Sprintf("dualcursor:align=%d,pad=%d,block=%d,grow=%s,static=%s,unknown=%s,static_end=%s",
		c.Align, c.Pad, c.Block, c.Grow, c.Static, c.Unknown, c.StaticEnd)
}

func TestRegistry(t *testing.T) {
	def, with := strategy.Default, strategy.With
	strategy.Select(t, 2*GiB, spec, []alloctest.SelectCase[dualcursor.Config]{
		{Spec: "dualcursor", Want: def},
		{Spec: "DualCursor", Want: def},
		{Spec: "dualcursor:block=0,grow=none", Want: with(func(c *dualcursor.Config) { c.Block, c.Grow = 0, dualcursor.GrowNone })},
		{Spec: "dualcursor:align=256,pad=0,block=64MiB", Want: with(func(c *dualcursor.Config) { c.Align, c.Pad, c.Block = 256, 0, 64*MiB })},
		{
			Spec: "dualcursor:static=parameter+optimizer_state+input,unknown=dynamic,static_end=low",
			Want: with(func(c *dualcursor.Config) {
				c.Static = dualcursor.Categories(gpualloc.CategoryParameter, gpualloc.CategoryOptimizerState, gpualloc.CategoryInput)
				c.Unknown, c.StaticEnd = dualcursor.UnknownDynamic, dualcursor.EndLow
			}),
		},
		{Spec: "dualcursor:static=none,unknown=STATIC", Want: with(func(c *dualcursor.Config) { c.Static, c.Unknown = 0, dualcursor.UnknownStatic })},
		{Spec: "dualcursor:static=Gradient", Want: with(func(c *dualcursor.Config) { c.Static = dualcursor.Categories(gpualloc.CategoryGradient) })},
		{Spec: "dualcursor:static=weights", Err: "dualcursor: static=weights: must be categories joined by + (parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail) or none; unknown follows the unknown rule"},
		{Spec: "dualcursor:static=parameter+unknown", Err: "dualcursor: static=parameter+unknown: must be categories joined by + (parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail) or none; unknown follows the unknown rule"},
		{Spec: "dualcursor:static=parameter+", Err: "dualcursor: static=parameter+: must be categories joined by + (parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail) or none; unknown follows the unknown rule"},
		{Spec: "dualcursor:grow=double", Err: "dualcursor: grow=double: must be block or none"},
		{Spec: "dualcursor:unknown=first_step", Err: "dualcursor: unknown=first_step: must be before_first_free, dynamic or static"},
		{Spec: "dualcursor:static_end=top", Err: "dualcursor: static_end=top: must be high or low"},
		{Spec: "dualcursor:align=300", Err: "dualcursor: align=300: must be a power of two of at least 256"},
		{Spec: "dualcursor:block=lots", Err: "dualcursor: block=lots: not a size: want bytes or a number with a unit such as MiB"},
		{Spec: "dualcursor:pad=-5", Err: "dualcursor: pad=-5: not a size: negative"},
		{Spec: "dualcursor:round=512", Err: `dualcursor: unknown parameter "round" (known: align, pad, block, grow, static, unknown, static_end)`},
	})
}

func TestDefaultSpec(t *testing.T) {
	strategy.DefaultSpec(t, "dualcursor:align=512,pad=32,block=1073741824,grow=block,static=parameter+optimizer_state,unknown=before_first_free,static_end=high")
}

func TestParams(t *testing.T) {
	strategy.Params(t, "DUALCURSOR",
		[]string{"align", "pad", "block", "grow", "static", "unknown", "static_end"},
		[]string{"512", "32", "1073741824", "block", "parameter+optimizer_state", "before_first_free", "high"})
}
