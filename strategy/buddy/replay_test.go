package buddy_test

import (
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/strategy/buddy"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// roundTo returns the size of the block of a request, worked out
// independently of the strategy: rounded up to a power of two of at least
// minBlock bytes.
func roundTo(minBlock int64) func(int64) int64 {
	return func(size int64) int64 {
		if size <= minBlock {
			return minBlock
		}
		return 1 << bits.Len64(uint64(size-1))
	}
}

// The acceptance rule: replayed through the simulator, buddy's peak
// allocated bytes are the peak of the live requests rounded to powers of two
// (at least 512 bytes).
func TestReplayPeakAllocatedIsRoundedPeak(t *testing.T) {
	events := 20000
	if testing.Short() {
		events = 4000
	}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			evs := replaytest.RandomEvents(t, gen.Options{Seed: seed, Events: int64(events), MaxLive: 200 * int(seed)})
			peak, _ := replaytest.RoundedPeak(evs, roundTo(512))
			res := replaytest.ReplayPeak(t, traces.NewSliceReader("random", evs), strategy.Open(buddy.DefaultConfig()), peak)
			assert.Equal(t, "buddy:min_block=512,arena=1073741824", res.Strategy.Spec)
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
			peak, _ := replaytest.RoundedPeak(evs, roundTo(c.MinBlock))
			replaytest.ReplayPeak(t, traces.NewSliceReader("edges", evs), strategy.Open(c), peak)
		})
	}
}
