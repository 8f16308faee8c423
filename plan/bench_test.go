package plan

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// tightCapacity and tightHorizon are the rectangle of the tight
// instances of the benchmarks.
const (
	tightCapacity = 1 << 20
	tightHorizon  = 1 << 16
)

// BenchmarkTight solves tight instances of 100 to 500 buffers (see [Tight])
// with the search, seeds 0 to 4 of each size, each within 60 s, and reports
// how many it solved at the lower bound and the heuristics' gap above it.
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
