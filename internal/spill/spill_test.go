package spill

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A File is made at the first write, in its directory, without a name
// left there, and reads back what was written where it was written.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	s := New(dir, "test-")
	require.NoError(t, s.ReadAt(nil, 0))
	at, err := s.Append([]byte("hello, "))
	require.NoError(t, err)
	assert.Equal(t, int64(0), at)
	at, err = s.Append([]byte("world"))
	require.NoError(t, err)
	assert.Equal(t, int64(7), at)
	require.NoError(t, s.WriteAt([]byte("W"), 7))
	assert.Equal(t, int64(12), s.Size())
	assert.True(t, strings.HasPrefix(filepath.Base(s.name), "test-"), s.name)
	assert.Equal(t, dir, filepath.Dir(s.name))
	if s.removed {
		left, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, left, "the name is removed at once")
	}
	b := make([]byte, 5)
	require.NoError(t, s.ReadAt(b, 7))
	assert.Equal(t, "World", string(b))
	assert.ErrorContains(t, s.ReadAt(b, 8), "bytes 8 to 13 of 12")
	assert.ErrorContains(t, s.WriteAt(b, 8), "bytes 8 to 13 of 12")
	require.NoError(t, s.Close())
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, left)
	assert.ErrorIs(t, s.ReadAt(b, 0), os.ErrClosed)
	assert.ErrorContains(t, s.ReadAt(b, 0), s.name)
}

// A File whose directory is missing fails its first write with an error
// that names the directory, and later ones with the same error.
func TestFileNoDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	s := New(dir, "test-")
	_, err := s.Append([]byte("x"))
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, dir)
	assert.Equal(t, err, s.Err())
	require.NoError(t, os.Mkdir(dir, 0o700))
	_, err2 := s.Append([]byte("x"))
	assert.Same(t, err, err2, "not tried again")
	left, _ := os.ReadDir(dir)
	assert.Empty(t, left)
	assert.NoError(t, s.Close())
}

// After a write fails, no later write reaches the file: each returns the
// first failure.
func TestFileWriteFails(t *testing.T) {
	s := New(t.TempDir(), "test-")
	_, err := s.Append([]byte("abc"))
	require.NoError(t, err)
	good := s.f
	defer good.Close()
	ro, err := os.Open(os.DevNull) // writes to it fail
	require.NoError(t, err)
	defer ro.Close()
	s.f = ro
	_, err = s.Append([]byte("def"))
	require.Error(t, err)
	assert.ErrorContains(t, err, "writing the temporary file "+os.DevNull)
	assert.Equal(t, int64(3), s.Size())
	s.f = good
	_, err2 := s.Append([]byte("def"))
	assert.Same(t, err, err2)
	assert.Same(t, err, s.WriteAt([]byte("x"), 0))
	fi, err := good.Stat()
	require.NoError(t, err)
	assert.Equal(t, int64(3), fi.Size(), "nothing written after the failure")
}

// A read back from a file cut short fails, naming the file; it is not
// kept, as writes' failures are.
func TestFileReadBackFails(t *testing.T) {
	s := New(t.TempDir(), "test-")
	_, err := s.Append(make([]byte, 100))
	require.NoError(t, err)
	require.NoError(t, s.f.Truncate(10))
	b := make([]byte, 50)
	err = s.ReadAt(b, 20)
	require.Error(t, err)
	assert.Regexp(t, `^reading back the temporary file .*test-\d+: EOF$`, err.Error())
	require.NoError(t, s.Err())
	require.NoError(t, s.ReadAt(b[:5], 0))
	require.NoError(t, s.Close())
}
