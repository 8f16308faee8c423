package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
)

// TestRecordedOOM replays a snapshot that records an out-of-memory error:
// without --capacity the device has the memory that the error tells (1 MiB
// free beside a 2 MiB segment), and the pytorch strategy fails the same
// request, 3 MiB; with --capacity it does not.
func TestRecordedOOM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oom.pickle")
	snap := pk.Snapshot([]any{pk.Segment(0, fA0, 0, "small", pk.Block(fA0, 512, 500, "active_allocated"), pk.Block(fA0+512, 2<<20-512, 0, "inactive"))},
		[][]any{{pkEntry("segment_alloc", fA0, 2<<20), pkEntry("alloc", fA0, 500),
			pk.Dict{{K: "action", V: "oom"}, {K: "device_free", V: 1 << 20}, {K: "size", V: 3 << 20}, {K: "stream", V: 0}}}}, pkSettings)
	require.NoError(t, os.WriteFile(path, pkPickle(snap), 0o644))
	for _, tc := range []struct {
		args     []string
		capacity int64
		ooms     int64
	}{
		{[]string{"-s", "pytorch"}, 3 << 20, 1},
		// Two strategies share one decoding of the trace.
		{[]string{"-s", "pytorch", "-s", "pytorch:max_split_size_mb=20"}, 3 << 20, 1},
		{[]string{"-s", "pytorch", "--capacity", "80GiB"}, 80 << 30, 0},
	} {
		var res []struct {
			Capacity int64 `json:"capacity_bytes"`
			OOMs     int64 `json:"ooms"`
			Allocs   int64 `json:"allocs"`
		}
		runJSON(t, nil, &res, append(append([]string{"-f", "json"}, tc.args...), path)...)
		require.NotEmpty(t, res)
		for _, r := range res {
			assert.Equal(t, tc.capacity, r.Capacity, "%v", tc.args)
			assert.Equal(t, tc.ooms, r.OOMs, "%v", tc.args)
			assert.Equal(t, int64(2), r.Allocs, "the alloc and the recorded request")
		}
	}

	// Fidelity: the strategy fails the recorded request too.
	var fr []struct {
		OOMs       int64 `json:"ooms"`
		OOMMatches int64 `json:"oom_matches"`
	}
	runJSON(t, nil, &fr, "fidelity", "-f", "json", path)
	require.Len(t, fr, 1)
	assert.Equal(t, int64(1), fr[0].OOMs)
	assert.Equal(t, int64(1), fr[0].OOMMatches)
}
