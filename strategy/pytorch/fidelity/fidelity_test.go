package fidelity

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// The tests' snapshots are built here, with the decisions PyTorch takes on
// them, as recorded in their traces.

const (
	mib        = 1 << 20
	sA  uint64 = 0x7f0000000000 // a small segment
	lA  uint64 = 0x7f0001000000 // a large segment
	xA  uint64 = 0x7f0008000000 // another segment
	dA  uint64 = 0x7f1000000000 // a segment of device 1
)

func ent(a snapshot.Action, addr uint64, size int64) snapshot.TraceEntry {
	return snapshot.TraceEntry{Action: a, Addr: addr, Size: size, TimeUS: snapshot.NoTime}
}

func live(addr uint64, size, requested int64) snapshot.Block {
	return snapshot.Block{Address: addr, Size: size, RequestedSize: requested, State: snapshot.ActiveAllocated}
}

func free(addr uint64, size int64) snapshot.Block {
	return snapshot.Block{Address: addr, Size: size, State: snapshot.Inactive}
}

func seg(dev int, addr uint64, blocks ...snapshot.Block) snapshot.Segment {
	s := snapshot.Segment{Device: dev, Address: addr, SegmentType: "large", Blocks: blocks}
	for _, b := range blocks {
		s.TotalSize += b.Size
	}
	if s.TotalSize == 2*mib {
		s.SegmentType = "small"
	}
	return s
}

func run(t *testing.T, s *snapshot.Snapshot, newAlloc NewFunc) []*Result {
	t.Helper()
	return runOpts(t, s, Options{New: newAlloc})
}

func runOpts(t *testing.T, s *snapshot.Snapshot, opts Options) []*Result {
	t.Helper()
	res, err := Run(s, "t.pickle", opts)
	require.NoError(t, err)
	for _, r := range res {
		r.mismatchesMx = 0
	}
	return res
}

func pf(f float64) *float64 { return &f }

// fromEmpty starts from an empty allocator: small blocks are reused best
// fit, a large segment is split, and its segment_free follows an
// empty_cache that the trace does not record.
func fromEmpty() *snapshot.Snapshot {
	s := snapshot.New([]snapshot.Segment{seg(0, sA, live(sA, 512, 300), live(sA+512, 1024, 1000), free(sA+1536, 2*mib-1536))}, []snapshot.TraceEntry{
		ent(snapshot.SegmentAlloc, sA, 2*mib),
		ent(snapshot.Alloc, sA, 500),
		ent(snapshot.Alloc, sA+512, 1000),
		ent(snapshot.FreeRequested, sA, 500),
		ent(snapshot.FreeCompleted, sA, 500),
		ent(snapshot.Alloc, sA, 300), // the free 512 bytes fit best
		ent(snapshot.SegmentAlloc, lA, 20*mib),
		ent(snapshot.Alloc, lA, 5*mib),
		ent(snapshot.Alloc, lA+5*mib, 3*mib),
		ent(snapshot.OutOfMemory, 1<<30, 1<<40),
		ent(snapshot.FreeRequested, lA, 5*mib),
		ent(snapshot.FreeCompleted, lA, 5*mib),
		ent(snapshot.FreeRequested, lA+5*mib, 3*mib),
		ent(snapshot.FreeCompleted, lA+5*mib, 3*mib),
		ent(snapshot.SegmentFree, lA, 20*mib),
		ent(snapshot.TakeSnapshot, 0, 0),
	})
	s.AllocatorSettings = &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: snapshot.NoMaxSplitSize}
	return s
}

