package sim_test

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/traces"
)

// TestConfigStart: the recorded state a trace starts from is a value the
// engine is given. A snapshot's events held in memory, replayed with the
// snapshot reader's start state in Config.Start, replay as the snapshot's
// reader does; without it, from nothing.
func TestConfigStart(t *testing.T) {
	const a, l uint64 = 0x7f0000000000, 0x7f0001000000
	ent := func(act snapshot.Action, addr uint64, size int64) snapshot.TraceEntry {
		return snapshot.TraceEntry{Action: act, Addr: addr, Size: size, TimeUS: snapshot.NoTime}
	}
	s := snapshot.New([]snapshot.Segment{
		{Address: a, TotalSize: 2 << 20, SegmentType: "small", Blocks: []snapshot.Block{
			{Address: a, Size: 512, RequestedSize: 300, State: snapshot.ActiveAllocated},
			{Address: a + 512, Size: 2<<20 - 512, State: snapshot.Inactive}}},
		{Address: l, TotalSize: 20 << 20, SegmentType: "large", Blocks: []snapshot.Block{
			{Address: l, Size: 5 << 20, RequestedSize: 5 << 20, State: snapshot.ActiveAllocated},
			{Address: l + 5<<20, Size: 15 << 20, State: snapshot.Inactive}}},
	}, []snapshot.TraceEntry{
		ent(snapshot.FreeRequested, a, 1000), ent(snapshot.FreeCompleted, a, 1000),
		ent(snapshot.Alloc, a, 300),
		ent(snapshot.SegmentAlloc, l, 20<<20), ent(snapshot.Alloc, l, 5<<20),
	})
	var buf bytes.Buffer
	require.NoError(t, snapshot.Write(&buf, s, snapshot.WriteOptions{}))
	open := func() traces.Reader {
		r, err := traces.NewReader(bytes.NewReader(buf.Bytes()), "t.pickle", traces.Options{})
		require.NoError(t, err)
		return r
	}
	c, err := pytorch.ParseConf("")
	require.NoError(t, err)
	cfg := sim.Config{Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(b, c) }, Strategy: "pytorch"}

	r := open()
	want, err := sim.Replay(r, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 1, want.StartSegments, "the small segment, restored")
	require.EqualValues(t, 1, want.DeviceMallocs, "the large segment")

	r = open()
	evs, err := traces.ReadAll(r)
	require.NoError(t, err)
	given := cfg
	given.Start = traces.StartOf(r)
	got, err := sim.Replay(traces.NewSliceReader("t.pickle", evs), given)
	require.NoError(t, err)
	// figures are those a start state decides: peak, start segments and
	// bytes, and device allocations.
	figures := func(r sim.Result) [4]int64 {
		return [4]int64{r.PeakReservedBytes, r.StartSegments, r.StartReservedBytes, r.DeviceMallocs}
	}
	assert.Equal(t, figures(want), figures(got))
	assert.Equal(t, want.Allocs, got.Allocs)

	// The same state built by hand, not by a reader: the snapshot's state
	// before its trace, whose two live blocks are the first two events.
	st, err := s.InitialState(0)
	require.NoError(t, err)
	hand := cfg
	hand.Start = &traces.Start{States: []*snapshot.State{st}, Initial: 2}
	made, err := sim.Replay(traces.NewSliceReader("t.pickle", evs), hand)
	require.NoError(t, err)
	assert.Equal(t, figures(want), figures(made))

	none, err := sim.Replay(traces.NewSliceReader("t.pickle", evs), cfg)
	require.NoError(t, err)
	assert.Zero(t, none.StartSegments, "no start state given: the start events are allocations of the trace")
}

// TestStartTooLarge: a device smaller than the start state restores only
// the segments that hold live blocks, and where even those do not fit, the
// replay fails for want of memory, in the same words whether its segment
// is expandable or not: the device, the bytes of those segments and the
// device's. A segment of 200 MiB whose first half is live needs all of it;
// an expandable one is cut after its live pages, 100 MiB, and the trace's
// block of 10 MiB then takes a page of 20 MiB more, so that it runs out of
// memory below 120 MiB and fits from there.
func TestStartTooLarge(t *testing.T) {
	c, err := pytorch.ParseConf("expandable_segments:True")
	require.NoError(t, err)
	replay := func(expandable bool, capacity int64) (sim.Result, error) {
		r, err := traces.NewReader(bytes.NewReader(replaytest.StartSnapshot(t, expandable)), "t.pickle", traces.Options{})
		require.NoError(t, err)
		return sim.Replay(r, sim.Config{Capacity: capacity, Strategy: "pytorch",
			Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(b, c) }})
	}
	fails := func(expandable bool, capacity, need int64) {
		t.Helper()
		want := fmt.Sprintf("t.pickle: pytorch: device 0: the start state's segments that hold live blocks need %d bytes (%s), more than the device's %d (%s): out of memory",
			need, gpualloc.FormatSize(need), capacity, gpualloc.FormatSize(capacity))
		_, err := replay(expandable, capacity)
		require.Error(t, err, "expandable %v, capacity %d", expandable, capacity)
		assert.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "expandable %v, capacity %d", expandable, capacity)
		assert.Equal(t, want, err.Error(), "expandable %v", expandable)
	}
	runs := func(expandable bool, capacity, start, ooms int64) {
		t.Helper()
		res, err := replay(expandable, capacity)
		require.NoError(t, err, "expandable %v, capacity %d", expandable, capacity)
		assert.Equal(t, ooms, res.OOMs, "expandable %v, capacity %d", expandable, capacity)
		assert.Equal(t, start, res.StartReservedBytes, "expandable %v, capacity %d", expandable, capacity)
	}
	for _, capacity := range []int64{20 << 20, 100 << 20, 180 << 20, 200<<20 - 1} {
		fails(false, capacity, 200<<20)
	}
	for _, capacity := range []int64{20 << 20, 100<<20 - 1} {
		fails(true, capacity, 100<<20)
	}
	runs(true, 100<<20, 100<<20, 1)
	runs(true, 120<<20-1, 100<<20, 1)
	runs(true, 120<<20, 100<<20, 0)
	runs(true, 200<<20-1, 100<<20, 0)
	for _, expandable := range []bool{false, true} {
		runs(expandable, 200<<20, 200<<20, 0)
	}
}

