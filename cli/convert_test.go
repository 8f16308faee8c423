package cli

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// TestConvertSnapshotCut cuts a real snapshot to the last entries of its
// device, as PyTorch's ring buffer does: the cut walks back from its
// segments without error, keeps its frames unless told not to, and is the
// tail of the original.
func TestConvertSnapshotCut(t *testing.T) {
	in := pk.SharedSnapshot(t, sharedSnapshotDir, "forward_ctx128.pickle")
	dir := t.TempDir()
	orig := replaytest.ReadSnapshot(t, in)
	for _, noFrames := range []bool{false, true} {
		out := filepath.Join(dir, "cut.pickle")
		args := []string{"convert", "--snapshot-entries", "500", in, out}
		if noFrames {
			args = append(args[:1], append([]string{"--no-frames"}, args[1:]...)...)
		}
		code, _, stderr := run(t, nil, args...)
		require.Equal(t, 0, code, stderr)
		cut := replaytest.ReadSnapshot(t, out)
		full := orig.Trace(0).Entries()
		require.Len(t, cut.Trace(0).Entries(), 500)
		for i, e := range cut.Trace(0).Entries() {
			o := full[len(full)-500+i]
			assert.Equal(t, o.Addr, e.Addr)
			assert.Equal(t, o.Action, e.Action)
			if noFrames {
				assert.Empty(t, cut.StackFrames(e.Stack))
			} else {
				assert.Equal(t, orig.StackFrames(o.Stack), cut.StackFrames(e.Stack))
			}
		}
		assert.Equal(t, len(orig.Segments), len(cut.Segments))
		st, err := cut.InitialState(0)
		require.NoError(t, err)
		assert.Empty(t, st.Unplaced)
	}
	code, _, stderr := run(t, nil, "convert", "--no-frames", in, filepath.Join(dir, "x.csv"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "want an OUT ending in .pickle")
}

func TestCutSnapshotKeepsAnUnknownCategory(t *testing.T) {
	e := func(a snapshot.Action, cat string, tm int64) snapshot.TraceEntry {
		return snapshot.TraceEntry{Action: a, Addr: 0x1000, Size: 512, TimeUS: tm, Category: cat}
	}
	s := snapshot.New(nil, []snapshot.TraceEntry{
		e(snapshot.SegmentAlloc, "unknown", 1), e(snapshot.Alloc, "activation", 2), e(snapshot.FreeRequested, "activation", 3),
		e(snapshot.FreeCompleted, "activation", 4), e(snapshot.Alloc, "activation", 5),
	})
	assert.Equal(t, []snapshot.TraceEntry{e(snapshot.FreeRequested, "activation", 3), e(snapshot.FreeCompleted, "activation", 4),
		e(snapshot.Alloc, "activation", 5), {Action: snapshot.TakeSnapshot, TimeUS: 5, Category: "unknown"}}[1:], streamed(cutSnapshot(s, 3, false), 0))
	// Without categories nothing is added.
	s = snapshot.New(nil, []snapshot.TraceEntry{e(snapshot.Alloc, "", 1), e(snapshot.Alloc, "", 2)})
	assert.Equal(t, []snapshot.TraceEntry{e(snapshot.Alloc, "", 2)}, streamed(cutSnapshot(s, 1, false), 0))
}

// streamed returns the entries of device d that st yields.
func streamed(st *snapshot.Stream, d int) []snapshot.TraceEntry {
	var out []snapshot.TraceEntry
	st.Entries(d, func(e *snapshot.TraceEntry) bool {
		out = append(out, *e)
		return true
	})
	return out
}
