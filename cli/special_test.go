//go:build unix

package cli

// Tests of outputs and inputs that are not regular files: FIFOs, device
// nodes and symbolic links, and the signals that must stop a command
// waiting on them.

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outputCommands are commands that write the output file OUT (a name
// ending in .csv), with what they write to standard output given "-".
var outputCommands = []struct {
	name      string
	args      func(out string) []string
	stdoutArg []string
}{
	{"gen", func(out string) []string {
		return []string{"gen", "--model", "tiny", "--steps", "1", "-o", out, "training"}
	},
		[]string{"gen", "--model", "tiny", "--steps", "1", "training"}},
	{"convert", func(out string) []string { return []string{"convert", "testdata/tiny.csv", out} },
		[]string{"convert", "testdata/tiny.csv", "-"}},
	{"convert minimalloc", func(out string) []string { return []string{"convert", "--to", "minimalloc", "testdata/tiny.csv", out} },
		[]string{"convert", "--to", "minimalloc", "testdata/tiny.csv", "-"}},
}

// TestOutputToFIFO: an output that is a FIFO is written through, to the
// process reading it, and stays a FIFO.
func TestOutputToFIFO(t *testing.T) {
	for _, c := range outputCommands {
		fifo := filepath.Join(t.TempDir(), "out.csv")
		require.NoError(t, syscall.Mkfifo(fifo, 0o644))
		got := make(chan []byte, 1)
		go func() {
			f, err := os.Open(fifo)
			if err != nil {
				got <- nil
				return
			}
			defer f.Close()
			b, _ := io.ReadAll(f)
			got <- b
		}()
		code, _, stderr := run(t, nil, c.args(fifo)...)
		require.Equal(t, 0, code, "%s: %s", c.name, stderr)
		_, want, _ := run(t, nil, c.stdoutArg...)
		select {
		case b := <-got:
			assert.Equal(t, want, string(b), c.name)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the FIFO's reader got no end of file", c.name)
		}
		fi, err := os.Lstat(fifo)
		require.NoError(t, err)
		assert.Equal(t, fs.ModeNamedPipe, fi.Mode().Type(), "%s: still a FIFO", c.name)
		entries, err := os.ReadDir(filepath.Dir(fifo))
		require.NoError(t, err)
		assert.Len(t, entries, 1, "%s: no temporary left", c.name)
	}
}

// mknodNull makes, in a temporary directory, a character device node
// with /dev/null's numbers (1, 3) named name, and returns its path; it
// skips the test where the process may not make device nodes.
func mknodNull(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	err := syscall.Mknod(path, syscall.S_IFCHR|0o666, 1<<8|3)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("cannot make a device node here: %v", err)
	}
	require.NoError(t, err)
	require.NoError(t, os.Chmod(path, 0o666)) // what the umask took
	return path
}

// TestOutputToDevice: an output that is a character device (a node made
// here, with /dev/null's numbers) is written through and stays a device
// with its permissions; plan's -o too.
func TestOutputToDevice(t *testing.T) {
	dev := mknodNull(t, "null.csv")
	check := func(what string) {
		fi, err := os.Lstat(dev)
		require.NoError(t, err, what)
		assert.Equal(t, fs.ModeDevice|fs.ModeCharDevice, fi.Mode().Type(), "%s: still a character device", what)
		assert.Equal(t, fs.FileMode(0o666), fi.Mode().Perm(), what)
		entries, err := os.ReadDir(filepath.Dir(dev))
		require.NoError(t, err)
		assert.Len(t, entries, 1, "%s: no temporary left", what)
	}
	for _, c := range outputCommands {
		code, _, stderr := run(t, nil, c.args(dev)...)
		require.Equal(t, 0, code, "%s: %s", c.name, stderr)
		check(c.name)
	}
	code, _, stderr := run(t, nil, "plan", "--no-search", "-o", dev, "testdata/tiny.csv")
	require.Equal(t, 0, code, stderr)
	check("plan")
}

// TestOutputThroughSymlink: an output that is a symbolic link replaces the
// file the link leads to, as an editor does, and the link stays; a
// dangling link makes that file.
func TestOutputThroughSymlink(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	target := filepath.Join(other, "target.csv")
	require.NoError(t, os.WriteFile(target, []byte("old\n"), 0o600))
	link := filepath.Join(dir, "link.csv")
	rel, err := filepath.Rel(dir, target)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(rel, link))
	dangling := filepath.Join(dir, "dangling.csv")
	require.NoError(t, os.Symlink(filepath.Join(other, "new.csv"), dangling))
	for _, c := range outputCommands {
		_, want, _ := run(t, nil, c.stdoutArg...)
		for _, l := range []string{link, dangling} {
			code, _, stderr := run(t, nil, c.args(l)...)
			require.Equal(t, 0, code, "%s: %s", c.name, stderr)
			fi, err := os.Lstat(l)
			require.NoError(t, err)
			assert.Equal(t, fs.ModeSymlink, fi.Mode().Type(), "%s: still a link", c.name)
			b, err := os.ReadFile(l)
			require.NoError(t, err)
			assert.Equal(t, want, string(b), c.name)
		}
		fi, err := os.Stat(target)
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm(), "%s: the target keeps its permissions", c.name)
	}
	for _, d := range []string{dir, other} {
		entries, err := os.ReadDir(d)
		require.NoError(t, err)
		assert.Len(t, entries, 2, "no temporary left in %s", d)
	}
}

// TestOutputRefusesBlockDeviceAndLoop: a block device (a disk) and links
// that go round are refused before any work.
func TestOutputRefusesBlockDeviceAndLoop(t *testing.T) {
	dir := t.TempDir()
	loop := filepath.Join(dir, "loop.csv")
	require.NoError(t, os.Symlink("loop.csv", loop))
	code, _, stderr := run(t, nil, "gen", "-o", loop, "random")
	assert.Equal(t, 1, code)
	assert.Equal(t, "simulate: -o "+loop+": too many levels of symbolic links\n", stderr)
	blk := filepath.Join(dir, "disk.csv")
	err := syscall.Mknod(blk, syscall.S_IFBLK|0o600, 7<<8|200)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("cannot make a device node here: %v", err)
	}
	require.NoError(t, err)
	code, _, stderr = run(t, nil, "gen", "-o", blk, "random")
	assert.Equal(t, 2, code)
	assert.Equal(t, "simulate: -o "+blk+": is a block device (a disk): refusing to write over it (see simulate gen -h)\n", stderr)
	fi, err := os.Lstat(blk)
	require.NoError(t, err)
	assert.Equal(t, fs.ModeDevice, fi.Mode().Type())
}
