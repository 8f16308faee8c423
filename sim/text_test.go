package sim_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	_ "github.com/gpualloc/gpualloc/strategy/naive"
	"github.com/gpualloc/gpualloc/traces"
)

// Replays of traces written as text and read by package traces: what the
// reader tells carried into the result, and the naive strategy on traces
// worked out by hand.

// readText returns a reader of text, a trace named name.
func readText(t *testing.T, name, text string, opts traces.Options) traces.Reader {
	t.Helper()
	r, err := traces.NewReader(strings.NewReader(text), name, opts)
	require.NoError(t, err)
	return r
}

// replayText replays text, a trace named hand.csv, with cfg.
func replayText(t *testing.T, text string, cfg sim.Config) sim.Result {
	t.Helper()
	res, err := sim.Replay(readText(t, "hand.csv", text, traces.Options{}), cfg)
	require.NoError(t, err)
	return res
}

const badTrace = `op,id,size,device
alloc,1,4096,0
free,7,,0
alloc,2,100,1
free,1,,0
free,2,,1
`

func TestReplayCSVReader(t *testing.T) {
	cfg := sim.Config{
		Strategy: "pages",
		Open:     func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pages{b}, nil },
	}

	res, err := sim.Replay(readText(t, "bad.csv", badTrace, traces.Options{Lenient: true}), cfg)
	require.NoError(t, err)
	assert.Equal(t, "bad.csv", res.Trace, "the reader's name")
	assert.Equal(t, int64(1), res.Skipped, "the lenient reader's count")
	assert.Equal(t, int64(4), res.Events)
	assert.Equal(t, int64(4096+4096), res.PeakReservedBytes)
	require.Len(t, res.Devices, 2)

	res, err = sim.Replay(readText(t, "bad.csv", badTrace, traces.Options{}), cfg)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "bad.csv:3: "), "the reader's error as it is: %v", err)
	assert.Equal(t, int64(1), res.Events)
}

func naiveParams(t *testing.T) *gpualloc.Params {
	t.Helper()
	p, err := gpualloc.Resolve(gpualloc.Spec{Name: "naive"}, nil)
	require.NoError(t, err)
	return p
}

func TestReplayNaive(t *testing.T) {
	// Naive rounds to 4 KiB pages, and above 2 MiB to multiples of 2 MiB:
	// 1000 and 4000 -> 4096, 5,000,000 and 6,000,000 -> 6 MiB,
	// 3,000,000 -> 4 MiB. Allocs 3 and 5 reuse the blocks of 1 and 2.
	res := replayText(t, `op,id,size
alloc,1,1000
alloc,2,5000000
free,1,
alloc,3,4000
alloc,4,3000000
free,2,
alloc,5,6000000
free,3,
free,4,
free,5,
`, sim.Config{Params: naiveParams(t), Verify: true})

	assert.Equal(t, "hand.csv", res.Trace)
	assert.Equal(t, "naive:page=4096,large_round=2097152,reserve=5", res.Strategy.Spec)
	assert.Equal(t, int64(10), res.Events)
	assert.Equal(t, int64(5), res.Allocs)
	assert.Equal(t, int64(5), res.Frees)
	assert.Equal(t, int64(4000+3000000+6000000), res.PeakRequestedBytes)
	assert.Equal(t, int64(4096+4<<20+6<<20), res.PeakAllocatedBytes)
	assert.Equal(t, int64(4096+4<<20+6<<20), res.PeakReservedBytes)
	assert.Equal(t, int64(3), res.DeviceMallocs)
	assert.Zero(t, res.DeviceFrees)
	assert.Equal(t, int64(4096+4<<20+6<<20), res.DeviceMallocBytes)
	assert.Equal(t, int64(2), res.CacheHits)
	assert.Zero(t, res.OOMs)
	assert.InDelta(t, 10489856.0/9004000, res.Overhead, 1e-15)
	assert.InDelta(t, 1-9004000.0/10489856, res.Fragmentation, 1e-15)
}

func TestReplayNaiveOOM(t *testing.T) {
	// A device of three pages. Alloc 3 releases the cached page before it
	// goes to the device; alloc 4 does not fit even after release and retry,
	// and its free is skipped.
	res := replayText(t, `op,id,size
alloc,1,4096
alloc,2,4096
free,1,
alloc,3,8000
alloc,4,4096
free,4,
free,2,
free,3,
`, sim.Config{Params: naiveParams(t), Capacity: 3 * 4096, Verify: true})

	assert.Equal(t, int64(8), res.Events)
	assert.Equal(t, int64(1), res.OOMs)
	assert.Equal(t, int64(3), res.DeviceMallocs)
	assert.Equal(t, int64(1), res.DeviceFrees)
	assert.Equal(t, int64(3*4096), res.PeakReservedBytes)
	assert.Equal(t, int64(4096+8000+4096), res.PeakRequestedBytes, "the lower bound counts the failed alloc")
	assert.Zero(t, res.CacheHits)
	require.Len(t, res.Devices, 1)
	require.NotNil(t, res.Devices[0].Stats)
	assert.Equal(t, int64(1), res.Devices[0].Stats.OOMs)
}
