package bestfit_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/strategy/bestfit"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// randomTrace writes a trace of n events: allocations of sizes from 1 byte
// to 64 MiB (log-uniform, with a share of small and of 512-byte-edge sizes),
// each freed at a random later point, with a live count that drifts between
// a few and a few thousand.
func randomTrace(t testing.TB, seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 42))
	var buf bytes.Buffer
	w := traces.NewWriter(&buf, traces.ColOp, traces.ColID, traces.ColSize)
	type alloc struct {
		id   uint64
		size int64
	}
	var live []alloc
	var id uint64
	target := 100
	for i := range n {
		if i%1000 == 0 {
			target = 1 + r.IntN(3000)
		}
		if len(live) == 0 || len(live) < target && r.IntN(4) != 0 || len(live) >= target && r.IntN(4) == 0 {
			var size int64
			switch r.IntN(4) {
			case 0:
				size = 1 + r.Int64N(4096)
			case 1:
				size = 512*(1+r.Int64N(64)) + r.Int64N(3) - 1
			default:
				size = int64(math.Exp(r.Float64() * math.Log(64<<20)))
			}
			size = max(size, 1)
			id++
			live = append(live, alloc{id, size})
			require.NoError(t, w.Write(traces.Event{Op: traces.OpAlloc, ID: id, Size: size}))
			continue
		}
		k := r.IntN(len(live))
		a := live[k]
		live[k] = live[len(live)-1]
		live = live[:len(live)-1]
		require.NoError(t, w.Write(traces.Event{Op: traces.OpFree, ID: a.id, Size: a.size}))
	}
	for _, a := range live {
		require.NoError(t, w.Write(traces.Event{Op: traces.OpFree, ID: a.id, Size: a.size}))
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// roundedPeak computes from the trace alone the peak over time of the sum
// of round(size) over the live allocations.
func roundedPeak(t testing.TB, r traces.Reader, round func(int64) int64) int64 {
	events, err := traces.ReadAll(r)
	require.NoError(t, err)
	peak, end := replaytest.RoundedPeak(events, round)
	require.Zero(t, end, "every allocation is freed")
	return peak
}

// TestPeakAllocatedIsRoundedPeak is the acceptance rule of the strategy: on
// independent traces, the peak of allocated bytes a replay measures is the
// peak of live requests rounded to 512 bytes, max(512, roundup(size, 512)),
// with the default configuration; likewise with 256-byte rounding, under
// every growth policy.
func TestPeakAllocatedIsRoundedPeak(t *testing.T) {
	roundTo := func(round, minBlock int64) func(int64) int64 {
		return func(size int64) int64 { return max(minBlock, (size+round-1)/round*round) }
	}
	configs := []struct {
		c     bestfit.Config
		round func(int64) int64
	}{
		{bestfit.DefaultConfig(), roundTo(512, 512)},
		{bestfit.Config{Round: 256, MinBlock: 256, SplitThreshold: 256, Grow: bestfit.GrowDouble, Chunk: 2 << 20}, roundTo(256, 256)},
		{bestfit.Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: bestfit.GrowExact, Chunk: 1}, roundTo(512, 512)},
	}
	type trace struct {
		name string
		data []byte
	}
	var trs []trace
	n := 50000
	if testing.Short() {
		n = 5000
	}
	for seed := uint64(1); seed <= 3; seed++ {
		trs = append(trs,
			trace{fmt.Sprintf("rand-%d", seed), randomTrace(t, seed, n)},
			trace{fmt.Sprintf("gen-random-%d", seed), replaytest.RandomTrace(t, gen.Options{Seed: seed, Events: int64(n)})})
	}
	for _, tr := range trs {
		for _, cfg := range configs {
			spec := fmt.Sprintf("round=%d,grow=%s", cfg.c.Round, cfg.c.Grow)
			t.Run(tr.name+"/"+spec, func(t *testing.T) {
				want := roundedPeak(t, replaytest.Reader(t, tr.name, tr.data), cfg.round)
				replaytest.ReplayPeak(t, replaytest.Reader(t, tr.name, tr.data), strategy.Open(cfg.c), want)
			})
		}
	}
}
