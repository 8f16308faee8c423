package snapshot_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

const (
	mib        = 1 << 20
	sA  uint64 = 0x10000000 // a small segment
	lA  uint64 = 0x20000000 // a large segment
	xA  uint64 = 0x30000000 // a small segment freed in the trace
	mA  uint64 = 0x40000000 // a large segment of device 1
)

func live(addr uint64, size, requested int64) snapshot.Block {
	return snapshot.Block{Address: addr, Size: size, RequestedSize: requested, State: snapshot.ActiveAllocated}
}

func free(addr uint64, size int64) snapshot.Block {
	return snapshot.Block{Address: addr, Size: size, State: snapshot.Inactive}
}

func seg(dev int, addr uint64, kind string, blocks ...snapshot.Block) snapshot.Segment {
	s := snapshot.Segment{Device: dev, Address: addr, Stream: 3, SegmentType: kind, Blocks: blocks}
	for _, b := range blocks {
		s.TotalSize += b.Size
		if b.Live() {
			s.AllocatedSize += b.Size
			s.RequestedSize += b.RequestedSize
		}
	}
	s.ActiveSize = s.AllocatedSize
	return s
}

func entry(a snapshot.Action, addr uint64, size int64) snapshot.TraceEntry {
	return snapshot.TraceEntry{Action: a, Addr: addr, Size: size, Stream: 3, TimeUS: snapshot.NoTime}
}

// rebuilt is a snapshot whose trace starts before a segment_alloc, an
// allocation and frees: InitialState undoes every kind of entry.
func rebuilt() *snapshot.Snapshot {
	return snapshot.New([]snapshot.Segment{
		seg(0, lA, "large", live(lA, 5*mib, 5*mib), free(lA+5*mib, 15*mib)),
		seg(0, sA, "small", live(sA, 512, 300), free(sA+512, 512), live(sA+1024, 1024, 800), free(sA+2048, 2*mib-2048)),
		seg(1, mA, "large", free(mA, 20*mib)),
	}, []snapshot.TraceEntry{
		entry(snapshot.FreeRequested, sA+1024, 600),
		entry(snapshot.FreeCompleted, sA+1024, 600),
		entry(snapshot.Alloc, sA+1024, 800),
		entry(snapshot.SegmentAlloc, lA, 20*mib),
		entry(snapshot.Alloc, lA, 5*mib),
		entry(snapshot.FreeRequested, sA, 1000),
		entry(snapshot.FreeCompleted, sA, 1000),
		entry(snapshot.Alloc, sA, 300),
		entry(snapshot.SegmentFree, xA, 2*mib),
		entry(snapshot.OutOfMemory, 12345, 1<<40),
		entry(snapshot.TakeSnapshot, 0, 0),
	}, []snapshot.TraceEntry{
		// 19.5 MiB leave 0.5 MiB: too little to split from a large block.
		entry(snapshot.FreeCompleted, mA, 39*mib/2),
		entry(snapshot.SegmentMap, mA+64*mib, 20*mib), // pages of an expandable segment, given back
		entry(snapshot.SegmentUnmap, mA+64*mib, 20*mib),
	})
}

func TestInitialState(t *testing.T) {
	s := rebuilt()
	st, err := s.InitialState(0)
	require.NoError(t, err)
	x := seg(0, xA, "small", free(xA, 2*mib))
	x.Stream = 3
	require.Equal(t, &snapshot.State{Segments: []snapshot.Segment{
		seg(0, sA, "small", live(sA, 1024, 1000), live(sA+1024, 1024, 600), free(sA+2048, 2*mib-2048)),
		x,
	}}, st)
	checkState(t, st)
	assert.Equal(t, []snapshot.TraceEntry{
		{Action: snapshot.Alloc, Addr: sA, Size: 1000, Stream: 3, TimeUS: snapshot.NoTime},
		{Action: snapshot.Alloc, Addr: sA + 1024, Size: 600, Stream: 3, TimeUS: snapshot.NoTime},
	}, st.Allocs())

	st, err = s.InitialState(1)
	require.NoError(t, err)
	require.Equal(t, &snapshot.State{Segments: []snapshot.Segment{seg(1, mA, "large", live(mA, 20*mib, 39*mib/2))}}, st)

	st, err = s.InitialState(2)
	require.NoError(t, err)
	assert.Equal(t, &snapshot.State{Segments: []snapshot.Segment{}}, st)
}

