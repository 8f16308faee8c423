package cli

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// profileEnv is an environment of envCPUProfile=path alone.
func profileEnv(path string) func(string) (string, bool) {
	return func(k string) (string, bool) { return path, k == envCPUProfile }
}

// GPUALLOC_CPUPROFILE=FILE writes a CPU profile of the run to FILE: a
// gzip stream, as runtime/pprof writes one; unset, nothing is written.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	var errs bytes.Buffer
	stop, ok := startProfile(profileEnv(path), &errs)
	if !ok {
		t.Fatal(errs.String())
	}
	stop()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal("a profile is gzipped:", err)
	}
	if b, err := io.ReadAll(z); err != nil || len(b) == 0 {
		t.Fatalf("%d bytes of profile, %v", len(b), err)
	}
	if stop, ok := startProfile(profileEnv(""), &errs); !ok || errs.Len() > 0 {
		t.Fatalf("unset: %v %q", ok, errs.String())
	} else {
		stop()
	}
}

// A profile that cannot be written is one line naming the variable.
func TestCPUProfileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "cpu.prof")
	var errs bytes.Buffer
	if _, ok := startProfile(profileEnv(path), &errs); ok {
		t.Fatal("started")
	}
	if e := errs.String(); !strings.HasPrefix(e, "simulate: GPUALLOC_CPUPROFILE: open ") || strings.Count(e, "\n") != 1 {
		t.Errorf("stderr %q", e)
	}
}
