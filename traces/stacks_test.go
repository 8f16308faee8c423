package traces

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// With Options.Stacks a snapshot's events carry the stacks of their
// entries, which the reader's tables give; without, none.
func TestSnapshotStacks(t *testing.T) {
	path := pk.SharedSnapshot(t, snapshotDir, "small_train_step.pickle")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	s, err := snapshot.Read(bytes.NewReader(data), path)
	require.NoError(t, err)
	for _, stacks := range []bool{false, true} {
		r, err := Open(path, Options{Stacks: stacks})
		require.NoError(t, err)
		frames, st := StacksOf(r)
		withStack := 0
		for r.Scan() {
			ev := r.Event()
			if ev.Stack != 0 {
				withStack++
				require.Less(t, int(ev.Stack), len(st))
				got := (&snapshot.Snapshot{Frames: frames, Stacks: st}).StackFrames(snapshot.StackID(ev.Stack))
				assert.NotEmpty(t, got)
			}
		}
		require.NoError(t, r.Err())
		require.NoError(t, r.Close())
		if !stacks {
			assert.Zero(t, withStack)
			assert.Nil(t, st)
			continue
		}
		assert.Positive(t, withStack)
		assert.Equal(t, len(s.Stacks), len(st))
	}
}
