package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
)

// replayNaive writes text as the trace name in a directory of its own
// and returns the output of simulate -s naive on it, which must succeed.
func replayNaive(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	code, out, errs := run(t, nil, "-s", "naive", path)
	require.Equal(t, 0, code, errs)
	return out
}

// A trace of a whole run that leaves allocations live gets a note; a
// PyTorch snapshot, whose live allocations at its end were in use when it
// was taken, gets none, replayed alone or by the variants of a sweep.
func TestNeverFreedNote(t *testing.T) {
	out := replayNaive(t, "run.csv", "op,id,size\nalloc,1,4096\nalloc,2,4096\nfree,2,\n")
	assert.Contains(t, out, "run.csv: 1 allocation (4.00 KiB) never freed: every strategy's peak counts it; if the program frees it, the trace was cut short")

	snap := pk.SharedSnapshot(t, sharedSnapshotDir, "small_train_step.pickle")
	for _, args := range [][]string{{"-s", "naive", snap}, {"-s", "round:cutoff=20..21", snap}} {
		code, out, errs := run(t, nil, args...)
		require.Equal(t, 0, code, errs)
		assert.NotContains(t, out, "never freed", "%v", args)
	}
}

// The note on a trace of several devices counts every device's live
// allocations, as live_at_end does; a snapshot of several devices gets
// none, neither from its row nor from its devices'.
func TestNeverFreedNoteDevices(t *testing.T) {
	out := replayNaive(t, "two.csv", "op,id,size,device\nalloc,1,1024,0\nalloc,2,2048,1\nalloc,3,2048,1\nfree,3,,1\n")
	assert.Contains(t, out, "two.csv: 2 allocations (3.00 KiB) never freed: every strategy's peak counts them")

	snap := filepath.Join(t.TempDir(), "two.pickle")
	require.NoError(t, os.WriteFile(snap, pkPickle(pk.TwoDevices(true)), 0o644))
	code, out, errs := run(t, nil, "-s", "naive", snap)
	require.Equal(t, 0, code, errs)
	assert.NotContains(t, out, "never freed")
}
