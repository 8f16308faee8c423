package fidelity

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
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
	require.NoError(t, snapshot.Write(&buf, snapshot.New([]snapshot.Segment{seg(0, sA, free(sA, 2*mib))}, tr), snapshot.WriteOptions{}))
	dir := t.TempDir()
	s, err := snapshot.ReadWith(&buf, "t.pickle", snapshot.ReadOptions{NoStacks: true, MaxHeld: 1, TempDir: dir})
	require.NoError(t, err)
	pk.CutSpill(t)
	_, err = Run(s, "t.pickle", Options{New: PyTorch})
	var se *snapshot.Error
	require.ErrorAs(t, err, &se)
	assert.Regexp(t, `^t\.pickle: device_traces: reading back the temporary file .*gpualloc-snapshot-\d+: EOF$`, err.Error())
	assert.Contains(t, err.Error(), dir)
}
