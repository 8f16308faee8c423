package traces

import (
	"archive/zip"
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zipOf returns a zip archive of the named entries, each holding a few bytes.
func zipOf(t *testing.T, names ...string) []byte {
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for _, n := range names {
		f, err := w.Create(n)
		require.NoError(t, err)
		_, err = f.Write([]byte("\x80\x02}q\x00."))
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return b.Bytes()
}

// A zip archive is named for what it is: a file of torch.save, with the
// way to get a memory snapshot, or another archive to unzip.
func TestZipArchive(t *testing.T) {
	for _, tc := range []struct {
		data []byte
		msg  string
	}{
		{zipOf(t, "model/data.pkl", "model/byteorder", "model/data/0", "model/version"),
			`m.pt: a zip archive that torch.save wrote (model/data.pkl), not a trace: a PyTorch memory snapshot is the pickle that ` +
				`torch.cuda.memory._dump_snapshot("snapshot.pickle") writes after torch.cuda.memory._record_memory_history()`},
		{zipOf(t, "archive/.data/version", "archive/data.pkl"),
			`m.pt: a zip archive that torch.save wrote (archive/.data/version), not a trace: a PyTorch memory snapshot is`},
		{zipOf(t, "trace.csv"),
			`m.pt: a zip archive (its first entry: trace.csv), not a trace: unzip it and give the trace it holds (a PyTorch memory snapshot is`},
		{[]byte("PK\x03\x04"), `m.pt: a zip archive, not a trace: unzip it`},
	} {
		_, err := NewReader(bytes.NewReader(tc.data), "m.pt", Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.msg)
		assert.True(t, errors.Is(err, ErrNotTrace))
	}
	// Compressed, the same.
	_, err := NewReader(bytes.NewReader(gz(t, string(zipOf(t, "a/data.pkl")))), "m.pt.gz", Options{})
	assert.ErrorContains(t, err, "m.pt.gz: a zip archive that torch.save wrote")
}
