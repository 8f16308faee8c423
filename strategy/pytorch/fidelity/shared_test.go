package fidelity

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/strategy/pytorch/snapshot"
)

// sharedDir holds real PyTorch snapshots where the project's shared
// fixtures are checked out beside the repository.
const sharedDir = "../../../../shared/traces/pytorch"

func readShared(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	f, err := os.Open(filepath.Join(sharedDir, name))
	if os.IsNotExist(err) {
		t.Skipf("%s is absent: the shared snapshots are not here", sharedDir)
	}
	require.NoError(t, err)
	defer f.Close()
	s, err := snapshot.Read(f, name)
	require.NoError(t, err)
	return s
}

// TestSharedModel replays the shared snapshots through the test model.
func TestSharedModel(t *testing.T) {
	for _, name := range []string{"small_train_step.pickle", "forward_bf16_ctx128.pickle", "forward_ctx128.pickle", "segments_only.pickle"} {
		t.Run(name, func(t *testing.T) {
			s := readShared(t, name)
			res, err := Run(s, name, Options{New: newModel})
			require.NoError(t, err)
			t.Logf("%s: allocs %d/%d segments %d/%d rate %.4f initial %d segs %d live; extra %d; %v", name, res.AddressMatches, res.Allocs,
				res.SegmentMatches, res.SegmentAllocs, res.MatchRate, res.InitialSegs, res.InitialLive, res.ExtraMallocs, res.Mismatches)
			require.Equal(t, 1.0, res.MatchRate, "the test model takes every recorded decision")
		})
	}
}
