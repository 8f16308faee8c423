package mincap_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/mincap"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// Small traces besides tiny: two devices, and a few hundred allocations of
// sizes from bytes to tens of MiB.
var twoDevices = `op,id,size,device
alloc,a,3000000,0
alloc,b,3000000,1
free,a,,0
alloc,c,3000000,0
free,b,,1
free,c,,0
`

// mixed is allocations of random sizes, each freed a few allocations
// later: what makes a cache fragment.
func mixed() string {
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString("op,id,size\n")
	var live []int
	for id := range 300 {
		size := int64(1) << rng.IntN(26)
		size += rng.Int64N(size)
		fmt.Fprintf(&b, "alloc,%d,%d\n", id, size)
		live = append(live, id)
		for len(live) > 0 && rng.IntN(3) > 0 {
			i := rng.IntN(len(live))
			fmt.Fprintf(&b, "free,%d,\n", live[i])
			live = append(live[:i], live[i+1:]...)
		}
	}
	for _, id := range live {
		fmt.Fprintf(&b, "free,%d,\n", id)
	}
	return b.String()
}

func read(t testing.TB, name, text string) []traces.Event {
	r, err := traces.NewReader(strings.NewReader(text), name, traces.Options{})
	require.NoError(t, err)
	events, err := traces.ReadAll(r)
	require.NoError(t, err)
	return events
}

func config(t testing.TB, trace, spec string) sim.Config {
	sel, err := gpualloc.Select(spec, nil)
	require.NoError(t, err)
	return sim.Config{Trace: trace, Params: sel, SeriesBuckets: -1}
}

func replayAt(t testing.TB, events []traces.Event, cfg sim.Config, capacity int64) sim.Result {
	cfg.Capacity = capacity
	res, err := sim.Replay(traces.NewSliceReader(cfg.Trace, events), cfg)
	require.NoError(t, err)
	return res
}

// TestBothSides searches every built-in strategy's minimum capacity on
// each trace, and replays at it, where there must be no OOM, and 1 MiB
// below, where there must be one (unless that is below the lower bound).
func TestBothSides(t *testing.T) {
	for _, tr := range []struct{ name, text string }{{"tiny", tiny}, {"twodev", twoDevices}, {"mixed", mixed()}} {
		events := read(t, tr.name, tr.text)
		for _, name := range gpualloc.Names() {
			cfg := config(t, tr.name, name)
			from := replayAt(t, events, cfg, 0)
			c, err := mincap.Search(context.Background(), events, cfg, &from)
			require.NoError(t, err, "%s %s", tr.name, name)
			assert.Zero(t, c%(1<<20), "%s %s: %d is not a multiple of 1 MiB", tr.name, name, c)
			assert.Zero(t, replayAt(t, events, cfg, c).OOMs, "%s %s: OOM at %d", tr.name, name, c)
			var need int64
			for _, d := range from.Devices {
				need = max(need, d.PeakRequestedBytes)
			}
			assert.GreaterOrEqual(t, c, need, "%s %s: below the lower bound", tr.name, name)
			if c-1<<20 >= need {
				assert.Positive(t, replayAt(t, events, cfg, c-1<<20).OOMs, "%s %s: no OOM at %d - 1 MiB", tr.name, name, c)
			}
		}
	}
}

// TestScan: for strategies whose OOMs follow the capacity, the search
// finds what trying every MiB from the lower bound up finds.
func TestScan(t *testing.T) {
	events := read(t, "mixed", mixed())
	for _, spec := range []string{"unpooled", "bestfit", "pytorch", "pytorch:expandable_segments=true"} {
		cfg := config(t, "mixed", spec)
		c, err := mincap.Search(context.Background(), events, cfg, nil)
		require.NoError(t, err, spec)
		from := replayAt(t, events, cfg, 0)
		scan := (from.PeakRequestedBytes + 1<<20 - 1) &^ (1<<20 - 1)
		for replayAt(t, events, cfg, scan).OOMs > 0 {
			scan += 1 << 20
		}
		assert.Equal(t, scan, c, spec)
	}
}

// TestFrom: the replay Search is given and the one it makes itself start
// the same search.
func TestFrom(t *testing.T) {
	events := read(t, "tiny", tiny)
	cfg := config(t, "tiny", "naive")
	from := replayAt(t, events, cfg, 0)
	given, err := mincap.Search(context.Background(), events, cfg, &from)
	require.NoError(t, err)
	made, err := mincap.Search(context.Background(), events, cfg, nil)
	require.NoError(t, err)
	assert.Equal(t, given, made)
}

