package cli

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/internal/viewercheck"
	"github.com/gpualloc/gpualloc/snapshot"
)

// TestSnapshotExportStacks exports a real snapshot's replays, one read
// (one strategy) and shared by two: each alloc entry, its frees and its
// block carry frames of the input's, and the stacks are those the input
// has, each written once.
func TestSnapshotExportStacks(t *testing.T) {
	in := pk.SharedSnapshot(t, sharedSnapshotDir, "small_train_step.pickle")
	src := replaytest.ReadSnapshot(t, in)
	key := func(fs []snapshot.Frame) string {
		var b bytes.Buffer
		for _, f := range fs {
			b.WriteString(f.Filename + ":" + f.Name + "\n")
		}
		return b.String()
	}
	recorded := map[string]bool{}
	for id := range src.Stacks {
		recorded[key(src.StackFrames(snapshot.StackID(id)))] = true
	}
	for _, strategies := range [][]string{{"-s", "pytorch"}, {"-s", "pytorch", "-s", "naive"}} {
		for _, f := range exportSnapshots(t, len(strategies)/2, append(strategies, in)...) {
			out, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, viewercheck.Check(out, viewercheck.Options{}), f)
			s, err := snapshot.Read(bytes.NewReader(out), f)
			require.NoError(t, err)
			allocs := 0
			byAddr := map[uint64]snapshot.StackID{}
			for _, e := range s.Trace(0).All() {
				switch e.Action {
				case snapshot.Alloc:
					allocs++
					require.NotZero(t, e.Stack, "%s: alloc of %#x", f, e.Addr)
					require.True(t, recorded[key(s.StackFrames(e.Stack))], "%s: alloc of %#x", f, e.Addr)
					byAddr[e.Addr] = e.Stack
				case snapshot.FreeRequested, snapshot.FreeCompleted:
					if id, ok := byAddr[e.Addr]; ok {
						require.Equal(t, id, e.Stack, "%s: free of %#x", f, e.Addr)
					}
				}
			}
			assert.Positive(t, allocs, f)
			for _, sg := range s.Segments {
				for _, b := range sg.Blocks {
					if b.State == snapshot.ActiveAllocated {
						assert.NotZero(t, b.Stack, "%s: block at %#x", f, b.Address)
					}
				}
			}
			assert.LessOrEqual(t, len(s.Stacks), len(src.Stacks), f)
		}
	}
}
