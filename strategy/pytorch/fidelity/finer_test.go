package fidelity

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

// finerBlocks is a record of an allocator that rounds requests to 256
// bytes, not PyTorch's 512: 4 bytes take a block of 256, and the next
// alloc lies 256 bytes on. The rebuild of its start state cannot undo the
// last free (PyTorch's block of 512 bytes does not fit the 256 free), and
// a Tracker cannot follow it.
func finerBlocks() *snapshot.Snapshot {
	s := snapshot.New([]snapshot.Segment{seg(0, sA, free(sA, 256), live(sA+256, 4096, 4096), free(sA+4352, 2*mib-4352))}, []snapshot.TraceEntry{
		ent(snapshot.SegmentAlloc, sA, 2*mib),
		ent(snapshot.Alloc, sA, 4),
		ent(snapshot.Alloc, sA+256, 4096),
		ent(snapshot.FreeRequested, sA, 4),
		ent(snapshot.FreeCompleted, sA, 4),
	})
	s.AllocatorSettings = &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: snapshot.NoMaxSplitSize}
	return s
}

// TestFinerBlocks: a record whose blocks PyTorch could not have made is
// replayed from the model's own decisions, with its figures, and its note
// says in one line what is not done: following the record decision by
// decision. The model rounds as PyTorch does, and misses the alloc that
// the record put 256 bytes on.
func TestFinerBlocks(t *testing.T) {
	res := run(t, finerBlocks(), PyTorch)
	require.Len(t, res, 1)
	r := res[0]
	assert.Equal(t, "a block of 256 bytes at 0x7f0000000000, where PyTorch's blocks are multiples of 512 bytes (kMinBlockSize): a modified allocator: "+
		"replayed from its own decisions, not followed decision by decision (device_traces[0][4]: free_completed of 0x7f0000000000: "+
		"512 bytes do not fit in the free block at 0x7f0000000000 of 256 bytes)", r.Note)
	assert.NotContains(t, r.Note, "\n")
	assert.Nil(t, r.DecisionRate, "no decision is followed")
	assert.Zero(t, r.DecisionMatches)
	assert.Equal(t, int64(2), r.Allocs)
	assert.Equal(t, int64(1), r.AddressMatches, "the alloc 256 bytes on is at 512 in the model")
	require.NotNil(t, r.MatchRate)
	assert.Equal(t, 2.0/3, *r.MatchRate)
	assert.Equal(t, int64(2*mib), r.RecordedPeakReservedBytes)
	assert.Equal(t, int64(2*mib), r.ReplayedPeakReservedBytes)
	assert.Equal(t, int64(1), r.RecordedDeviceMallocs)
	assert.Equal(t, int64(1), r.ReplayedDeviceMallocs)

	// An inconsistent record of blocks PyTorch could make stays an error.
	s := finerBlocks()
	s.Segments = []snapshot.Segment{seg(0, sA, free(sA, 512), live(sA+512, 4096, 4096), free(sA+4608, 2*mib-4608))}
	tr := s.Trace(0).Entries()
	tr[2].Addr = sA + 512
	tr[4].Size = 600
	s.SetTraces(tr)
	_, err := Run(s, "t.pickle", Options{New: PyTorch})
	require.Error(t, err)
}

// TestSharedCustomFields replays the record of a patched PyTorch that
// rounds to 256 bytes (and takes segments of 4 MiB for requests of 4 MiB,
// where PyTorch takes 20): read, replayed, and its note says what is not
// compared.
func TestSharedCustomFields(t *testing.T) {
	s := readShared(t, "custom_fields.pickle")
	res, err := Run(s, "custom_fields.pickle", Options{New: PyTorch})
	require.NoError(t, err)
	require.Len(t, res, 1)
	r := res[0]
	assert.Contains(t, r.Note, "a block of 256 bytes at 0x72e275e22000, where PyTorch's blocks are multiples of 512 bytes (kMinBlockSize): a modified allocator")
	assert.Nil(t, r.DecisionRate)
	assert.Equal(t, int64(425), r.Allocs)
	assert.Equal(t, int64(56), r.RecordedDeviceMallocs)
	assert.Equal(t, int64(882*mib), r.RecordedPeakReservedBytes, "64 MiB at the start and the 818 MiB of the trace's segments")
	assert.Equal(t, int64(28), r.ReplayedDeviceMallocs, "20 MiB segments where the record takes 4 MiB ones")
	assert.Equal(t, "segment_alloc", r.Mismatches[0].Action)
	assert.Equal(t, "20971520 bytes", r.Mismatches[0].Got)
}

// TestEmptyCacheBeforeAlloc: a segment_free whose frames name empty_cache
// is the program's release, made at once, even where an allocation may
// release some cached segments itself (a max_split_size) and an alloc
// follows: the alloc, served from the cache, releases nothing.
func TestEmptyCacheBeforeAlloc(t *testing.T) {
	ec := ent(snapshot.SegmentFree, lA, 20*mib)
	ec.EmptyCache = true
	s := snapshot.New([]snapshot.Segment{seg(0, sA, live(sA, 512, 300), live(sA+512, 512, 300), free(sA+1024, 2*mib-1024))}, []snapshot.TraceEntry{
		ent(snapshot.FreeRequested, lA, 5*mib),
		ent(snapshot.FreeCompleted, lA, 5*mib),
		ec,
		ent(snapshot.Alloc, sA+512, 300),
	})
	s.AllocatorSettings = &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: 40 * mib}
	res := run(t, s, PyTorch)
	require.Len(t, res, 1)
	assert.Empty(t, res[0].Mismatches)
	assert.Equal(t, int64(1), res[0].SegmentFreeMatches)
	assert.Equal(t, int64(1), res[0].DecisionMatches)
}