func TestFromEmpty(t *testing.T) {
	assert.Equal(t, []*Result{{File: "t.pickle", Allocs: 5, AddressMatches: 5, DecisionMatches: 5, SegmentAllocs: 2, SegmentMatches: 2,
		MatchRate: pf(1), DecisionRate: pf(1), OOMs: 1, OOMMatches: 1, SegmentFrees: 1, SegmentFreeMatches: 1, DeviceFrees: 1,
		RecordedPeakReservedBytes: 22 * mib, ReplayedPeakReservedBytes: 22 * mib, RecordedDeviceMallocs: 2, ReplayedDeviceMallocs: 2, Mismatches: []Mismatch{}}},
		run(t, fromEmpty(), PyTorch))

	// The test's model takes the same decisions but cannot empty its cache:
	// the segment it keeps is the one decision of 8 it misses.
	assert.Equal(t, []*Result{{File: "t.pickle", Allocs: 5, AddressMatches: 5, DecisionMatches: 5, SegmentAllocs: 2, SegmentMatches: 2,
		MatchRate: pf(7.0 / 8), DecisionRate: pf(1), OOMs: 1, OOMMatches: 1, SegmentFrees: 1,
		RecordedPeakReservedBytes: 22 * mib, ReplayedPeakReservedBytes: 22 * mib, RecordedDeviceMallocs: 2, ReplayedDeviceMallocs: 2,
		Mismatches: []Mismatch{{0, 14, "segment_free", 20 * mib, "0x7f0001000000", "kept"}}}},
		run(t, fromEmpty(), newModel))
}

// oomReleases fails two allocations in a row, as a device too small does.
// Before each oom, PyTorch's malloc releases every cached segment
// (release_cached_blocks), and records the segment_free entries first: the
// block freed between the two ooms makes its segment one more to release
// before the second.
func oomReleases() *snapshot.Snapshot {
	return snapshot.New([]snapshot.Segment{seg(0, xA, live(xA, mib, mib), free(xA+mib, mib))}, []snapshot.TraceEntry{
		ent(snapshot.FreeRequested, xA, mib),
		ent(snapshot.FreeCompleted, xA, mib),
		ent(snapshot.SegmentFree, xA, 2*mib),
		ent(snapshot.OutOfMemory, 0, 100*mib),
		ent(snapshot.FreeRequested, sA, mib),
		ent(snapshot.FreeCompleted, sA, mib),
		ent(snapshot.SegmentFree, sA, 2*mib),
		ent(snapshot.OutOfMemory, 0, 100*mib),
		ent(snapshot.SegmentAlloc, xA, 2*mib),
		ent(snapshot.Alloc, xA, mib),
	})
}

func TestOOMReleases(t *testing.T) {
	assert.Equal(t, []*Result{{File: "t.pickle", Allocs: 1, AddressMatches: 1, DecisionMatches: 1, SegmentAllocs: 1, SegmentMatches: 1,
		MatchRate: pf(1), DecisionRate: pf(1), OOMs: 2, OOMMatches: 2, SegmentFrees: 2, SegmentFreeMatches: 2, DeviceFrees: 2,
		InitialLive: 2, InitialSegs: 2, RecordedPeakReservedBytes: 4 * mib, ReplayedPeakReservedBytes: 4 * mib, RecordedDeviceMallocs: 1, ReplayedDeviceMallocs: 1, Mismatches: []Mismatch{}}},
		run(t, oomReleases(), PyTorch))
}

// TestReleasesBetweenFrees empties the cache twice, with a block freed
// between: the second release gives back the segment that the free made
// whole.
func TestReleasesBetweenFrees(t *testing.T) {
	s := snapshot.New(nil, []snapshot.TraceEntry{
		ent(snapshot.FreeRequested, xA, mib),
		ent(snapshot.FreeCompleted, xA, mib),
		ent(snapshot.SegmentFree, xA, 2*mib),
		ent(snapshot.FreeRequested, sA, mib),
		ent(snapshot.FreeCompleted, sA, mib),
		ent(snapshot.SegmentFree, sA, 2*mib),
	})
	assert.Equal(t, []*Result{{File: "t.pickle", SegmentFrees: 2, SegmentFreeMatches: 2, DeviceFrees: 2,
		InitialLive: 2, InitialSegs: 2, Note: NoHistory, RecordedPeakReservedBytes: 4 * mib, ReplayedPeakReservedBytes: 4 * mib, RecordedDeviceMallocs: 0, ReplayedDeviceMallocs: 0, Mismatches: []Mismatch{}}},
		run(t, s, PyTorch))
}

