package report

import (
	"image/color"
	"math"

	"github.com/gpualloc/gpualloc/sim"
)

// Ramp returns n colours from light to dark around base, for the variants
// of a sweep in order: from a tint (base mixed with white) through base to
// a shade (base mixed with black). Lightness is what orders them, so the
// order reads in grey too.
func Ramp(base color.RGBA, n int) []color.RGBA {
	out := make([]color.RGBA, n)
	for i := range out {
		t := 0.5
		if n > 1 {
			t = float64(i) / float64(n-1)
		}
		// t from 0 to 1: 70% white, through the colour at 0.55, to 45%
		// black.
		const mid = 0.55
		if t < mid {
			out[i] = mix(base, color.RGBA{R: 255, G: 255, B: 255, A: 255}, 0.7*(1-t/mid))
		} else {
			out[i] = mix(base, color.RGBA{A: 255}, 0.45*(t-mid)/(1-mid))
		}
	}
	return out
}

// mix returns a mixed with b, share f of b.
func mix(a, b color.RGBA, f float64) color.RGBA {
	m := func(x, y uint8) uint8 { return uint8(math.Round(float64(x)*(1-f) + float64(y)*f)) }
	return color.RGBA{R: m(a.R, b.R), G: m(a.G, b.G), B: m(a.B, b.B), A: 255}
}

// sweepColors gives the variants of each sweep their ramp from the
// strategy's colour: the built-in's fixed colour, else the colour
// [StrategyColors] gives the strategy's name alone.
func sweepColors(colors map[string]color.RGBA, sweeps []Sweep) {
	for _, sw := range sweeps {
		base := StrategyColors([]sim.Strategy{{Spec: sw.Strategy, Name: sw.Strategy}})[sw.Strategy]
		for i, c := range Ramp(base, len(sw.Specs)) {
			colors[sw.Specs[i]] = c
		}
	}
}

// sweepLooks gives the variants of each sweep their looks: the colour
// colors holds, the dash pattern of the strategy's own colour, and a
// marker each, in the sweep's order, so that variants whose lines meet
// are told apart in greyscale too.
func sweepLooks(colors map[string]color.RGBA, sweeps []Sweep) map[string]look {
	out := map[string]look{}
	for _, sw := range sweeps {
		base := lookOf(StrategyColors([]sim.Strategy{{Spec: sw.Strategy, Name: sw.Strategy}})[sw.Strategy])
		for i, spec := range sw.Specs {
			out[spec] = look{c: colors[spec], mark: i, dash: base.dash}
		}
	}
	return out
}