func TestInitialStateInconsistent(t *testing.T) {
	alloc := func(addr uint64, size int64) snapshot.TraceEntry {
		e := entry(snapshot.Alloc, addr, size)
		return e
	}
	one := func(blocks ...snapshot.Block) []snapshot.Segment {
		return []snapshot.Segment{seg(0, sA, "small", blocks...)}
	}
	for _, tc := range []struct {
		name     string
		segs     []snapshot.Segment
		trace    []snapshot.TraceEntry
		err      string
		segments []snapshot.Segment // nil: as segs
		unplaced []snapshot.TraceEntry
	}{
		{"no segments", nil, []snapshot.TraceEntry{
			entry(snapshot.Alloc, a0, 5), entry(snapshot.FreeCompleted, a0, 5), entry(snapshot.FreeCompleted, a0, 6),
			entry(snapshot.FreeCompleted, a1, 7), entry(snapshot.Alloc, a2, 9)},
			"device_traces[0][4]: alloc of 0x7f3a00400000 outside every segment", []snapshot.Segment{},
			[]snapshot.TraceEntry{alloc(a1, 7)}},
		{"double free", nil, []snapshot.TraceEntry{entry(snapshot.FreeCompleted, a0, 5), entry(snapshot.FreeCompleted, a0, 6)},
			"device_traces[0][1]: free_completed of 0x7f3a00000000 outside every segment", []snapshot.Segment{},
			[]snapshot.TraceEntry{alloc(a0, 5)}},
		{"alloc of a free block", one(free(sA, 2*mib)), []snapshot.TraceEntry{entry(snapshot.Alloc, sA, 5)},
			"device_traces[0][0]: alloc of 0x10000000 where no live block starts", nil, nil},
		{"free inside a live block", one(live(sA, 2*mib, 100)), []snapshot.TraceEntry{entry(snapshot.FreeCompleted, sA+512, 5)},
			"device_traces[0][0]: free_completed of 0x10000200 inside a live block", nil, []snapshot.TraceEntry{alloc(sA+512, 5)}},
		{"free of a live block", one(live(sA, 2*mib, 100)), []snapshot.TraceEntry{entry(snapshot.FreeCompleted, sA, 5)},
			"device_traces[0][0]: free_completed of 0x10000000 inside a live block", one(live(sA, 2*mib, 5)), nil},
		{"free too large", one(free(sA, 1024), live(sA+1024, 2*mib-1024, 5)), []snapshot.TraceEntry{entry(snapshot.FreeCompleted, sA, 2000)},
			"device_traces[0][0]: free_completed of 0x10000000: 2048 bytes do not fit in the free block at 0x10000000 of 1024 bytes",
			nil, []snapshot.TraceEntry{alloc(sA, 2000)}},
		{"segment_alloc of no segment", one(free(sA, 2*mib)), []snapshot.TraceEntry{entry(snapshot.SegmentAlloc, sA+512, 2*mib)},
			"device_traces[0][0]: segment_alloc of 0x10000200: no segment starts there", nil, nil},
		{"segment_alloc of a used segment", one(live(sA, 2*mib, 5)), []snapshot.TraceEntry{entry(snapshot.SegmentAlloc, sA, 2*mib)},
			"device_traces[0][0]: segment_alloc of 0x10000000: the segment still has live blocks", nil, nil},
		{"segment_free of nothing", nil, []snapshot.TraceEntry{entry(snapshot.SegmentFree, sA, 0)},
			"device_traces[0][0]: segment_free of 0x10000000: size 0", []snapshot.Segment{}, nil},
		{"segment_free past the end", nil, []snapshot.TraceEntry{entry(snapshot.SegmentFree, 1<<64-512, 1024)},
			"device_traces[0][0]: segment_free of 0xfffffffffffffe00: size 1024", []snapshot.Segment{}, nil},
		{"segment_free of a held segment", one(free(sA, 2*mib)), []snapshot.TraceEntry{entry(snapshot.SegmentFree, sA-512, 1024)},
			"device_traces[0][0]: segment_free of 0xffffe00: overlaps the segment at 0x10000000", nil, nil},
		{"gap between blocks", one(live(sA, 512, 5), live(sA+1024, 2*mib-1024, 6)), nil,
			"segment 0x10000000: block at 0x10000400 of 2096128 bytes, expected one at 0x10000200", []snapshot.Segment{},
			[]snapshot.TraceEntry{alloc(sA, 5), alloc(sA+1024, 6)}},
		{"blocks too short", []snapshot.Segment{{Address: sA, TotalSize: 2 * mib, Stream: 3, Blocks: []snapshot.Block{live(sA, 512, 5)}}}, nil,
			"segment 0x10000000: blocks cover 512 of its 2097152 bytes", []snapshot.Segment{}, []snapshot.TraceEntry{alloc(sA, 5)}},
		{"empty segment", []snapshot.Segment{{Address: sA}}, nil, "segment 0x10000000: size 0", []snapshot.Segment{}, nil},
		{"overlapping segments", []snapshot.Segment{seg(0, sA, "small", free(sA, 2*mib)), seg(0, sA+mib, "small", live(sA+mib, 2*mib, 8))}, nil,
			"segment 0x10100000: overlaps the segment at 0x10000000", one(free(sA, 2*mib)), []snapshot.TraceEntry{alloc(sA+mib, 8)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshot.New(tc.segs, tc.trace)
			st, err := s.InitialState(0)
			require.EqualError(t, err, tc.err)
			want := tc.segments
			if want == nil {
				want = tc.segs
			}
			for i := range want {
				want[i].SegmentType = "small" // the test's segments are small
			}
			assert.Equal(t, want, st.Segments)
			assert.Equal(t, tc.unplaced, st.Unplaced)
		})
	}
}