// started has blocks live before its trace, on two devices: PyTorch reuses
// the block freed on device 0 and splits the free rest of the segment of
// device 1.
func started() *snapshot.Snapshot {
	return snapshot.New([]snapshot.Segment{
		seg(0, sA, live(sA, 512, 300), free(sA+512, 512), live(sA+1024, 1024, 800), free(sA+2048, 2*mib-2048)),
		seg(1, dA, live(dA, 4*mib, 4*mib), live(dA+4*mib, 2*mib, 2*mib), free(dA+6*mib, 14*mib)),
	}, []snapshot.TraceEntry{
		ent(snapshot.FreeRequested, sA+1024, 600),
		ent(snapshot.FreeCompleted, sA+1024, 600),
		ent(snapshot.Alloc, sA+1024, 800),
		ent(snapshot.FreeCompleted, sA, 1000),
		ent(snapshot.Alloc, sA, 300),
	}, []snapshot.TraceEntry{
		ent(snapshot.FreeCompleted, dA+4*mib, 5*mib), // the 5 MiB block was live at the start
		ent(snapshot.Alloc, dA+4*mib, 2*mib),
	})
}

func TestStarted(t *testing.T) {
	assert.Equal(t, []*Result{
		{File: "t.pickle", Allocs: 2, AddressMatches: 2, DecisionMatches: 2, MatchRate: pf(1), DecisionRate: pf(1),
			InitialLive: 2, InitialSegs: 1, RecordedPeakReservedBytes: 2 * mib, ReplayedPeakReservedBytes: 2 * mib, RecordedDeviceMallocs: 0, ReplayedDeviceMallocs: 0, Mismatches: []Mismatch{}},
		{File: "t.pickle", Device: 1, Allocs: 1, AddressMatches: 1, DecisionMatches: 1, MatchRate: pf(1), DecisionRate: pf(1),
			InitialLive: 2, InitialSegs: 1, RecordedPeakReservedBytes: 20 * mib, ReplayedPeakReservedBytes: 20 * mib, RecordedDeviceMallocs: 0, ReplayedDeviceMallocs: 0, Mismatches: []Mismatch{}},
	}, run(t, started(), PyTorch))
}

