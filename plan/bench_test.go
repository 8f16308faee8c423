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

// somasCases are the hard instances of BenchmarkSOMAS: somasProblem's
// steps of about 18.7k buffers, the size of the SOMAS problem of a
// 2.6B-parameter model's graph.
var somasCases = []uint64{0, 1, 2}

// BenchmarkSOMAS plans somasProblem's instances within 60 s and reports
// the plan's gap above the peak of live bytes and above the proven bound,
// how far the proof raised the bound above the peak, and the seconds
// taken.
func BenchmarkSOMAS(b *testing.B) {
	for _, seed := range somasCases {
		b.Run(fmt.Sprintf("seed=%d", seed), func(b *testing.B) {
			p := somasProblem(18_700, seed)
			var s Solution
			for b.Loop() {
				var err error
				if s, err = Solve(context.Background(), p, Options{TimeLimit: time.Minute}); err != nil {
					b.Fatal(err)
				}
			}
			if err := Check(p, s.Placements(p), s.Height); err != nil {
				b.Fatal(err)
			}
			h, err := Solve(context.Background(), p, Options{NoSearch: true, TimeLimit: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			pct := func(a, c int64) float64 { return 100 * float64(a-c) / float64(c) }
			b.ReportMetric(float64(len(p.Buffers)), "buffers")
			b.ReportMetric(pct(h.Height, s.LowerBound), "heuristics-over-peak-%")
			b.ReportMetric(pct(s.Height, s.LowerBound), "over-peak-%")
			b.ReportMetric(pct(s.Height, s.ProvenBound), "gap-%")
			b.ReportMetric(pct(s.ProvenBound, s.LowerBound), "bound-over-peak-%")
			b.ReportMetric(s.Elapsed.Seconds(), "s")
		})
	}
}

// BenchmarkTimeLimit solves problems that the search cannot finish
// (somasProblem's 18.7k buffers, a 500-buffer tight instance with its
// lower bound hidden by one buffer made larger, and llmProblem's 100k)
// with time limits of 2 s and 10 s, and reports how far past the limit
// Solve returned: within 10%, whatever the size and the load of the
// machine.
func BenchmarkTimeLimit(b *testing.B) {
	tight := Tight(500, tightCapacity, tightHorizon, rand.New(rand.NewPCG(9, 500)))
	tight.Buffers[0].Size++
	cases := []struct {
		name string
		p    func() Problem
	}{
		{"somas-18.7k", func() Problem { return somasProblem(18_700, 0) }},
		{"tight-500", func() Problem { return tight }},
		{"llm-100k", func() Problem { return llmProblem(100_000, 48, 3) }},
	}
	for _, c := range cases {
		p := c.p()
		for _, limit := range []time.Duration{2 * time.Second, 10 * time.Second} {
			b.Run(fmt.Sprintf("%s/limit=%v", c.name, limit), func(b *testing.B) {
				var worst time.Duration
				for b.Loop() {
					start := time.Now()
					if _, err := Solve(context.Background(), p, Options{TimeLimit: limit}); err != nil {
						b.Fatal(err)
					}
					worst = max(worst, time.Since(start))
				}
				b.ReportMetric(100*(worst.Seconds()/limit.Seconds()-1), "over-limit-%")
			})
		}
	}
}
