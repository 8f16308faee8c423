package sim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// replaySnapshot replays tb with cfg and returns the snapshot it records.
func replaySnapshot(t *testing.T, tb *traceBuilder, cfg Config) (*snapshot.Snapshot, Result) {
	t.Helper()
	var got *snapshot.Snapshot
	cfg.Snapshot = func(s *snapshot.Snapshot) error { got = s; return nil }
	res, err := Replay(tb.reader(), cfg)
	require.NoError(t, err)
	require.NotNil(t, got)
	return got, res
}

func TestSnapshotRecordsDeviceCalls(t *testing.T) {
	// Every alloc of exactAlloc is a device allocation, every free a device
	// free: each segment holds one block, and the frees come after
	// free_completed.
	tb := newTrace().on(0, 7).alloc(1, 1000).on(1, 9).alloc(2, 3000).free(1).on(0, 7).alloc(3, 600)
	s, _ := replaySnapshot(t, tb, Config{Open: openExact, Strategy: "exact"})
	d0, d1 := virtual.Base, virtual.Base+virtual.Spacing
	e := func(a snapshot.Action, addr uint64, size int64, stream uint64, time int64) snapshot.TraceEntry {
		return snapshot.TraceEntry{Action: a, Addr: addr, Size: size, Stream: stream, TimeUS: time}
	}
	require.Equal(t, 2, s.NumTraces())
	assert.Equal(t, [][]snapshot.TraceEntry{{
		e(snapshot.SegmentAlloc, d0, 1000, 7, 0), e(snapshot.Alloc, d0, 1000, 7, 0),
		e(snapshot.FreeRequested, d0, 1000, 7, 20), e(snapshot.FreeCompleted, d0, 1000, 7, 20), e(snapshot.SegmentFree, d0, 1000, 7, 20),
		e(snapshot.SegmentAlloc, d0+1024, 600, 7, 30), e(snapshot.Alloc, d0+1024, 600, 7, 30),
	}, {
		e(snapshot.SegmentAlloc, d1, 3000, 9, 10), e(snapshot.Alloc, d1, 3000, 9, 10),
	}}, [][]snapshot.TraceEntry{s.Trace(0).Entries(), s.Trace(1).Entries()})
	assert.Equal(t, []snapshot.Segment{
		{Device: 0, Address: d0 + 1024, TotalSize: 600, AllocatedSize: 600, ActiveSize: 600, RequestedSize: 600, Stream: 7, SegmentType: "small",
			Blocks: []snapshot.Block{{Address: d0 + 1024, Size: 600, RequestedSize: 600, State: snapshot.ActiveAllocated}}},
		{Device: 1, Address: d1, TotalSize: 3000, AllocatedSize: 3000, ActiveSize: 3000, RequestedSize: 3000, Stream: 9, SegmentType: "small",
			Blocks: []snapshot.Block{{Address: d1, Size: 3000, RequestedSize: 3000, State: snapshot.ActiveAllocated}}},
	}, s.Segments)
	want := snapshot.DefaultSettings()
	want.Other = map[string]any{"strategy": "exact", "device_memory": []any{int64(virtual.DefaultCapacity), int64(virtual.DefaultCapacity)}}
	assert.Equal(t, &want, s.AllocatorSettings)
}

