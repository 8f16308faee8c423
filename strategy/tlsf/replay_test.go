package tlsf_test

import (
	"fmt"
	"testing"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/strategy/tlsf"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// TestPeakAllocatedIsRoundedPeak checks on independent traces that the peak
// of allocated bytes a replay measures is the peak of live requests rounded
// as Config.RoundSize says: TLSF always splits, so a block's Size is exactly
// the rounded request.
func TestPeakAllocatedIsRoundedPeak(t *testing.T) {
	n := int64(50000)
	if testing.Short() {
		n = 5000
	}
	for _, c := range []tlsf.Config{tlsf.DefaultConfig(), {Round: 256, MinBlock: 1024, Chunk: 1}} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("round=%d,min_block=%d,chunk=%d,seed=%d", c.Round, c.MinBlock, c.Chunk, seed), func(t *testing.T) {
				events := replaytest.RandomEvents(t, gen.Options{Seed: seed, Events: n})
				want, _ := replaytest.RoundedPeak(events, func(size int64) int64 { return max(c.MinBlock, (size+c.Round-1)/c.Round*c.Round) })
				replaytest.ReplayPeak(t, traces.NewSliceReader("random", events), strategy.Open(c), want)
			})
		}
	}
}
