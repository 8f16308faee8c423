package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A trace of a whole run that leaves allocations live gets a note; a
// PyTorch snapshot, whose live allocations at its end were in use when it
// was taken, gets none, replayed alone or by the variants of a sweep.
func TestNeverFreedNote(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "run.csv")
	require.NoError(t, os.WriteFile(csv, []byte("op,id,size\nalloc,1,4096\nalloc,2,4096\nfree,2,\n"), 0o644))
	code, out, errs := run(t, nil, "-s", "naive", csv)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "run.csv: 1 allocation (4.00 KiB) never freed: every strategy's peak counts it; if the program frees it, the trace was cut short")

	snap := filepath.Join(sharedSnapshotDir, "small_train_step.pickle")
	if _, err := os.Stat(snap); err != nil {
		t.Skipf("no snapshot at %s", snap)
	}
	for _, args := range [][]string{{"-s", "naive", snap}, {"-s", "round:cutoff=20..21", snap}} {
		code, out, errs := run(t, nil, args...)
		require.Equal(t, 0, code, errs)
		assert.NotContains(t, out, "never freed", "%v", args)
	}
}
