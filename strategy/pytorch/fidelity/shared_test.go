package fidelity

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// sharedDir holds real PyTorch snapshots where the project's shared
// fixtures are checked out beside the repository.
const sharedDir = "../../../../shared/traces/pytorch"

func readShared(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	path := filepath.Join(sharedDir, name)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		t.Skipf("%s is absent: the shared snapshots are not here", sharedDir)
	}
	return replaytest.ReadSnapshot(t, path)
}

// TestShared replays the shared snapshots through the test model and the
// pytorch strategy: both take every recorded decision, and the file with no
// trace claims nothing.
func TestShared(t *testing.T) {
	for _, name := range []string{"small_train_step.pickle", "forward_bf16_ctx128.pickle", "forward_ctx128.pickle", "segments_only.pickle"} {
		for _, m := range []struct {
			name string
			new  NewFunc
		}{{"model", newModel}, {"pytorch", PyTorch}} {
			t.Run(name+"/"+m.name, func(t *testing.T) {
				s := readShared(t, name)
				res, err := Run(s, name, Options{New: m.new})
				require.NoError(t, err)
				require.Len(t, res, 1)
				r := res[0]
				t.Logf("%s: allocs %d/%d decisions %d segments %d/%d initial %d segs %d live; extra %d; %v", name, r.AddressMatches, r.Allocs,
					r.DecisionMatches, r.SegmentMatches, r.SegmentAllocs, r.InitialSegs, r.InitialLive, r.ExtraMallocs, r.Mismatches)
				if name == "segments_only.pickle" {
					assert.Nil(t, r.MatchRate)
					assert.Nil(t, r.DecisionRate)
					assert.Equal(t, NoHistory, r.Note)
					return
				}
				require.Empty(t, r.Mismatches)
				assert.Equal(t, r.Allocs, r.AddressMatches)
				assert.Equal(t, r.Allocs, r.DecisionMatches)
				assert.Equal(t, r.SegmentAllocs, r.SegmentMatches)
				assert.Equal(t, 1.0, *r.MatchRate)
				assert.Equal(t, 1.0, *r.DecisionRate)
			})
		}
	}
}
