package cli

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The commands that read PyTorch snapshots take --temp-dir, the directory
// of a long read's temporary file, and a directory that does not exist
// does not fail a read that needs none.
func TestTempDirFlag(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	snap := exportSnapshots(t, 1, "-s", "pytorch", "testdata/tiny.csv")[0]
	for _, args := range [][]string{
		{"inspect", "--temp-dir", missing, snap},
		{"fidelity", "--temp-dir", missing, snap},
		{"convert", "--temp-dir", missing, snap, filepath.Join(t.TempDir(), "out.pickle")},
		{"--temp-dir", missing, "-s", "pytorch", snap},
	} {
		code, _, stderr := run(t, nil, args...)
		assert.Equal(t, 0, code, "%v: %s", args, stderr)
		code, stdout, _ := run(t, nil, append([]string{args[0]}, "-h")...)
		if args[0] == "--temp-dir" {
			code, stdout, _ = run(t, nil, "-h")
		}
		assert.Equal(t, 0, code)
		assert.Contains(t, stdout, "--temp-dir DIR", args[0])
	}
}