// TestMismatches takes decisions that PyTorch would not have taken: each
// kind of mismatch once.
func TestMismatches(t *testing.T) {
	s := snapshot.New([]snapshot.Segment{
		seg(0, sA, free(sA, 512), live(sA+512, 512, 100), free(sA+1024, 2*mib-1024)),
		seg(0, lA, free(lA, 3*mib), live(lA+3*mib, 3*mib, 3*mib), live(lA+6*mib, 30*mib, 30*mib), free(lA+36*mib, 4*mib)),
	}, []snapshot.TraceEntry{
		ent(snapshot.SegmentAlloc, sA, 2*mib),
		ent(snapshot.Alloc, sA+512, 100),       // PyTorch puts it at sA
		ent(snapshot.SegmentAlloc, lA, 40*mib), // PyTorch asks for 20 MiB
		ent(snapshot.Alloc, lA, 3*mib),
		ent(snapshot.SegmentAlloc, xA, 20*mib), // PyTorch serves the next alloc from lA
		ent(snapshot.Alloc, lA+3*mib, 3*mib),
		ent(snapshot.Alloc, lA+6*mib, 30*mib), // recorded with no segment_alloc
		ent(snapshot.SegmentFree, xA, 20*mib), // PyTorch never had it
		ent(snapshot.FreeCompleted, lA, 3*mib),
	})
	res := runOpts(t, s, Options{New: PyTorch, MaxMismatches: 10})
	want := &Result{File: "t.pickle", Allocs: 4, AddressMatches: 2, DecisionMatches: 1, SegmentAllocs: 3, SegmentMatches: 1,
		MatchRate: pf(3.0 / 8), DecisionRate: pf(1.0 / 4), ExtraMallocs: 1, SegmentFrees: 1,
		RecordedPeakReservedBytes: 62 * mib, ReplayedPeakReservedBytes: 52 * mib, RecordedDeviceMallocs: 3, ReplayedDeviceMallocs: 3, MaxReservedDiffBytes: 40 * mib, Mismatches: []Mismatch{
			{0, 1, "alloc", 100, "0x7f0000000200", "0x7f0000000000"},
			{0, 2, "segment_alloc", 40 * mib, "41943040 bytes", "20971520 bytes"},
			{0, 5, "segment_alloc", 20 * mib, "20971520 bytes", "none (served from the cache)"},
			{0, 6, "segment_alloc", 30 * mib, "none", "31457280 bytes"},
			{0, 6, "alloc", 30 * mib, "0x7f0001600000", "0x7f0040000000"},
			{0, 7, "segment_free", 20 * mib, "0x7f0008000000", "kept"},
		}}
	assert.Equal(t, []*Result{want}, res)
	assert.Equal(t, "device 0 entry 1: alloc of 100 bytes: recorded 0x7f0000000200, replayed 0x7f0000000000", res[0].Mismatches[0].String())

	res = runOpts(t, s, Options{New: PyTorch})
	assert.Equal(t, want.Mismatches[:DefaultMaxMismatches], res[0].Mismatches)
	res = runOpts(t, s, Options{New: PyTorch, MaxMismatches: -1})
	assert.Empty(t, res[0].Mismatches)
}

// TestSettings replays with the snapshot's allocator settings: with
// roundup_power2_divisions 4, 1.1 MiB are rounded to 1.25 MiB.
func TestSettings(t *testing.T) {
	const req = 1153434 // 1.1 MiB
	s := snapshot.New([]snapshot.Segment{seg(0, lA, live(lA, 1310720, req), live(lA+1310720, 1310720, req), free(lA+2621440, 20*mib-2621440))}, []snapshot.TraceEntry{
		ent(snapshot.SegmentAlloc, lA, 20*mib),
		ent(snapshot.Alloc, lA, req),
		ent(snapshot.Alloc, lA+1310720, req),
	})
	s.AllocatorSettings = &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: snapshot.NoMaxSplitSize,
		RoundupPower2Divisions: [snapshot.Intervals]int64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}}
	assert.Equal(t, []*Result{{File: "t.pickle", Conf: "roundup_power2_divisions:4", Allocs: 2, AddressMatches: 2, DecisionMatches: 2,
		SegmentAllocs: 1, SegmentMatches: 1, MatchRate: pf(1), DecisionRate: pf(1), RecordedPeakReservedBytes: 20 * mib, ReplayedPeakReservedBytes: 20 * mib, RecordedDeviceMallocs: 1, ReplayedDeviceMallocs: 1, Mismatches: []Mismatch{}}}, run(t, s, PyTorch))

	// Without the settings, the second block comes sooner.
	s.AllocatorSettings = nil
	assert.Equal(t, []*Result{{File: "t.pickle", Allocs: 2, AddressMatches: 1, DecisionMatches: 1, SegmentAllocs: 1, SegmentMatches: 1,
		MatchRate: pf(2.0 / 3), DecisionRate: pf(1.0 / 2), RecordedPeakReservedBytes: 20 * mib, ReplayedPeakReservedBytes: 20 * mib, RecordedDeviceMallocs: 1, ReplayedDeviceMallocs: 1, Mismatches: []Mismatch{{0, 2, "alloc", req, "0x7f0001140000", "0x7f0001119a00"}}}},
		run(t, s, PyTorch))
}

// flaky is the test's model with failures where a test wants them.
type flaky struct {
	*model
	allocFails, freeFails int64 // requested sizes
	releaseFails          bool
}

