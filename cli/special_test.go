//go:build unix

package cli

// Tests of outputs and inputs that are not regular files: FIFOs, device
// nodes and symbolic links, and the signals that must stop a command
// waiting on them.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// feedFIFO makes a FIFO in a temporary directory and a goroutine that
// writes data into it once a reader opens it, and returns its path.
func feedFIFO(t *testing.T, name string, data []byte) string {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), name)
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		f.Write(data)
		f.Close()
	}()
	return fifo
}

// runWithin runs the command in-process, failing the test when it has not
// returned within d.
func runWithin(t *testing.T, d time.Duration, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Command{Stdin: stdin, Stdout: &out, Stderr: &errb}.Run(context.Background(), args)
		done <- result{code, out.String(), errb.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(d):
		t.Fatalf("%v: still running after %v", args, d)
	}
	return
}

// TestFIFOInputReadOnce: a trace in a FIFO is opened once, so that the
// command reads what its writer writes, and read into memory when the
// run reads it more than once (--offline, --min-capacity); standard input
// too. Each gives what the same trace in a file gives.
func TestFIFOInputReadOnce(t *testing.T) {
	data, err := os.ReadFile("testdata/tiny.csv")
	require.NoError(t, err)
	for _, a := range [][]string{
		{"inspect", "-f", "csv"},
		{"-s", "naive", "-f", "csv"},
		{"-s", "naive", "-s", "bestfit", "-f", "csv"},
		{"-s", "naive", "--offline", "--min-capacity", "--time-limit", "2s", "-f", "csv"},
		{"-s", "naive", "-s", "bestfit", "--offline", "--time-limit", "2s", "-f", "csv"},
		{"plan", "--no-search", "-f", "json"},
		{"convert"},
	} {
		tail := func(trace string) []string {
			if a[0] == "convert" {
				return []string{"convert", trace, "-"}
			}
			return append(slices.Clone(a), trace)
		}
		code, want, stderr := run(t, nil, tail("testdata/tiny.csv")...)
		require.Equal(t, 0, code, "%v: %s", a, stderr)
		want = strings.ReplaceAll(want, "testdata/tiny.csv", "TRACE")
		fifo := feedFIFO(t, "tiny.csv", data)
		code, got, stderr := runWithin(t, 30*time.Second, nil, tail(fifo)...)
		require.Equal(t, 0, code, "%v: %s", a, stderr)
		assert.Equal(t, normalize(want), normalize(strings.ReplaceAll(got, fifo, "TRACE")), "%v FIFO", a)
		code, got, stderr = runWithin(t, 30*time.Second, bytes.NewReader(data), tail("-")...)
		require.Equal(t, 0, code, "%v: %s", a, stderr)
		// How the outputs name standard input.
		got = strings.NewReplacer(`"-"`, `"TRACE"`, "'-,", "TRACE,", "\n-,", "\nTRACE,", "stdin", "TRACE").Replace(got)
		assert.Equal(t, normalize(want), normalize(got), "%v stdin", a)
	}
}

// TestInputGivenTwice: standard input, or a FIFO, given twice is refused,
// never read twice at once.
func TestInputGivenTwice(t *testing.T) {
	code, _, stderr := run(t, nil, "inspect", "-", "-")
	assert.Equal(t, 2, code)
	assert.Equal(t, "simulate: -: standard input given twice; it can be read once (see simulate inspect -h)\n", stderr)
	code, _, stderr = run(t, nil, "-s", "naive", "-", "testdata/tiny.csv", "-")
	assert.Equal(t, 2, code)
	assert.Equal(t, "simulate: -: standard input given twice; it can be read once (see simulate -h)\n", stderr)
	fifo := feedFIFO(t, "t.csv", []byte("op,id,size\nalloc,1,10\n"))
	link := filepath.Join(t.TempDir(), "link.csv")
	require.NoError(t, os.Symlink(fifo, link))
	code, _, stderr = runWithin(t, 30*time.Second, nil, "inspect", fifo, link)
	assert.Equal(t, 2, code)
	assert.Equal(t, "simulate: "+link+": given twice; a FIFO can be read once (see simulate inspect -h)\n", stderr)
	code, _, stderr = runWithin(t, 30*time.Second, nil, "plan", "--no-search", fifo, link)
	assert.Equal(t, 2, code)
	assert.Equal(t, "simulate: "+link+": given twice; a FIFO can be read once (see simulate plan -h)\n", stderr)
	code, _, stderr = run(t, nil, "plan", "-", "-")
	assert.Equal(t, 2, code)
	assert.Equal(t, "simulate: -: standard input given twice; it can be read once (see simulate plan -h)\n", stderr)
}

