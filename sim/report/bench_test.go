package report_test

import (
	"testing"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	"github.com/gpualloc/gpualloc/traces"
)

// BenchmarkWrite measures writing the report of the bundled traces through
// three strategies (9 figures in PNG and SVG, the summaries, the time
// series, index.html), the replays excluded. Its cost does not grow with
// the traces' length: the series are bounded.
func BenchmarkWrite(b *testing.B) {
	var results []sim.Result
	sizes := map[string]*report.SizeHistogram{}
	for _, bt := range traces.Bundled() {
		for i, spec := range strategies {
			r, err := bt.Open()
			if err != nil {
				b.Fatal(err)
			}
			var tr traces.Reader = r
			if i == 0 {
				sc := report.NewSizeCounter(r)
				sizes[bt.Name], tr = &sc.Sizes, sc
			}
			res, err := sim.Replay(tr, sim.Config{Params: mustParams(b, spec)})
			if err != nil {
				b.Fatal(err)
			}
			results = append(results, res)
		}
	}
	dir := b.TempDir()
	for b.Loop() {
		if _, err := report.Write(dir, results, report.Options{Sizes: sizes}); err != nil {
			b.Fatal(err)
		}
	}
}