func TestCanceled(t *testing.T) {
	events := read(t, "mixed", mixed())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := mincap.Search(ctx, events, config(t, "mixed", "bestfit"), nil)
	assert.ErrorIs(t, err, context.Canceled)
}

// TestRecordsNoSnapshot: the search's replays do not call the snapshot sink
// of the replay they search for, which would otherwise end up holding the
// last probe (an OOM 1 MiB below the answer) instead of the caller's replay.
func TestRecordsNoSnapshot(t *testing.T) {
	events := read(t, "mixed", mixed())
	cfg := config(t, "mixed", "bestfit")
	calls := 0
	cfg.Snapshot = func(*snapshot.Snapshot) error { calls++; return nil }
	_, err := mincap.Search(context.Background(), events, cfg, nil)
	require.NoError(t, err)
	assert.Zero(t, calls)
}

// capsReader reads events with each device of the capacity caps gives it.
type capsReader struct {
	*traces.SliceReader
	caps func(int) int64
}

func (r capsReader) DeviceCapacity(d int) int64 { return r.caps(d) }

// TestSearchDevice searches each device of a trace of two apart, the other
// at 80 GiB, and replays at the answer, where the device has no OOM, and 1
// MiB below, where it has one (unless that is below its lower bound); the
// devices' figures are their own, not their sum.
func TestSearchDevice(t *testing.T) {
	events := read(t, "twodev", twoDevices)
	for _, name := range gpualloc.Names() {
		cfg := config(t, "twodev", name)
		from := replayAt(t, events, cfg, 0)
		require.Len(t, from.Devices, 2)
		all, err := mincap.Search(context.Background(), events, cfg, &from)
		require.NoError(t, err, name)
		var most int64
		for _, dr := range from.Devices {
			d := dr.Device
			c, err := mincap.SearchDevice(context.Background(), events, cfg, d, mincap.Options{From: &from})
			require.NoError(t, err, "%s device %d", name, d)
			most = max(most, c)
			ooms := func(c int64) int64 {
				caps := func(dev int) int64 {
					if dev == d {
						return c
					}
					return 80 << 30
				}
				res, err := sim.Replay(capsReader{traces.NewSliceReader("twodev", events), caps}, cfg)
				require.NoError(t, err)
				for _, x := range res.Devices {
					if x.Device == d {
						return x.OOMs
					}
				}
				return 0
			}
			assert.Zero(t, ooms(c), "%s device %d: OOM at %d", name, d, c)
			if c-1<<20 >= dr.PeakRequestedBytes {
				assert.Positive(t, ooms(c-1<<20), "%s device %d: no OOM at %d - 1 MiB", name, d, c)
			}
		}
		assert.LessOrEqual(t, all, most, "%s: every device of the largest device's figure fits", name)
	}
}

// TestStartState searches the capacity of snapshots whose start state a
// small device cannot hold: a device below a state restores only the
// segments that hold live blocks, so the answer is what the live memory
// needs, as the replay at --capacity finds it (see sim's TestStartTooLarge
// and TestStartCached): a segment of 200 MiB half live needs all of it, an
// expandable one its live pages and a page more for the trace's block, and
// a state with a wholly free segment only its live one and the block's.
func TestStartState(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snapshot []byte
		spec     string
		want     int64
	}{
		{"segment", replaytest.StartSnapshot(t, false), "pytorch:expandable_segments=true", 200 << 20},
		{"expandable", replaytest.StartSnapshot(t, true), "pytorch:expandable_segments=true", 120 << 20},
		{"cached", replaytest.CachedStartSnapshot(t), "pytorch", 110 << 20},
	} {
		r, err := traces.NewReader(bytes.NewReader(tc.snapshot), "t.pickle", traces.Options{})
		require.NoError(t, err)
		events, err := traces.ReadAll(r)
		require.NoError(t, err)
		cfg := config(t, "t.pickle", tc.spec)
		cfg.Start = traces.StartOf(r)
		cfg.Capacity = 100 << 20
		c, err := mincap.Search(context.Background(), events, cfg, nil)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, c, tc.name)
		d, err := mincap.SearchDevice(context.Background(), events, cfg, 0, mincap.Options{})
		require.NoError(t, err, tc.name)
		assert.Equal(t, c, d, tc.name)
	}
}
