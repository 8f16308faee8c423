package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
)

// TestPrivatePoolSegmentInTrace: a private pool's segment that the trace
// allocates (pool (1, 0), 20 MiB, 5 MiB of it then allocated) is the
// engine's from its segment_alloc on: the default pools' 8 MiB request
// that follows takes a segment of its own, as PyTorch's did, where a
// strategy given both would serve it from the private segment's free 15
// MiB.
func TestPrivatePoolSegmentInTrace(t *testing.T) {
	private := pk.Segment(0, rL0, 0, "large", pk.Block(rL0, 5<<20, 5<<20, "active_allocated"), pk.Block(rL0+5<<20, 15<<20, 0, "inactive"))
	for i := range private {
		if private[i].K == "segment_pool_id" {
			private[i].V = [2]any{1, 0}
		}
	}
	path := writePickle(t, pk.Snapshot([]any{
		pk.Segment(0, fL0, 0, "large", pk.Block(fL0, 8<<20, 8<<20, "active_allocated"), pk.Block(fL0+8<<20, 12<<20, 0, "inactive")),
		private,
	}, [][]any{{
		pkEntry("segment_alloc", rL0, 20<<20), pkEntry("alloc", rL0, 5<<20),
		pkEntry("segment_alloc", fL0, 20<<20), pkEntry("alloc", fL0, 8<<20),
	}}, pkSettings))
	for _, s := range []string{"pytorch", "bfc", "naive"} {
		rows, _ := replayRows(t, nil, "-s", s, path)
		r := rows[0]
		assert.Equal(t, int64(0), r.StartSegments, s)
		assert.GreaterOrEqual(t, r.Peak, int64(28<<20), "%s: the private pool's 20 MiB beside the default pools' 8", s)
		if s == "pytorch" {
			assert.Equal(t, int64(2), r.DeviceMallocs, "the private segment and the default pools' own")
			assert.Equal(t, int64(40<<20), r.Peak)
			var fr []fidelity.Result
			runJSON(t, nil, &fr, "fidelity", "-f", "json", path)
			require.Len(t, fr, 1)
			assert.Equal(t, fr[0].RecordedPeakReservedBytes, r.Peak)
			assert.Equal(t, fr[0].RecordedDeviceMallocs, r.DeviceMallocs)
		}
	}
}

// TestTraceOfStartOnly: a snapshot whose trace records nothing ends within
// its start events (the allocations of the blocks live when it began); the
// device allocations that built the state are the start state's, none
// the trace's.
func TestTraceOfStartOnly(t *testing.T) {
	path := writePickle(t, pk.Snapshot([]any{
		pk.Segment(0, fL0, 0, "large", pk.Block(fL0, 5<<20, 5<<20, "active_allocated"), pk.Block(fL0+5<<20, 15<<20, 0, "inactive")),
	}, [][]any{{}}, pkSettings))
	for _, s := range []string{"pytorch", "naive"} {
		rows, _ := replayRows(t, nil, "-s", s, path)
		r := rows[0]
		assert.Equal(t, int64(0), r.DeviceMallocs, s)
		assert.Equal(t, int64(1), r.StartSegments, s)
		assert.Equal(t, r.Peak, r.StartReserved, s)
	}
}

// TestPrivatePoolsFlag: --private-pools lets the pytorch strategy serve a
// snapshot's private pool by its own rules. The pool's 40 MiB segment
// holds 29 MiB free when the trace asks the pool for 6 MiB; with a
// max_split_size_mb of 20 PyTorch does not split that oversize block for
// it, so the pool takes a new segment (two device mallocs, 80 MiB), where
// the engine, holding the pool's segments as recorded, places the block
// where the snapshot did (one malloc, 60 MiB).
func TestPrivatePoolsFlag(t *testing.T) {
	const p, a = uint64(0x7f0004000000), uint64(0x7f0008000000)
	pool := pk.Segment(0, p, 0, "large", pk.Block(p, 5<<20, 5<<20, "active_allocated"),
		pk.Block(p+5<<20, 6<<20, 6<<20, "active_allocated"), pk.Block(p+11<<20, 29<<20, 0, "inactive"))
	for i := range pool {
		if pool[i].K == "segment_pool_id" {
			pool[i].V = [2]any{1, 0}
		}
	}
	path := writePickle(t, pk.Snapshot([]any{
		pool,
		pk.Segment(0, a, 0, "large", pk.Block(a, 8<<20, 8<<20, "active_allocated"), pk.Block(a+8<<20, 12<<20, 0, "inactive")),
	}, [][]any{{
		pkEntry("alloc", p+5<<20, 6<<20),
		pkEntry("segment_alloc", a, 20<<20), pkEntry("alloc", a, 8<<20),
	}}, pkSettings))
	spec := "pytorch:version=2.11,max_split_size_mb=20"
	held, _ := replayRows(t, nil, "-s", spec, path)
	pooled, _ := replayRows(t, nil, "-s", spec, "--private-pools", path)
	assert.Equal(t, int64(1), held[0].DeviceMallocs)
	assert.Equal(t, int64(60<<20), held[0].Peak)
	assert.Equal(t, int64(2), pooled[0].DeviceMallocs, "the pool's own new segment")
	assert.Equal(t, int64(80<<20), pooled[0].Peak)
}
