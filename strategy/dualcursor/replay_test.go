package dualcursor_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/strategy/dualcursor"
	"github.com/gpualloc/gpualloc/traces"
)

// TestReplayBundled replays every bundled trace, with the engine's checks
// on, under the default configuration and MindSpore's own (one block of
// the whole device): no allocation fails, and the peak of allocated bytes
// is the peak of the live requests each rounded to (size + 32) up to 512,
// since every block has exactly its rounded size.
func TestReplayBundled(t *testing.T) {
	for _, b := range traces.Bundled() {
		events := replaytest.BundledEvents(t, b.Name)
		peak, _ := replaytest.RoundedPeak(events, dualcursor.DefaultConfig().RoundSize)
		for _, c := range []dualcursor.Config{
			dualcursor.DefaultConfig(),
			strategy.With(func(c *dualcursor.Config) { c.Block, c.Grow = 0, dualcursor.GrowNone }),
		} {
			t.Run(b.Name+"/block="+map[bool]string{true: "0", false: "1GiB"}[c.Block == 0], func(t *testing.T) {
				res := replaytest.ReplayPeak(t, traces.NewSliceReader(b.Name, events), strategy.Open(c), peak)
				if c.Block == 0 {
					assert.Equal(t, virtual.DefaultCapacity, res.PeakReservedBytes, "the whole device")
					assert.Equal(t, int64(1), res.DeviceMallocs)
				}
			})
		}
	}
}

// TestCategoriesMatter replays the bundled training trace with its
// categories and with them stripped: with categories, the weights and the
// optimizer state go static and the rest dynamic; without, the unknown rule
// decides. Both replays are valid; the test shows the strategy reads the
// category column (the two layouts differ) and that neither runs out of
// memory.
func TestCategoriesMatter(t *testing.T) {
	events := replaytest.BundledEvents(t, "training")
	var cats int
	plain := make([]traces.Event, len(events))
	for i, ev := range events {
		if ev.Category != gpualloc.CategoryUnknown {
			cats++
		}
		plain[i] = ev
		plain[i].Category = gpualloc.CategoryUnknown
	}
	require.Equal(t, len(events), cats, "every event of the bundled training trace has a category")
	var addrs [2][]uint64
	for i, evs := range [][]traces.Event{events, plain} {
		var p *dualcursor.Pool
		open := func(be gpualloc.Backend) (gpualloc.Allocator, error) {
			var err error
			p, err = dualcursor.New(be, dualcursor.DefaultConfig())
			return &recorder{Pool: p, addrs: &addrs[i]}, err
		}
		res, err := sim.Replay(traces.NewSliceReader("training", evs), sim.Config{Open: open, SeriesBuckets: -1, Verify: true})
		require.NoError(t, err)
		assert.Zero(t, res.OOMs)
	}
	assert.NotEqual(t, addrs[0], addrs[1])
}

// recorder is a Pool that records the address of every block it hands out.
type recorder struct {
	*dualcursor.Pool
	addrs *[]uint64
}

func (r *recorder) AllocCategory(size int64, stream uint64, cat gpualloc.Category) (gpualloc.Block, error) {
	b, err := r.Pool.AllocCategory(size, stream, cat)
	*r.addrs = append(*r.addrs, b.Addr)
	return b, err
}
