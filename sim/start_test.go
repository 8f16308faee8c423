package sim_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
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
