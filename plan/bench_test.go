package plan

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// tightCapacity and tightHorizon are the rectangle of the tight
// instances of the benchmarks.
const (
	tightCapacity = 1 << 20
	tightHorizon  = 1 << 16
)

// BenchmarkTight solves tight instances of 100 to 500 buffers (see [Tight])
// with the search, seeds 0 to 4 of each size, each within 60 s, checks each
// placement with [Check], and reports how many it solved at the lower bound and the heuristics' gap above it.
func BenchmarkTight(b *testing.B) {
	for _, n := range []int{100, 200, 300, 400, 500} {
		for seed := range 5 {
			p := Tight(n, tightCapacity, tightHorizon, rand.New(rand.NewPCG(uint64(seed), uint64(n))))
			b.Run(fmt.Sprintf("n=%d/seed=%d", n, seed), func(b *testing.B) {
				var s Solution
				for b.Loop() {
					var err error
					if s, err = Solve(context.Background(), p, Options{TimeLimit: 60 * time.Second}); err != nil {
						b.Fatal(err)
					}
				}
				if err := Check(p, s.Placements(p), s.Height); err != nil {
					b.Fatal(err)
				}
				h, err := Solve(context.Background(), p, Options{NoSearch: true})
				if err != nil {
					b.Fatal(err)
				}
				solved := 0.0
				if s.Height == s.LowerBound {
					solved = 1
				}
				b.ReportMetric(solved, "at-lower-bound")
				b.ReportMetric(100*float64(h.Height-h.LowerBound)/float64(h.LowerBound), "heuristic-gap-%")
			})
		}
	}
}

// BenchmarkPlan1M plans the allocations of a generated training trace of
// about a million allocations (simulate gen --steps 1103 training): the
// heuristics only, of which the first, the time-order first fit, reaches
// the lower bound on this trace. It reports the time per buffer and the
// heap in use after the plan.
func BenchmarkPlan1M(b *testing.B) {
	var text bytes.Buffer
	w := traces.NewWriter(&text, gen.ColumnsOf("training")...)
	o := gen.DefaultOptions()
	o.Steps = 1103
	if err := gen.Generate(w, "training", o); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	r, err := traces.NewReader(&text, "train1m", traces.Options{})
	if err != nil {
		b.Fatal(err)
	}
	probs, err := FromTrace(r)
	if err != nil {
		b.Fatal(err)
	}
	text = bytes.Buffer{}
	p := probs[0].Problem
	b.ResetTimer()
	var s Solution
	for b.Loop() {
		if s, err = Solve(context.Background(), p, Options{NoSearch: true, TimeLimit: time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(len(p.Buffers)), "buffers")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(p.Buffers)), "ns/buffer")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(100*float64(s.Height-s.LowerBound)/float64(s.LowerBound), "gap-%")
}
