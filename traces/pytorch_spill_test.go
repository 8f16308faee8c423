package traces

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// A snapshot whose trace cannot be read back from the temporary file of
// its read fails the reader with an error that names the snapshot and
// the file, whether the rebuild of the start state or the events meet
// it; no panic, on no goroutine.
func TestSnapshotReadBackFails(t *testing.T) {
	const n = 10 * 32768 // ten pages of entries, more than a trace keeps loaded
	entries := make([]any, 0, n)
	for i := range n / 2 {
		a := uint64(0x7f0000000000 + (i%64)*512)
		entries = append(entries, pk.Entry("alloc", a, 512, 0, int64(2*i)), pk.Entry("free_completed", a, 512, 0, int64(2*i+1)))
	}
	data := pkPickle(pk.Snapshot(nil, [][]any{entries}, nil), 4, true)
	dir := t.TempDir()
	read := func() *snapshot.Snapshot {
		s, err := snapshot.ReadWith(bytes.NewReader(data), "t.pickle", snapshot.ReadOptions{NoStacks: true, MaxHeld: 1, TempDir: dir})
		require.NoError(t, err)
		return s
	}
	check := func(err error) {
		t.Helper()
		var pe *ParseError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "t.pickle", pe.Name)
		assert.Regexp(t, `^t\.pickle: device_traces: reading back the temporary file `+regexpQuote(dir)+`/gpualloc-snapshot-\d+: EOF$`, err.Error())
	}

	// Broken before the reader is made: the rebuild meets it.
	s := read()
	pk.CutSpill(t)
	r := snapshotReaderOf(s, "t.pickle", Options{})
	check(snapshotError(r.traceErr()))

	// Broken after: the events meet it.
	s = read()
	r = snapshotReaderOf(s, "t.pickle", Options{})
	require.NoError(t, r.traceErr())
	pk.CutSpill(t)
	for r.Scan() {
	}
	check(r.Err())
}

func regexpQuote(s string) string {
	return strings.NewReplacer(".", `\.`, "+", `\+`, "(", `\(`, ")", `\)`).Replace(s)
}