// TestInterruptWhileWaiting: a run waiting for a FIFO's other end, or for
// standard input that brings nothing, stops as soon as its context ends,
// with the status of an interrupt, and leaves the FIFO a FIFO.
func TestInterruptWhileWaiting(t *testing.T) {
	dir := t.TempDir()
	stdin, w := io.Pipe()
	defer w.Close()
	var fifos []string
	for i, a := range [][]string{
		{"inspect", "FIFO"},
		{"inspect", "-"},
		{"-s", "naive", "-"},
		{"-s", "naive", "-s", "bestfit", "--offline", "FIFO"},
		{"plan", "FIFO"},
		{"convert", "FIFO", filepath.Join(dir, "out.csv")},
		{"convert", "-", filepath.Join(dir, "out.csv")},
		{"gen", "--events", "10", "-o", "FIFO", "random"},
		{"convert", "testdata/tiny.csv", "FIFO"},
	} {
		// A FIFO of its own: an open left waiting by a case before
		// would be this case's other end.
		fifo := filepath.Join(dir, fmt.Sprintf("t%d.csv", i))
		require.NoError(t, syscall.Mkfifo(fifo, 0o644))
		fifos = append(fifos, fifo)
		for j := range a {
			a[j] = strings.ReplaceAll(a[j], "FIFO", fifo)
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(200*time.Millisecond, func() { cancel(&interruptError{syscall.SIGTERM}) })
		done := make(chan int, 1)
		var stderr bytes.Buffer
		go func() { done <- Command{Stdin: stdin, Stderr: &stderr}.Run(ctx, a) }()
		select {
		case code := <-done:
			assert.Equal(t, 143, code, "%v", a)
			assert.Equal(t, "simulate: interrupted by SIGTERM: stopped, output files left complete or as they were\n", stderr.String(), "%v", a)
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: still waiting 10 s after the interrupt", a)
		}
	}
	for _, fifo := range fifos {
		fi, err := os.Lstat(fifo)
		require.NoError(t, err)
		assert.Equal(t, fs.ModeNamedPipe, fi.Mode().Type())
		// Unblock the open left waiting on the FIFO.
		if f, err := os.OpenFile(fifo, os.O_RDWR, 0); err == nil {
			f.Close()
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, len(fifos), "nothing written beside the FIFOs")
}

// TestSignalWhileWaiting sends one SIGINT or SIGTERM to simulate blocked
// in the open of a FIFO, or reading standard input that brings nothing:
// it exits at once, 130 or 143, with one line saying why. Blocked in a
// write to a pipe that nobody reads, it exits once stopGrace has passed.
func TestSignalWhileWaiting(t *testing.T) {
	if os.Getenv("GPUALLOC_TEST_MAIN") == "1" {
		os.Exit(Main(strings.Fields(os.Getenv("GPUALLOC_TEST_ARGS")), os.Stdout, os.Stderr))
	}
	fifo := filepath.Join(t.TempDir(), "t.csv")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	for _, tc := range []struct {
		args   string
		sig    syscall.Signal
		code   int
		want   string
		stdout bool // written to a pipe that nobody reads
	}{
		{"inspect -", syscall.SIGINT, 130, "interrupted by SIGINT (Ctrl-C)", false},
		{"-s naive -", syscall.SIGTERM, 143, "interrupted by SIGTERM", false},
		{"inspect " + fifo, syscall.SIGINT, 130, "interrupted by SIGINT (Ctrl-C)", false},
		{"gen --events 10 -o " + fifo + " random", syscall.SIGTERM, 143, "interrupted by SIGTERM", false},
		{"gen --events 100000000 random", syscall.SIGINT, 130, "interrupted by SIGINT (Ctrl-C)", true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSignalWhileWaiting$")
		cmd.Env = append(os.Environ(), "GPUALLOC_TEST_MAIN=1", "GPUALLOC_TEST_ARGS="+tc.args)
		r, w, err := os.Pipe() // standard input that brings nothing
		require.NoError(t, err)
		cmd.Stdin = r
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		var unread *os.File // the read end of a stdout that nobody reads
		if tc.stdout {
			var out *os.File
			unread, out, err = os.Pipe()
			require.NoError(t, err)
			cmd.Stdout = out
			defer out.Close()
		}
		require.NoError(t, cmd.Start())
		r.Close()
		time.Sleep(500 * time.Millisecond) // the command starts and waits
		require.NoError(t, cmd.Process.Signal(tc.sig))
		start := time.Now()
		kill := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() }) // a test that fails, not one that hangs
		err = cmd.Wait()
		kill.Stop()
		w.Close()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, tc.args)
		assert.Equal(t, tc.code, ee.ExitCode(), "%s: %s", tc.args, stderr.String())
		if unread != nil {
			unread.Close()
			assert.Less(t, time.Since(start), stopGrace+2*time.Second, "%s: stopped after the grace", tc.args)
		} else {
			assert.Less(t, time.Since(start), 2*time.Second, "%s: stopped at once", tc.args)
		}
		assert.Equal(t, "simulate: "+tc.want+": stopped, output files left complete or as they were\n", stderr.String(), tc.args)
	}
}

