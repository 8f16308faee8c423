package fidelity

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

// A snapshot whose trace cannot be read back from the temporary file of
// its read fails Run with that error, which names the file.
func TestRunReadBackFails(t *testing.T) {
	const n = 9*32768 + 2 // more pages than a trace keeps loaded
	tr := make([]snapshot.TraceEntry, 0, n)
	for range n / 2 {
		tr = append(tr, ent(snapshot.Alloc, sA, 512), ent(snapshot.FreeCompleted, sA, 512))
	}
	var buf bytes.Buffer
	require.NoError(t, snapshot.Write(&buf, &snapshot.Snapshot{
		Segments:     []snapshot.Segment{seg(0, sA, free(sA, 2*mib))},
		DeviceTraces: [][]snapshot.TraceEntry{tr},
	}, snapshot.WriteOptions{}))
	dir := t.TempDir()
	s, err := snapshot.ReadWith(&buf, "t.pickle", snapshot.ReadOptions{NoStacks: true, Compact: true, MaxHeld: 1, TempDir: dir})
	require.NoError(t, err)
	cutSpill(t)
	_, err = Run(s, "t.pickle", Options{New: PyTorch})
	var se *snapshot.Error
	require.ErrorAs(t, err, &se)
	assert.Regexp(t, `^t\.pickle: device_traces: reading back the temporary file .*gpualloc-snapshot-\d+: EOF$`, err.Error())
	assert.Contains(t, err.Error(), dir)
}

// cutSpill empties the unnamed temporary files of snapshot reads that the
// process holds open, so that reading them back fails; it skips the test
// where /proc does not show them.
func cutSpill(t *testing.T) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	cut := 0
	for _, fd := range fds {
		p := filepath.Join("/proc/self/fd", fd.Name())
		if l, err := os.Readlink(p); err == nil && strings.Contains(l, "gpualloc-snapshot-") && strings.HasSuffix(l, " (deleted)") {
			require.NoError(t, os.Truncate(p, 0))
			cut++
		}
	}
	if cut == 0 {
		t.Skip("no temporary file shows in /proc/self/fd")
	}
}