// rebuildAndFollow rebuilds device 0's state at the start of s's trace with
// rules, checks that following the trace forward from it gives s's
// segments back, and returns it.
func rebuildAndFollow(t *testing.T, s *snapshot.Snapshot, rules snapshot.Rules) *snapshot.State {
	t.Helper()
	st, err := s.InitialStateWith(0, rules)
	require.NoError(t, err)
	checkState(t, st)
	tr := snapshot.NewTracker(st, rules)
	for i, e := range s.Trace(0).All() {
		require.NoError(t, tr.Apply(&e), "entry %d", i)
		var held int64
		for _, sg := range tr.State(0).Segments {
			held += sg.TotalSize
		}
		require.Equal(t, held, tr.Held(), "bytes held after entry %d", i)
	}
	assert.Equal(t, s.Segments, tr.State(0).Segments, "the trace followed forward")
	return st
}

func expandable(s snapshot.Segment) snapshot.Segment {
	s.IsExpandable = true
	return s
}

// TestHiddenTail is the case of a window that starts mid-run: a block live
// before the trace owns 512 KiB that PyTorch did not split off, and the
// block after it was freed first, so that the free of the first meets a
// free block of 17 MiB after its rounded size.
func TestHiddenTail(t *testing.T) {
	s := snapshot.New([]snapshot.Segment{seg(0, lA, "large", free(lA, 20*mib))}, []snapshot.TraceEntry{
		entry(snapshot.FreeCompleted, lA+7*mib/2, 4*mib),
		entry(snapshot.FreeCompleted, lA, 3*mib),
	})
	st := rebuildAndFollow(t, s, snapshot.DefaultRules())
	assert.Equal(t, []snapshot.Segment{seg(0, lA, "large", live(lA, 7*mib/2, 3*mib), live(lA+7*mib/2, 4*mib, 4*mib), free(lA+15*mib/2, 25*mib/2))},
		st.Segments, "the 512 KiB before the second block are the first's")

	// The same fragment at the start of the segment has no block to own
	// it: no tail explains the trace.
	s.SetTraces([]snapshot.TraceEntry{entry(snapshot.FreeCompleted, lA+mib/2, 4*mib)})
	_, err := s.InitialState(0)
	assert.EqualError(t, err, "device_traces[0][0]: free_completed of 0x20080000: a free fragment of 524288 bytes at 0x20000000 before it, "+
		"which PyTorch cannot leave in a large segment, and no live block before it to own it")
}