// TestStartCached: a start state of a live segment of 100 MiB and a wholly
// free one of 200 MiB is restored whole on a device that holds it; on a
// smaller one the free segment is cache the allocator releases, not
// restored, and the trace's block of 10 MiB takes a segment of its own:
// the replay fits from 110 MiB, runs out of memory below, and fails for
// want of memory below the live segment.
func TestStartCached(t *testing.T) {
	c, err := pytorch.ParseConf("")
	require.NoError(t, err)
	replay := func(capacity int64) (sim.Result, error) {
		r, err := traces.NewReader(bytes.NewReader(replaytest.CachedStartSnapshot(t)), "t.pickle", traces.Options{})
		require.NoError(t, err)
		return sim.Replay(r, sim.Config{Capacity: capacity, Strategy: "pytorch",
			Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(b, c) }})
	}
	for _, tc := range []struct {
		capacity, start, segs, ooms int64
	}{
		{300 << 20, 300 << 20, 2, 0},
		{300<<20 - 1, 100 << 20, 1, 0},
		{110 << 20, 100 << 20, 1, 0},
		{110<<20 - 1, 100 << 20, 1, 1},
		{100 << 20, 100 << 20, 1, 1},
	} {
		res, err := replay(tc.capacity)
		require.NoError(t, err, "capacity %d", tc.capacity)
		assert.Equal(t, tc.start, res.StartReservedBytes, "capacity %d", tc.capacity)
		assert.Equal(t, tc.segs, res.StartSegments, "capacity %d", tc.capacity)
		assert.Equal(t, tc.ooms, res.OOMs, "capacity %d", tc.capacity)
	}
	const capacity = 100<<20 - 1
	_, err = replay(capacity)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, fmt.Sprintf("t.pickle: pytorch: device 0: the start state's segments that hold live blocks need %d bytes (100 MiB), more than the device's %d (%s): out of memory",
		100<<20, capacity, gpualloc.FormatSize(capacity)), err.Error())
}

// TestStartTooLargeShared replays a real snapshot whose start state holds
// about 37 GiB in one expandable segment, 12.8 GiB of its pages up to the
// last live block, on devices below it: below those pages each fails for
// want of memory, naming their bytes and the device's; above them the
// replay runs, from those pages, and runs out of memory only where the
// trace's live memory does not fit.
func TestStartTooLargeShared(t *testing.T) {
	path := pk.SharedSnapshot(t, "../../shared/traces/pytorch", "xl_fwd_expandable.pickle")
	sel, err := gpualloc.Select("pytorch", func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	replay := func(capacity int64) (sim.Result, error) {
		r, err := traces.Open(path, traces.Options{})
		require.NoError(t, err)
		defer r.Close()
		return sim.Replay(r, sim.Config{Trace: "xl", Params: sel, Capacity: capacity, SeriesBuckets: -1})
	}
	for _, capacity := range []int64{1 << 30, 12 << 30} {
		_, err := replay(capacity)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "capacity %d", capacity)
		assert.Regexp(t, fmt.Sprintf(`^xl: pytorch[^:]*: device 0: the start state's segments that hold live blocks need \d+ bytes \(12.8 GiB\), more than the device's %d \(%s\): out of memory$`,
			capacity, regexp.QuoteMeta(gpualloc.FormatSize(capacity))), err.Error())
	}
	for _, capacity := range []int64{20 << 30, 36 << 30} {
		res, err := replay(capacity)
		require.NoError(t, err, "capacity %d", capacity)
		assert.Positive(t, res.OOMs, "capacity %d: the live memory does not fit", capacity)
		assert.Less(t, res.StartReservedBytes, int64(13<<30), "capacity %d: the live pages", capacity)
		assert.Greater(t, res.PeakReservedBytes, res.StartReservedBytes, "capacity %d", capacity)
	}
	res, err := replay(39734738944)
	require.NoError(t, err)
	assert.Zero(t, res.OOMs)
	assert.EqualValues(t, 39734738944, res.StartReservedBytes, "the whole state")
}
