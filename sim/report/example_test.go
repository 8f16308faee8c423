package report_test

import (
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	_ "github.com/gpualloc/gpualloc/strategy/naive"
	_ "github.com/gpualloc/gpualloc/strategy/round"
	"github.com/gpualloc/gpualloc/traces"
)

// Replay a trace through two strategies, counting its request sizes in the
// first replay, and write the report: summaries, figures and index.html.
func ExampleWrite() {
	const trace = `op,id,size,time_us
alloc,1,1000,0
alloc,2,5000000,10
free,1,,20
alloc,3,3000000,30
free,2,,40
free,3,,50
`
	var results []sim.Result
	sizes := map[string]*report.SizeHistogram{}
	for i, spec := range []string{"naive", "round"} {
		sel, err := gpualloc.Select(spec, os.LookupEnv)
		if err != nil {
			log.Fatal(err)
		}
		var r traces.Reader
		r, err = traces.NewReader(strings.NewReader(trace), "runs/step.csv", traces.Options{})
		if err != nil {
			log.Fatal(err)
		}
		if i == 0 {
			sc := report.NewSizeCounter(r)
			sizes["runs/step.csv"], r = &sc.Sizes, sc
		}
		res, err := sim.Replay(r, sim.Config{Params: sel}) // with its series
		if err != nil {
			log.Fatal(err)
		}
		results = append(results, res)
	}

	dir, err := os.MkdirTemp("", "report")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	files, err := report.Write(dir, results, report.Options{Formats: []report.Format{report.SVG}, Sizes: sizes})
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range files {
		fmt.Println(f)
	}
	// Output:
	// breakdown.svg
	// index.html
	// overhead.svg
	// step-fragmentation.svg
	// step-memory-panels.svg
	// step-memory.svg
	// step-peak.svg
	// step-trace.svg
	// summary.csv
	// summary.json
	// timeseries.csv
}

// A figure on its own, for a paper: the peak reserved memory of each
// strategy, written as PDF.
func ExamplePeakFigure() {
	r, err := traces.NewReader(strings.NewReader("op,id,size\nalloc,1,5000000\nfree,1,\n"), "t.csv", traces.Options{})
	if err != nil {
		log.Fatal(err)
	}
	sel, err := gpualloc.Select("round", os.LookupEnv)
	if err != nil {
		log.Fatal(err)
	}
	res, err := sim.Replay(r, sim.Config{Params: sel})
	if err != nil {
		log.Fatal(err)
	}
	fig := report.PeakFigure("t.csv", []sim.Result{res}, report.Options{})
	fmt.Printf("%s: %.1f in wide\n", fig.Name, fig.Width/72)
	// fig.Save("t-peak.pdf", 0) writes it.
	// Output:
	// t-peak: 3.3 in wide
}