// TestOversizeTail: with max_split_size, a request of at least it takes a
// free block up to max_non_split_rounding larger whole; the tail ends where
// an earlier entry names another block.
func TestOversizeTail(t *testing.T) {
	s := snapshot.New([]snapshot.Segment{seg(0, lA, "large", free(lA, 40*mib))}, []snapshot.TraceEntry{
		entry(snapshot.FreeCompleted, lA+32*mib, 3*mib),
		entry(snapshot.FreeCompleted, lA, 30*mib),
	})
	rules := snapshot.DefaultRules()
	rules.MaxSplitSize = 20 * mib
	st := rebuildAndFollow(t, s, rules)
	assert.Equal(t, []snapshot.Segment{seg(0, lA, "large", live(lA, 32*mib, 30*mib), live(lA+32*mib, 3*mib, 3*mib), free(lA+35*mib, 5*mib))}, st.Segments)

	// Without max_split_size the 30 MiB block was split.
	st, err := s.InitialState(0)
	require.NoError(t, err)
	assert.Equal(t, []snapshot.Segment{seg(0, lA, "large", live(lA, 30*mib, 30*mib), free(lA+30*mib, 2*mib),
		live(lA+32*mib, 3*mib, 3*mib), free(lA+35*mib, 5*mib))}, st.Segments)
}

// TestRebuildDivisions: the rebuild rounds as roundup_power2_divisions
// says: 1.1 MiB is 1.25 MiB with 4 divisions.
func TestRebuildDivisions(t *testing.T) {
	const req = 1153434
	s := snapshot.New([]snapshot.Segment{seg(0, lA, "large", free(lA, 20*mib))}, []snapshot.TraceEntry{entry(snapshot.FreeCompleted, lA, req)})
	s.AllocatorSettings = &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: snapshot.NoMaxSplitSize,
		RoundupPower2Divisions: [snapshot.Intervals]int64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}}
	rules, err := s.AllocatorSettings.Rules()
	require.NoError(t, err)
	st := rebuildAndFollow(t, s, rules)
	assert.Equal(t, []snapshot.Segment{seg(0, lA, "large", live(lA, 5*mib/4, req), free(lA+5*mib/4, 20*mib-5*mib/4))}, st.Segments)

	// The settings as a conf string, as files before PyTorch 2.1 record them.
	s.AllocatorSettings = &snapshot.AllocatorSettings{Conf: "roundup_power2_divisions:[1:4,>:4],max_non_split_rounding_mb:30"}
	rules2, err := s.AllocatorSettings.Rules()
	require.NoError(t, err)
	rules.MaxNonSplitRounding = 30 * mib
	assert.Equal(t, rules, rules2)
	s.AllocatorSettings.Conf = "max_split_size_mb:5"
	_, err = s.AllocatorSettings.Rules()
	assert.EqualError(t, err, "allocator_settings: max_split_size_mb:5: not a number of MiB of at least 20")
}