func TestSnapshotCacheOOMAndRelease(t *testing.T) {
	// cacheAlloc rounds to powers of two and keeps freed blocks; at a full
	// device it releases them all and retries; a request beyond the device
	// fails.
	tb := newTrace().alloc(1, 1500).free(1).alloc(2, 3000).alloc(3, 1<<20).free(3).alloc(4, 5000)
	s, res := replaySnapshot(t, tb, Config{Open: openCache, Strategy: "cache", Capacity: 8 << 10})
	require.EqualValues(t, 2, res.OOMs)
	var actions []snapshot.Action
	for _, e := range s.Trace(0).All() {
		actions = append(actions, e.Action)
	}
	assert.Equal(t, []snapshot.Action{
		snapshot.SegmentAlloc, snapshot.Alloc, snapshot.FreeRequested, snapshot.FreeCompleted, // 2 KiB
		snapshot.SegmentAlloc, snapshot.Alloc, // 4 KiB
		snapshot.SegmentFree, snapshot.OutOfMemory, // the 1 MiB: the cached 2 KiB go back, to no avail
		snapshot.OutOfMemory, // 8 KiB: 4 KiB are in use
	}, actions)
	oom := s.Trace(0).At(7)
	assert.Equal(t, snapshot.TraceEntry{Action: snapshot.OutOfMemory, Addr: 4 << 10, Size: 1 << 20, TimeUS: 30}, oom, "device_free after the release")
	require.Len(t, s.Segments, 1)
	assert.Equal(t, []snapshot.Block{{Address: s.Segments[0].Address, Size: 4096, RequestedSize: 3000, State: snapshot.ActiveAllocated}}, s.Segments[0].Blocks)
}

func TestSnapshotEntries(t *testing.T) {
	tb := newTrace()
	for i := range uint64(20) {
		tb.alloc(i, 100*int64(i+1))
	}
	for i := range uint64(15) {
		tb.free(i)
	}
	all, _ := replaySnapshot(t, tb, Config{Open: openExact})
	for _, n := range []int{1, 7, 70, 100} {
		s, _ := replaySnapshot(t, tb, Config{Open: openExact, SnapshotEntries: n})
		want := all.Trace(0).Entries()[max(0, all.Trace(0).Len()-n):]
		assert.Equal(t, want, s.Trace(0).Entries(), "entries %d", n)
		assert.Equal(t, all.Segments, s.Segments, "entries %d", n)
	}
}

func TestSnapshotCategories(t *testing.T) {
	tb := newTrace().as(gpualloc.CategoryParameter).alloc(1, 100).as(gpualloc.CategoryActivation).alloc(2, 200).free(2)
	s, _ := replaySnapshot(t, tb, Config{Open: openExact})
	var cats []string
	for _, e := range s.Trace(0).All() {
		cats = append(cats, e.Category)
	}
	assert.Equal(t, []string{"unknown", "parameter", "unknown", "activation", "activation", "activation", "unknown"}, cats)
	assert.Equal(t, "parameter", s.Segments[0].Blocks[0].Category)

	// A window without an "unknown" entry ends with a snapshot entry that
	// has one, within the window's size.
	s, _ = replaySnapshot(t, tb, Config{Open: openExact, SnapshotEntries: 2})
	assert.Equal(t, []snapshot.TraceEntry{
		{Action: snapshot.FreeCompleted, Addr: s.Trace(0).At(0).Addr, Size: 200, TimeUS: 20, Category: "activation"},
		{Action: snapshot.SegmentFree, Addr: s.Trace(0).At(0).Addr, Size: 200, TimeUS: 20, Category: "unknown"},
	}, s.Trace(0).Entries())
	tb = newTrace().as(gpualloc.CategoryParameter).alloc(1, 100).as(gpualloc.CategoryActivation).alloc(2, 200)
	s, _ = replaySnapshot(t, tb, Config{Open: openExact, SnapshotEntries: 1})
	assert.Equal(t, []snapshot.TraceEntry{{Action: snapshot.TakeSnapshot, TimeUS: 10, Category: "unknown"}}, s.Trace(0).Entries())
}

func TestSnapshotOffByDefault(t *testing.T) {
	e, err := newEngine(smallTrace().reader(), Config{Open: openExact})
	require.NoError(t, err)
	assert.Nil(t, e.rec)
}

