package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// profileVar asks the command for a CPU profile.
const profileVar = "GPUALLOC_CPUPROFILE"

// GPUALLOC_CPUPROFILE=FILE writes a CPU profile of the command to FILE: a
// gzip stream, as runtime/pprof writes one.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	t.Setenv(profileVar, path)
	var out, errs bytes.Buffer
	if rc := run([]string{"strategies"}, &out, &errs); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errs.String())
	}
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
}

// A profile that cannot be written is one line naming the variable, and
// the command does not run.
func TestCPUProfileRefused(t *testing.T) {
	t.Setenv(profileVar, filepath.Join(t.TempDir(), "no", "such", "cpu.prof"))
	var out, errs bytes.Buffer
	if rc := run([]string{"strategies"}, &out, &errs); rc != 2 {
		t.Errorf("exit %d, want 2", rc)
	}
	if out.Len() > 0 {
		t.Errorf("the command ran: %q", out.String())
	}
	if e := errs.String(); !strings.HasPrefix(e, "simulate: GPUALLOC_CPUPROFILE: open ") || strings.Count(e, "\n") != 1 {
		t.Errorf("stderr %q", e)
	}
}