// TestRebuildExpandable undoes segment_map and segment_unmap: mapped pages
// of an expandable segment come and go.
func TestRebuildExpandable(t *testing.T) {
	rules := snapshot.DefaultRules()
	rules.Expandable = true
	s := snapshot.New([]snapshot.Segment{expandable(seg(0, lA, "large", free(lA, 15*mib), live(lA+15*mib, 10*mib, 10*mib), free(lA+25*mib, 15*mib)))}, []snapshot.TraceEntry{
		entry(snapshot.SegmentMap, lA+20*mib, 20*mib),
		entry(snapshot.Alloc, lA+15*mib, 10*mib),
		entry(snapshot.FreeCompleted, lA, 15*mib),
	})
	st := rebuildAndFollow(t, s, rules)
	assert.Equal(t, []snapshot.Segment{expandable(seg(0, lA, "large", live(lA, 15*mib, 15*mib), free(lA+15*mib, 5*mib)))}, st.Segments)

	// All freed and unmapped: the pages come back for the blocks before.
	s = snapshot.New([]snapshot.Segment{}, []snapshot.TraceEntry{
		entry(snapshot.FreeCompleted, lA, 15*mib),
		entry(snapshot.SegmentUnmap, lA, 20*mib),
		entry(snapshot.SegmentUnmap, sA, 2*mib),
	})
	st = rebuildAndFollow(t, s, rules)
	assert.Equal(t, []snapshot.Segment{
		expandable(seg(0, sA, "small", free(sA, 2*mib))),
		expandable(seg(0, lA, "large", live(lA, 15*mib, 15*mib), free(lA+15*mib, 5*mib))),
	}, st.Segments)

	// Unmapping what is not a free part of an expandable segment.
	for _, tc := range []struct {
		segs []snapshot.Segment
		e    snapshot.TraceEntry
		err  string
	}{
		{[]snapshot.Segment{seg(0, lA, "large", free(lA, 20*mib))}, entry(snapshot.SegmentMap, lA, 20*mib),
			"device_traces[0][0]: segment_map of 0x20000000: in a segment that is not expandable"},
		{[]snapshot.Segment{expandable(seg(0, lA, "large", live(lA, 20*mib, 20*mib)))}, entry(snapshot.SegmentMap, lA, 20*mib),
			"device_traces[0][0]: segment_map of 0x20000000: not one free block"},
		{nil, entry(snapshot.SegmentMap, lA, 20*mib), "device_traces[0][0]: segment_map of 0x20000000: outside every segment"},
		{[]snapshot.Segment{seg(0, lA, "large", free(lA, 20*mib))}, entry(snapshot.SegmentUnmap, lA, 20*mib),
			"device_traces[0][0]: segment_unmap of 0x20000000: overlaps the segment at 0x20000000"},
	} {
		s := snapshot.New(tc.segs, []snapshot.TraceEntry{tc.e})
		_, err := s.InitialStateWith(0, rules)
		assert.EqualError(t, err, tc.err)
	}
}

// TestFreshSegment: a window that starts at an alloc whose segment_alloc it
// cut off. With max_split_size 20 MiB, the free 20 MiB segment could not
// have served a 3 MB request from PyTorch's pool: it was new, and the
// rebuild says so. Without max_split_size it could have: it stays.
func TestFreshSegment(t *testing.T) {
	s := snapshot.New([]snapshot.Segment{seg(0, lA, "large", free(lA, 20*mib))}, []snapshot.TraceEntry{entry(snapshot.Alloc, lA, 3000000), entry(snapshot.FreeCompleted, lA, 3000000)})
	rules := snapshot.DefaultRules()
	rules.MaxSplitSize = 20 * mib
	st, err := s.InitialStateWith(0, rules)
	require.NoError(t, err)
	assert.Empty(t, st.Segments)
	assert.Equal(t, []snapshot.TraceEntry{entry(snapshot.SegmentAlloc, lA, 20*mib)}, st.Fresh)
	// Following the implied segment_alloc, then the trace, gives the
	// snapshot's segments.
	tr := snapshot.NewTracker(st, rules)
	for _, e := range append(st.Fresh, s.Trace(0).Entries()...) {
		require.NoError(t, tr.Apply(&e))
	}
	assert.Equal(t, s.Segments, tr.State(0).Segments)

	st, err = s.InitialState(0)
	require.NoError(t, err)
	assert.Equal(t, s.Segments, st.Segments)
	assert.Empty(t, st.Fresh)
}
