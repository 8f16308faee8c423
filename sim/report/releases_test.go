package report

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/sim"
)

// releaseResults are the results of a sweep over releases on one trace:
// 2.0 refused the settings, 2.1 and 2.9 ran out of memory, 2.10 did not.
func releaseResults() []sim.Result {
	var out []sim.Result
	for _, r := range []struct {
		version, refused string
		peak, mallocs    int64
		ooms             int64
	}{
		{"2.10", "", 19 << 30, 283, 0},
		{"2.0", "pytorch: expandable_segments: not in PyTorch 2.0", 0, 0, 0},
		{"2.9", "", 19<<30 + 1<<28, 289, 4},
		{"2.1", "", 19<<30 + 1<<28, 289, 4},
	} {
		st := sim.Strategy{Spec: "pytorch:version=" + r.version, Name: "pytorch",
			Params: []sim.StrategyParam{{Key: "version", Value: r.version, Default: "auto", Swept: true}}}
		out = append(out, sim.Result{Trace: "run.pickle", Strategy: st, PeakReservedBytes: r.peak, PeakRequestedBytes: 18 << 30,
			DeviceMallocs: r.mallocs, OOMs: r.ooms, Refused: r.refused, Events: 10, CapacityBytes: 19<<30 + 1<<29})
	}
	return out
}

// TestReleaseFigure: a sweep over releases draws, release by release in
// version order and labelled by number, peak reserved, device mallocs and
// OOMs; a release that ran out of memory keeps its figures, the device's
// capacity near them is drawn, and a release that refused the settings is
// named in the legend.
func TestReleaseFigure(t *testing.T) {
	results := releaseResults()
	sweeps := Sweeps(strategiesOf(results))
	require.Len(t, sweeps, 1)
	fig := SweepFigure(sweeps[0], results, Options{})
	require.NotNil(t, fig)
	assert.Equal(t, "sweep-pytorch-version", fig.Name)
	require.Len(t, fig.panels, 3)
	var labels []string
	for _, tk := range fig.panels[2].X.Tick.Marker.Ticks(fig.panels[2].X.Min, fig.panels[2].X.Max) {
		labels = append(labels, tk.Label)
	}
	assert.Equal(t, []string{"2.0", "2.1", "2.9", "2.10"}, labels)
	assert.Equal(t, "peak reserved\n(GiB)", fig.panels[0].Y.Label.Text)
	assert.Equal(t, "device\nmallocs", fig.panels[1].Y.Label.Text)
	assert.Equal(t, "OOMs", fig.panels[2].Y.Label.Text)
	assert.Equal(t, "PyTorch release (pytorch:version)", fig.panels[2].X.Label.Text)
	// The releases that ran out of memory are on the peak's axis: with
	// their peaks above the capacity, the axis reaches them.
	high := releaseResults()
	for i := range high {
		if high[i].OOMs > 0 {
			high[i].PeakReservedBytes = 25 << 30
		}
	}
	hfig := SweepFigure(Sweeps(strategiesOf(high))[0], high, Options{})
	require.NotNil(t, hfig)
	assert.GreaterOrEqual(t, hfig.panels[0].Y.Max, 25.0)
	var names []string
	for _, e := range fig.legend {
		names = append(names, e.name)
	}
	assert.Equal(t, []string{"run", "the device's capacity, 19.5 GiB", "refused the settings: not replayed"}, names)
	assert.Greater(t, fig.panels[0].Y.Max, 19.5, "the capacity on the axis")
	var b bytes.Buffer
	require.NoError(t, fig.Write(&b, PNG, 0))

	// Values that FormatSize writes alike are written apart.
	u := byteUnit(19 << 30)
	text := sizeText([]xy{{0, 19.24 * (1 << 30)}, {1, 19.19 * (1 << 30)}}, u)
	assert.Equal(t, "19.24 GiB", text(19.24*(1<<30)))

	// The other figures leave out the release that was not replayed: the
	// figure of peaks has a bar for each of the three others.
	figs := Figures(results, Options{Figures: []string{"peak"}})
	require.Len(t, figs, 1)
	ran := append(append([]sim.Result{}, results[0]), results[2:]...)
	assert.Equal(t, PeakFigure("run.pickle", ran, Options{}).Height, figs[0].Height)
	assert.NotEqual(t, PeakFigure("run.pickle", results, Options{}).Height, figs[0].Height)
}