// BenchmarkReplaySnapshot measures what recording a snapshot costs the
// replay of BenchmarkReplay's trace cut to 1M events, with exactAlloc
// (every event a device call, so three to four entries an event pair):
// "off" records nothing, "ring" keeps the last 100,000 entries, "all"
// every entry, the snapshot built in memory (Config.Snapshot), "stream"
// every entry spilled to a temporary file and the pickle written as it is
// read back (Config.SnapshotStream, as --snapshot does), to a counter of
// its bytes. One op is a replay with the snapshot built or written;
// "B/event" is the pickle's bytes per event replayed.
func BenchmarkReplaySnapshot(b *testing.B) {
	base := benchTrace()
	base.reps = 10 // 1M events
	for _, bc := range []struct {
		name    string
		on      bool
		entries int
		stream  bool
	}{{"off", false, 0, false}, {"ring", true, 100_000, false}, {"all", true, 0, false}, {"stream", true, 0, true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var events int64
			var out countWriter
			cfg := Config{Open: openExact, SeriesBuckets: -1, SnapshotEntries: bc.entries, SnapshotTemp: b.TempDir()}
			switch {
			case bc.stream:
				cfg.SnapshotStream = func(s *snapshot.Stream) error { return snapshot.WriteStream(&out, s, snapshot.WriteOptions{}) }
			case bc.on:
				cfg.Snapshot = func(s *snapshot.Snapshot) error {
					return snapshot.Write(&out, s, snapshot.WriteOptions{})
				}
			}
			for b.Loop() {
				r := *base
				res, err := Replay(&r, cfg)
				if err != nil {
					b.Fatal(err)
				}
				events += res.Events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			b.ReportMetric(float64(out.n)/float64(events), "B/event")
		})
	}
}

// A countWriter counts the bytes written to it.
type countWriter struct{ n int64 }

func (w *countWriter) Write(b []byte) (int, error) { w.n += int64(len(b)); return len(b), nil }

// TestSnapshotMarksReleases: the device frees of a release that the trace
// asks for carry the frame of torch.cuda.empty_cache, as PyTorch records
// them, and read back as such; those the strategy makes to make room at a
// full device carry none. A snapshot without such a release records no
// frames.
func TestSnapshotMarksReleases(t *testing.T) {
	tb := newTrace().alloc(1, 1500).free(1).release().alloc(2, 1500).free(2).alloc(3, 3000).alloc(4, 1<<20)
	s, _ := replaySnapshot(t, tb, Config{Open: openCache, Strategy: "cache", Capacity: 8 << 10})
	var frees []snapshot.TraceEntry
	for _, e := range s.Trace(0).All() {
		if e.Action == snapshot.SegmentFree {
			frees = append(frees, e)
		}
	}
	require.Len(t, frees, 2)
	assert.True(t, frees[0].EmptyCache, "the release's")
	assert.Equal(t, []snapshot.Frame{{Name: "empty_cache", Filename: "torch/cuda/memory.py"}}, s.StackFrames(frees[0].Stack))
	assert.False(t, frees[1].EmptyCache, "the strategy's own, at a full device")
	assert.Zero(t, frees[1].Stack)

	var buf bytes.Buffer
	require.NoError(t, snapshot.Write(&buf, s, snapshot.WriteOptions{}))
	back, err := snapshot.Read(&buf, "t.pickle")
	require.NoError(t, err)
	var marked []bool
	for _, e := range back.Trace(0).All() {
		if e.Action == snapshot.SegmentFree {
			marked = append(marked, e.EmptyCache)
		}
	}
	assert.Equal(t, []bool{true, false}, marked)

	s, _ = replaySnapshot(t, newTrace().alloc(1, 1500).free(1).alloc(2, 3000), Config{Open: openCache, Strategy: "cache", Capacity: 8 << 10})
	assert.Nil(t, s.Frames)
	assert.Nil(t, s.Stacks)
}