func (f *flaky) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	if size == f.allocFails {
		return gpualloc.Block{}, gpualloc.ErrOutOfMemory
	}
	return f.model.AllocStream(size, stream)
}

func (f *flaky) Free(b gpualloc.Block) error {
	if b.Requested == f.freeFails {
		return errors.New("bad free")
	}
	return f.model.Free(b)
}

func (f *flaky) ReleaseAll() error {
	if f.releaseFails {
		return errors.New("release failed")
	}
	return nil
}

func newFlaky(f flaky) NewFunc {
	return func(b gpualloc.Backend, conf string) (Allocator, error) {
		m, err := newModel(b, conf)
		if err != nil {
			return nil, err
		}
		f.model = m.(*model)
		return &f, nil
	}
}

func TestAllocError(t *testing.T) {
	s := snapshot.New([]snapshot.Segment{seg(0, sA, free(sA, 2*mib))}, []snapshot.TraceEntry{
		ent(snapshot.SegmentAlloc, sA, 2*mib),
		ent(snapshot.Alloc, sA, 777),
		ent(snapshot.FreeCompleted, sA, 777),
	})
	assert.Equal(t, []*Result{{File: "t.pickle", Allocs: 1, SegmentAllocs: 1, AllocErrors: 1, MatchRate: pf(0), DecisionRate: pf(0),
		RecordedPeakReservedBytes: 2 * mib, ReplayedPeakReservedBytes: 0, RecordedDeviceMallocs: 1, ReplayedDeviceMallocs: 0, MaxReservedDiffBytes: 2 * mib,
		Mismatches: []Mismatch{
			{0, 1, "segment_alloc", 2 * mib, "2097152 bytes", "none (served from the cache)"},
			{0, 1, "alloc", 777, "0x7f0000000000", "error: out of memory"},
		}}}, run(t, s, newFlaky(flaky{allocFails: 777})))
}

func TestErrors(t *testing.T) {
	trace := func(es ...snapshot.TraceEntry) *snapshot.Snapshot {
		return snapshot.New([]snapshot.Segment{seg(0, sA, free(sA, 2*mib))}, es)
	}
	settings := func(conf string) *snapshot.Snapshot {
		s := trace()
		s.AllocatorSettings = &snapshot.AllocatorSettings{Conf: conf}
		return s
	}
	expandable := seg(0, lA, free(lA, 20*mib))
	expandable.IsExpandable = true
	for _, tc := range []struct {
		name string
		s    *snapshot.Snapshot
		new  NewFunc
		err  string
	}{
		{"no allocator", fromEmpty(), nil, "fidelity: no allocator"},
		{"bad conf", settings("max_split_size_mb:5"), PyTorch,
			"allocator_settings: max_split_size_mb:5: not a number of MiB of at least 20"},
		{"model conf", settings("expandable_segments:True"), newModel,
			"model: configuration not supported: expandable_segments:True"},
		{"inconsistent", trace(ent(snapshot.FreeCompleted, xA, 100)), PyTorch,
			"device_traces[0][0]: free_completed of 0x7f0008000000 outside every segment"},
		{"expandable", &snapshot.Snapshot{Segments: []snapshot.Segment{expandable}}, newModel,
			"model: configuration not supported: expandable_segments:True"},
		{"free fails", trace(ent(snapshot.SegmentAlloc, sA, 2*mib), ent(snapshot.Alloc, sA, 778), ent(snapshot.FreeCompleted, sA, 778)),
			newFlaky(flaky{freeFails: 778}), "device_traces[0][2]: free_completed of 0x7f0000000000: bad free"},
		{"release fails", trace(ent(snapshot.SegmentFree, xA, 2*mib)), newFlaky(flaky{releaseFails: true}),
			"device_traces[0][0]: releasing cached segments: release failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(tc.s, "t.pickle", Options{New: tc.new})
			require.Error(t, err)
			assert.Equal(t, tc.err, err.Error())
		})
	}
}
