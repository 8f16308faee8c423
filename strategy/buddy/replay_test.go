package buddy_test

import (
	"bytes"
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/buddy"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// generate returns the events of gen's "random" workload.
func generate(opts gen.Options) ([]traces.Event, error) {
	var buf bytes.Buffer
	w := traces.NewWriter(&buf, gen.Columns()...)
	if err := gen.Generate(w, "random", opts); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	r, err := traces.NewReader(&buf, "random", traces.Options{})
	if err != nil {
		return nil, err
	}
	return traces.ReadAll(r)
}

// roundedPeak computes, independently of the strategy, the peak over the
// trace of the live requests' sizes each rounded up to a power of two of at
// least minBlock bytes.
func roundedPeak(events []traces.Event, minBlock int64) int64 {
	round := func(size int64) int64 {
		if size <= minBlock {
			return minBlock
		}
		return 1 << bits.Len64(uint64(size-1))
	}
	live := map[uint64]int64{}
	var sum, peak int64
	for _, ev := range events {
		switch ev.Op {
		case traces.OpAlloc:
			live[ev.ID] = round(ev.Size)
			sum += live[ev.ID]
			peak = max(peak, sum)
		case traces.OpFree:
			sum -= live[ev.ID]
			delete(live, ev.ID)
		}
	}
	return peak
}

// The acceptance rule: replayed through the simulator, buddy's peak
// allocated bytes are the peak of the live requests rounded to powers of two
// (at least 512 bytes).
func TestReplayPeakAllocatedIsRoundedPeak(t *testing.T) {
	params, err := gpualloc.Resolve(gpualloc.Spec{Name: "buddy"}, nil)
	require.NoError(t, err)
	events := 20000
	if testing.Short() {
		events = 4000
	}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			evs, err := generate(gen.Options{Seed: seed, Events: int64(events), MaxLive: 200 * int(seed)})
			require.NoError(t, err)
			res, err := sim.Replay(traces.NewSliceReader("random", evs), sim.Config{Params: params, Verify: true})
			require.NoError(t, err)
			require.Zero(t, res.OOMs)
			assert.Equal(t, "buddy:min_block=512,arena=1073741824", res.Strategy.Spec)
			assert.Equal(t, roundedPeak(evs, 512), res.PeakAllocatedBytes)
			assert.GreaterOrEqual(t, res.PeakReservedBytes, res.PeakAllocatedBytes)
			t.Logf("peak requested %d, allocated %d (%.1f%% more), reserved %d",
				res.PeakRequestedBytes, res.PeakAllocatedBytes,
				100*(float64(res.PeakAllocatedBytes)/float64(res.PeakRequestedBytes)-1), res.PeakReservedBytes)
		})
	}
}

// The same with hand-made events on the edges of the rounding, a request
// larger than an arena, and another configuration.
func TestReplayPeakAllocatedEdges(t *testing.T) {
	sizes := []int64{1, 511, 512, 513, 1023, 1024, 1025, 4097, 100000, 5000000, 64 << 20, 64<<20 + 1, 3 << 30, 1 << 30, 1<<30 + 1}
	var evs []traces.Event
	for i, s := range sizes {
		evs = append(evs, traces.Event{Op: traces.OpAlloc, ID: uint64(i), Slot: int32(i), Size: s, TimeUS: traces.NoTime})
		if i%3 == 2 {
			evs = append(evs, traces.Event{Op: traces.OpFree, ID: uint64(i - 1), Slot: int32(i - 1), Size: sizes[i-1], TimeUS: traces.NoTime})
		}
	}
	for _, c := range []buddy.Config{buddy.DefaultConfig(), {MinBlock: 4096, Arena: 64 << 20}} {
		t.Run(fmt.Sprintf("min_block=%d,arena=%d", c.MinBlock, c.Arena), func(t *testing.T) {
			res, err := sim.Replay(traces.NewSliceReader("edges", evs), sim.Config{
				Open:   strategy.Open(c),
				Verify: true,
			})
			require.NoError(t, err)
			require.Zero(t, res.OOMs)
			assert.Equal(t, roundedPeak(evs, c.MinBlock), res.PeakAllocatedBytes)
		})
	}
}