// TestSnapshotKeepsReleaser checks that the recording wrapper of an
// allocator is a gpualloc.Releaser exactly when the allocator is, and that
// a release's device frees are recorded.
func TestSnapshotKeepsReleaser(t *testing.T) {
	var got *snapshot.Snapshot
	cfg := Config{Open: openCache, Snapshot: func(s *snapshot.Snapshot) error { got = s; return nil }}
	e, err := newEngine(smallTrace().reader(), cfg)
	require.NoError(t, err)
	d, err := e.device(0)
	require.NoError(t, err)
	rel, ok := d.alloc.(gpualloc.Releaser)
	require.True(t, ok, "cacheAlloc is a Releaser")
	b, err := d.cat.AllocCategory(1000, 3, gpualloc.CategoryUnknown)
	require.NoError(t, err)
	require.NoError(t, d.alloc.Free(b))
	require.NoError(t, rel.ReleaseAll())
	require.NoError(t, e.snapshot())
	var actions []snapshot.Action
	for _, x := range got.Trace(0).All() {
		actions = append(actions, x.Action)
	}
	assert.Equal(t, []snapshot.Action{snapshot.SegmentAlloc, snapshot.Alloc, snapshot.FreeRequested, snapshot.FreeCompleted, snapshot.SegmentFree}, actions)
	assert.EqualValues(t, 3, got.Trace(0).At(4).Stream, "the segment's stream")
	assert.Empty(t, got.Segments)

	e, err = newEngine(smallTrace().reader(), Config{Open: openExact, Snapshot: cfg.Snapshot})
	require.NoError(t, err)
	d, err = e.device(0)
	require.NoError(t, err)
	_, ok = d.alloc.(gpualloc.Releaser)
	assert.False(t, ok, "exactAlloc is no Releaser")
}

// TestSnapshotBatchReader records a replay of a reader that hands out its
// events in batches: each entry has the time of its own event, and the
// replay the same result as without a snapshot.
func TestSnapshotBatchReader(t *testing.T) {
	tb := newTrace().alloc(1, 1000).alloc(2, 3000).free(1).alloc(3, 600).free(2).free(3)
	r := traces.NewSliceReader("batch", tb.events)
	var _ traces.BatchReader = r
	var s *snapshot.Snapshot
	res, err := Replay(r, Config{Open: openExact, SeriesBuckets: -1, Snapshot: func(x *snapshot.Snapshot) error { s = x; return nil }})
	require.NoError(t, err)
	var times []int64
	for _, e := range s.Trace(0).All() {
		if e.Action == snapshot.Alloc || e.Action == snapshot.FreeCompleted {
			times = append(times, e.TimeUS)
		}
	}
	assert.Equal(t, []int64{0, 10, 20, 30, 40, 50}, times)
	r.Reset()
	plain, err := Replay(r, Config{Open: openExact, SeriesBuckets: -1})
	require.NoError(t, err)
	res.ElapsedNS, res.EventsPerSec = plain.ElapsedNS, plain.EventsPerSec
	assert.Equal(t, plain, res)
}

func TestSnapshotSaysTimesAreIndexes(t *testing.T) {
	tb := newTrace().on(0, 7).alloc(1, 1000).alloc(2, 3000).free(1)
	s, _ := replaySnapshot(t, tb, Config{Open: openExact, Strategy: "exact"})
	assert.NotContains(t, s.AllocatorSettings.Other, timeSourceKey, "the trace has times")
	for i := range tb.events {
		tb.events[i].TimeUS = traces.NoTime
	}
	s, _ = replaySnapshot(t, tb, Config{Open: openExact, Strategy: "exact"})
	assert.Equal(t, indexTimeSource, s.AllocatorSettings.Other[timeSourceKey])
	assert.Equal(t, "exact", s.AllocatorSettings.Other["strategy"])
	var times []int64
	for _, e := range s.Trace(0).Entries() {
		times = append(times, e.TimeUS)
	}
	assert.Equal(t, []int64{0, 0, 1, 1, 2, 2, 2}, times, "each entry's event index")
}
