package sim_test

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
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
	s := &snapshot.Snapshot{
		Segments: []snapshot.Segment{
			{Address: a, TotalSize: 2 << 20, SegmentType: "small", Blocks: []snapshot.Block{
				{Address: a, Size: 512, RequestedSize: 300, State: snapshot.ActiveAllocated},
				{Address: a + 512, Size: 2<<20 - 512, State: snapshot.Inactive}}},
			{Address: l, TotalSize: 20 << 20, SegmentType: "large", Blocks: []snapshot.Block{
				{Address: l, Size: 5 << 20, RequestedSize: 5 << 20, State: snapshot.ActiveAllocated},
				{Address: l + 5<<20, Size: 15 << 20, State: snapshot.Inactive}}},
		},
		DeviceTraces: [][]snapshot.TraceEntry{{
			ent(snapshot.FreeRequested, a, 1000), ent(snapshot.FreeCompleted, a, 1000),
			ent(snapshot.Alloc, a, 300),
			ent(snapshot.SegmentAlloc, l, 20<<20), ent(snapshot.Alloc, l, 5<<20),
		}},
	}
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
	given.Start = r.(sim.StartReporter)
	got, err := sim.Replay(traces.NewSliceReader("t.pickle", evs), given)
	require.NoError(t, err)
	assert.Equal(t, want.PeakReservedBytes, got.PeakReservedBytes)
	assert.Equal(t, want.StartSegments, got.StartSegments)
	assert.Equal(t, want.StartReservedBytes, got.StartReservedBytes)
	assert.Equal(t, want.DeviceMallocs, got.DeviceMallocs)
	assert.Equal(t, want.Allocs, got.Allocs)

	none, err := sim.Replay(traces.NewSliceReader("t.pickle", evs), cfg)
	require.NoError(t, err)
	assert.Zero(t, none.StartSegments, "no start state given: the start events are allocations of the trace")
}

// TestStartTooLarge: a start state that the device cannot hold fails the
// replay for want of memory, in the same words whether its segment is
// expandable or not: the device, the bytes the state needs and the
// device's. The range of an expandable segment is sized from the device,
// so that on a device well below the state the segment lies past it; on
// one a little below, its pages run out.
func TestStartTooLarge(t *testing.T) {
	c, err := pytorch.ParseConf("expandable_segments:True")
	require.NoError(t, err)
	replay := func(expandable bool, capacity int64) (sim.Result, error) {
		r, err := traces.NewReader(bytes.NewReader(replaytest.StartSnapshot(t, expandable)), "t.pickle", traces.Options{})
		require.NoError(t, err)
		return sim.Replay(r, sim.Config{Capacity: capacity, Strategy: "pytorch",
			Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(b, c) }})
	}
	for _, capacity := range []int64{20 << 20, 100 << 20, 180 << 20, 200<<20 - 1} {
		want := fmt.Sprintf("t.pickle: pytorch: device 0: the start state's segments need %d bytes (200 MiB), more than the device's %d (%s): out of memory",
			200<<20, capacity, gpualloc.FormatSize(capacity))
		for _, expandable := range []bool{false, true} {
			_, err := replay(expandable, capacity)
			require.Error(t, err, "expandable %v, capacity %d", expandable, capacity)
			assert.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "expandable %v, capacity %d", expandable, capacity)
			assert.Equal(t, want, err.Error(), "expandable %v", expandable)
		}
	}
	for _, expandable := range []bool{false, true} {
		res, err := replay(expandable, 200<<20)
		require.NoError(t, err, "expandable %v: the device holds the state", expandable)
		assert.Zero(t, res.OOMs)
		assert.EqualValues(t, 200<<20, res.StartReservedBytes, "expandable %v", expandable)
	}
}

// TestStartTooLargeShared replays a real snapshot whose start state holds
// about 37 GiB in one expandable segment on devices below it: each fails
// for want of memory, naming the bytes the state needs and the device's.
func TestStartTooLargeShared(t *testing.T) {
	const path = "../../shared/traces/pytorch/xl_fwd_expandable.pickle"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no shared snapshot: %v", err)
	}
	sel, err := gpualloc.Select("pytorch", func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	for _, capacity := range []int64{1 << 30, 20 << 30, 36 << 30} {
		r, err := traces.Open(path, traces.Options{})
		require.NoError(t, err)
		_, err = sim.Replay(r, sim.Config{Trace: "xl", Params: sel, Capacity: capacity, SeriesBuckets: -1})
		r.Close()
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "capacity %d", capacity)
		assert.Regexp(t, fmt.Sprintf(`^xl: pytorch[^:]*: device 0: the start state's segments need \d+ bytes \(37.0 GiB\), more than the device's %d \(%s\): out of memory$`,
			capacity, regexp.QuoteMeta(gpualloc.FormatSize(capacity))), err.Error())
	}
}
