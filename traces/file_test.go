package traces

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateOpen(t *testing.T) {
	dir := t.TempDir()
	evs := []Event{
		{Op: OpAlloc, ID: 1, Size: 4096, TimeUS: 0},
		{Op: OpAlloc, ID: 2, Slot: 1, Size: 100, TimeUS: 3},
		{Op: OpFree, ID: 1, Size: 4096, TimeUS: 9},
	}
	for _, name := range []string{"t.csv", "t.csv.gz"} {
		path := filepath.Join(dir, name)
		w, err := Create(path, ColOp, ColID, ColSize, ColTime)
		require.NoError(t, err)
		for _, ev := range evs {
			require.NoError(t, w.Write(ev))
		}
		require.NoError(t, w.Close())
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, strings.HasSuffix(name, ".gz"), bytes.HasPrefix(raw, []byte{0x1f, 0x8b}), name)

		r, err := Open(path, Options{})
		require.NoError(t, err)
		got, err := scanAll(t, r)
		require.NoError(t, err)
		require.NoError(t, r.Close())
		assert.Equal(t, evs, got)
		assert.Equal(t, path, r.Name())
	}
	_, err := Create(filepath.Join(dir, "no", "such", "dir.csv"))
	assert.Error(t, err)

	// A file that is not a trace is closed and reported.
	png := filepath.Join(dir, "x.png")
	require.NoError(t, os.WriteFile(png, []byte("\x89PNG\r\n\x1a\n"), 0o644))
	_, err = Open(png, Options{})
	assert.ErrorIs(t, err, ErrNotTrace)
	assert.EqualError(t, err, png+": not a trace in any known format ("+strings.Join(formatNames(), ", ")+")")
}

func TestOpen(t *testing.T) {
	_, err := Open("testdata/no-such-trace.csv", Options{})
	require.EqualError(t, err, "testdata/no-such-trace.csv: no such file or directory", "named by its path alone")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = Open(filepath.Join(t.TempDir(), "missing.csv"), Options{})
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = Open("testdata", Options{})
	assert.Error(t, err)
}