// TestOutputDeviceFull: an output that fails as it is written (a device
// node with /dev/full's numbers) is an error that names the output, not
// Go's "write PATH"; the device stays a device.
func TestOutputDeviceFull(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.csv")
	err := syscall.Mknod(full, syscall.S_IFCHR|0o666, 1<<8|7)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("cannot make a device node here: %v", err)
	}
	require.NoError(t, err)
	for _, a := range [][]string{
		{"gen", "--events", "100000", "-o", full, "random"},
		{"convert", "testdata/tiny.csv", full},
		{"plan", "--no-search", "-o", full, "testdata/tiny.csv"},
	} {
		code, _, stderr := run(t, nil, a...)
		assert.Equal(t, 1, code, "%v", a)
		assert.Equal(t, "simulate: "+full+": no space left on device\n", stderr, "%v", a)
	}
	fi, err := os.Lstat(full)
	require.NoError(t, err)
	assert.Equal(t, fs.ModeDevice|fs.ModeCharDevice, fi.Mode().Type())
}

// TestFidelityFIFOOpenedOnce: fidelity checks every file before any work
// and reads a FIFO from that one open, not from a second that would wait
// for a writer that has gone.
func TestFidelityFIFOOpenedOnce(t *testing.T) {
	data, err := os.ReadFile("testdata/fidelity_match.pickle")
	require.NoError(t, err)
	code, want, stderr := run(t, nil, "fidelity", "-f", "json", "testdata/fidelity_match.pickle")
	require.Equal(t, 0, code, stderr)
	want = strings.ReplaceAll(want, "testdata/fidelity_match.pickle", "SNAPSHOT")
	fifo := feedFIFO(t, "match.pickle", data)
	code, got, stderr := runWithin(t, 30*time.Second, nil, "fidelity", "-f", "json", fifo)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, strings.ReplaceAll(got, fifo, "SNAPSHOT"))
	fifo = feedFIFO(t, "twice.pickle", data)
	code, _, stderr = runWithin(t, 30*time.Second, nil, "fidelity", fifo, fifo)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "given twice")
}
