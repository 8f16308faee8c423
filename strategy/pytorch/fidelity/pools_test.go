package fidelity

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

// TestPrivatePools: a CUDA graph's segment that the trace allocates is
// held apart from the model, with the allocation in it; the default
// pools' request after it takes a segment of its own, as recorded, even
// once the replay that follows the record has taken the recorded state
// again (after the alloc recorded where PyTorch would not put it), whose
// rebuilt segments no longer name their pool.
func TestPrivatePools(t *testing.T) {
	const q, a uint64 = 0x7f0004000000, 0x7f0008000000
	graph := snapshot.PoolID{1, 0}
	pq := seg(0, q, live(q, 6*mib, 6*mib), free(q+6*mib, 14*mib))
	pq.Pool = graph
	s := snapshot.New([]snapshot.Segment{
		seg(0, sA, live(sA, 512, 300), free(sA+512, 512), live(sA+1024, 512, 300), free(sA+1536, 2*mib-1536)),
		pq,
		seg(0, a, live(a, 4*mib, 4*mib), free(a+4*mib, 16*mib)),
	}, []snapshot.TraceEntry{
		ent(snapshot.SegmentAlloc, q, 20*mib), ent(snapshot.Alloc, q, 6*mib),
		ent(snapshot.Alloc, sA+1024, 300), // PyTorch would take sA+512
		ent(snapshot.SegmentAlloc, a, 20*mib), ent(snapshot.Alloc, a, 4*mib),
	})
	s.AllocatorSettings = &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: snapshot.NoMaxSplitSize}
	res := run(t, s, PyTorch)
	require.Len(t, res, 1)
	r := res[0]
	assert.Equal(t, int64(3), r.Allocs)
	assert.Equal(t, int64(2), r.DecisionMatches, "the graph's alloc, and the request after the restart")
	assert.Equal(t, int64(1), r.SegmentAllocs, "the default pools' segment_alloc; the graph's is not the model's")
	assert.Equal(t, int64(1), r.SegmentMatches)
	assert.Equal(t, int64(2), r.RecordedDeviceMallocs)
	assert.Equal(t, int64(2), r.ReplayedDeviceMallocs, "the graph's segment, taken apart, and the default pools'")
	assert.Equal(t, int64(42*mib), r.ReplayedPeakReservedBytes)
	assert.Equal(t, r.RecordedPeakReservedBytes, r.ReplayedPeakReservedBytes)
}
