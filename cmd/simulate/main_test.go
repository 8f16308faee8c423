package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// GPUALLOC_CPUPROFILE=FILE writes a CPU profile of the command to FILE: a
// gzip stream, as runtime/pprof writes one.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	t.Setenv("GPUALLOC_CPUPROFILE", path)
	var out, errs bytes.Buffer
	require.Equal(t, 0, run([]string{"strategies"}, &out, &errs), errs.String())
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	require.NoError(t, err, "a profile is gzipped")
	b, err := io.ReadAll(z)
	require.NoError(t, err)
	assert.NotEmpty(t, b)
}

// A profile that cannot be written is one line naming the variable, and
// the command does not run.
func TestCPUProfileRefused(t *testing.T) {
	t.Setenv("GPUALLOC_CPUPROFILE", filepath.Join(t.TempDir(), "no", "such", "cpu.prof"))
	var out, errs bytes.Buffer
	assert.Equal(t, 2, run([]string{"strategies"}, &out, &errs))
	assert.Empty(t, out.String())
	assert.True(t, strings.HasPrefix(errs.String(), "simulate: GPUALLOC_CPUPROFILE: open "), errs.String())
	assert.Equal(t, 1, strings.Count(errs.String(), "\n"))
}
