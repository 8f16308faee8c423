package snapshot_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/strategy/pytorch/snapshot"
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
	return &snapshot.Snapshot{
		Segments: []snapshot.Segment{
			seg(0, lA, "large", live(lA, 5*mib, 5*mib), free(lA+5*mib, 15*mib)),
			seg(0, sA, "small", live(sA, 512, 300), free(sA+512, 512), live(sA+1024, 1024, 800), free(sA+2048, 2*mib-2048)),
			seg(1, mA, "large", free(mA, 20*mib)),
		},
		DeviceTraces: [][]snapshot.TraceEntry{{
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
		}, {
			// 19.5 MiB leave 0.5 MiB: too little to split from a large block.
			entry(snapshot.FreeCompleted, mA, 39*mib/2),
			entry(snapshot.SegmentMap, mA+64*mib, 20*mib), // pages of an expandable segment, given back
			entry(snapshot.SegmentUnmap, mA+64*mib, 20*mib),
		}},
	}
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
			s := &snapshot.Snapshot{Segments: tc.segs, DeviceTraces: [][]snapshot.TraceEntry{tc.trace}}
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
