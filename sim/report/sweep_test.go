package report_test

import (
	"image/color"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	_ "github.com/gpualloc/gpualloc/strategy/pytorch"
)

// expand returns the strategies that a sweep spec stands for, with the
// environment variables of env (name, value, ...).
func expand(t *testing.T, spec string, env ...string) []sim.Strategy {
	t.Helper()
	getenv := func(k string) (string, bool) {
		for i := 0; i+1 < len(env); i += 2 {
			if env[i] == k {
				return env[i+1], true
			}
		}
		return "", false
	}
	sel, err := gpualloc.Select(spec, getenv)
	require.NoError(t, err)
	ps, err := sel.Expand()
	require.NoError(t, err)
	var out []sim.Strategy
	for _, p := range ps {
		out = append(out, sim.StrategyOf(p))
	}
	return out
}

// specsOf returns the specs of strategies.
func specsOf(strategies []sim.Strategy) []string {
	var out []string
	for _, s := range strategies {
		out = append(out, s.Spec)
	}
	return out
}

func TestSweeps(t *testing.T) {
	specs := append(expand(t, "round:cutoff=34|20|24"), expand(t, "naive")...)
	specs = append(specs, expand(t, "pytorch", "PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:inf|64,expandable_segments:True|False")...)
	sweeps := report.Sweeps(specs)
	require.Len(t, sweeps, 2, "naive alone is no sweep")

	round := sweeps[0]
	assert.Equal(t, "round", round.Strategy)
	assert.Equal(t, []string{"cutoff"}, round.Params)
	assert.Equal(t, [][]string{{"20"}, {"24"}, {"34"}}, round.Values, "in the order of the values")
	labels := report.SweepLabels(specs)
	assert.Equal(t, "round:cutoff=24", labels["round:page=4096,cutoff=24,reserve=5"], "the default keeps its parameter")
	assert.Equal(t, "naive", labels["naive:page=4096,large_round=2097152,reserve=5"])

	// A conf's settings vary one by one: numbers before text, inf last.
	py := sweeps[1]
	assert.Equal(t, []string{"max_split_size_mb", "expandable_segments"}, py.Params)
	assert.Equal(t, [][]string{{"64", "False"}, {"64", "True"}, {"inf", "False"}, {"inf", "True"}}, py.Values)
	assert.Equal(t, "pytorch:max_split_size_mb=64,expandable_segments=True", py.Label(py.Specs[1]))
}

// Variants given one by one, one with a conf and one without, are
// labelled by the settings, not by conf's text ("conf=none" against "conf=").
func TestSweepLabelsOfConf(t *testing.T) {
	specs := append(expand(t, "pytorch"), expand(t, "pytorch:conf=max_split_size_mb:128,expandable_segments:True")...)
	labels := report.SweepLabels(specs)
	assert.Equal(t, "pytorch:max_split_size_mb=auto,expandable_segments=auto", labels[specs[0].Spec])
	assert.Equal(t, "pytorch:max_split_size_mb=128,expandable_segments=True", labels[specs[1].Spec])
}

func TestRamp(t *testing.T) {
	base := report.Palette[1]
	ramp := report.Ramp(base, 7)
	luma := func(c color.RGBA) float64 { return 0.299*float64(c.R) + 0.587*float64(c.G) + 0.114*float64(c.B) }
	for i := 1; i < len(ramp); i++ {
		assert.Less(t, luma(ramp[i]), luma(ramp[i-1]), "light to dark: %d", i)
	}
	assert.Len(t, report.Ramp(base, 1), 1)
}

// sweepResults replays the tiny trace through a sweep of round's cutoff,
// naive, and pytorch's max_split_size_mb, on a device small enough that
// one variant runs out of memory.
func sweepResults(t *testing.T) []sim.Result {
	var specs []string
	specs = append(specs, specsOf(expand(t, "round:cutoff=20..24/2"))...)
	specs = append(specs, "naive")
	specs = append(specs, specsOf(expand(t, "pytorch:max_split_size_mb=20|inf"))...)
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), specs...)
	more, _ := replay(t, "notime.csv", tinyTrace(t, true), specs...)
	return append(results, more...)
}

func TestSweepFigures(t *testing.T) {
	results := sweepResults(t)
	sweeps := report.Sweeps(strategiesOf(results))
	require.Len(t, sweeps, 2)
	checkGolden(t, "sweep", report.SweepFigure(sweeps[0], results, report.Options{}))
	checkGolden(t, "pareto", report.ParetoFigure("testdata/tiny.csv", results, report.Options{}))

	var names []string
	for _, f := range report.Figures(results, report.Options{}) {
		names = append(names, f.Name)
		assert.NotEmpty(t, f.Caption, f.Name)
	}
	assert.Equal(t, []string{"overhead", "breakdown", "sweep-round-cutoff", "sweep-pytorch-max_split_size_mb",
		"tiny-memory", "tiny-memory-panels", "tiny-fragmentation", "tiny-peak", "tiny-trace", "tiny-pareto",
		"notime-memory", "notime-memory-panels", "notime-fragmentation", "notime-peak", "notime-trace", "notime-pareto"}, names)
}

func TestParetoFront(t *testing.T) {
	r := func(spec string, peak, mallocs, ooms int64) sim.Result {
		return sim.Result{Trace: "t", Strategy: specOnly(spec), PeakReservedBytes: peak, DeviceMallocs: mallocs, OOMs: ooms}
	}
	results := []sim.Result{r("naive", 10, 5, 0), r("round", 8, 9, 0), r("unpooled", 9, 9, 0), r("bestfit", 12, 5, 0), r("buddy", 1, 1, 2)}
	front := report.ParetoFront(results)
	var specs []string
	for _, f := range front {
		specs = append(specs, f.Strategy.Spec)
	}
	assert.Equal(t, []string{"naive", "round"}, specs)
}

func strategiesOf(results []sim.Result) []sim.Strategy {
	var out []sim.Strategy
	for _, r := range results {
		out = append(out, r.Strategy)
	}
	return out
}
