package cli

// Tests of what the command does with hostile or mistaken input: flags as
// the help writes them, inputs and outputs checked before any work, report
// directories written whole, interrupts, and the errors that say what
// happened.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quick are the flags of a report that is fast to write.
var quick = []string{"-s", "naive", "--plot-format", "svg", "--figures", "peak"}

func args(extra ...string) []string { return append(slices.Clone(quick), extra...) }

// TestLogYWithSpace: "--log-y on" parses as the help writes it, and
// "--log-y" alone still means on.
func TestLogYWithSpace(t *testing.T) {
	for _, a := range [][]string{
		{"--log-y", "on", "-o", "DIR", "testdata/tiny.csv"},
		{"--log-y", "off", "-o", "DIR", "testdata/tiny.csv"},
		{"-o", "DIR", "testdata/tiny.csv", "--log-y"},
		{"--log-y", "-o", "DIR", "testdata/tiny.csv"},
	} {
		dir := filepath.Join(t.TempDir(), "r")
		a = slices.Clone(a)
		a[slices.Index(a, "DIR")] = dir
		code, _, stderr := run(t, nil, args(a...)...)
		assert.Equal(t, 0, code, "%v: %s", a, stderr)
		assert.Empty(t, stderr, "%v", a)
	}
	code, _, stderr := run(t, nil, args("--log-y", "maybe", "testdata/tiny.csv")...)
	assert.Equal(t, 2, code, "maybe is a value --log-y does not take, and no file")
	assert.Equal(t, "simulate: --log-y maybe: want auto, on or off (--log-y alone is on; and maybe is no file) (see simulate -h)\n", stderr)
}

// TestBoolFlagValues: a boolean flag followed by a value it reads takes
// it ("--lenient false"); followed by a word that is neither such a value
// nor a file, it is bad usage that names the flag, not a missing trace.
func TestBoolFlagValues(t *testing.T) {
	_, want, _ := run(t, nil, "-s", "naive", "-f", "csv", "testdata/tiny.csv")
	for _, a := range [][]string{
		{"--lenient", "false", "-s", "naive", "-f", "csv", "testdata/tiny.csv"},
		{"--offline=false", "--lenient", "-s", "naive", "-f", "csv", "testdata/tiny.csv"},
		{"-s", "naive", "-f", "csv", "--lenient", "testdata/tiny.csv"},
	} {
		code, got, stderr := run(t, nil, a...)
		require.Equal(t, 0, code, "%v: %s", a, stderr)
		assert.Equal(t, normalize(want), normalize(got), "%v", a)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lenient", "yes", "testdata/tiny.csv"}, "simulate: --lenient yes: the flag takes no value: write --lenient alone for true, or --lenient=false (and yes is no file) (see simulate -h)\n"},
		{[]string{"--offline", "no", "testdata/tiny.csv"}, "simulate: --offline no: the flag takes no value: write --offline alone for true, or --offline=false (and no is no file) (see simulate -h)\n"},
		{[]string{"merge", "--title", "maybe", "-o", "x", "testdata"}, "simulate: --title maybe: the flag takes no value: write --title alone for true, or --title=false (and maybe is no file) (see simulate merge -h)\n"},
		{[]string{"convert", "--no-frames", "off", "a.pickle", "b.pickle"}, "simulate: --no-frames off: the flag takes no value: write --no-frames alone for true, or --no-frames=false (and off is no file) (see simulate convert -h)\n"},
		{[]string{"--lenient", "missing.csv"}, "simulate: missing.csv: no such file or directory\n"},
	} {
		code, stdout, stderr := run(t, nil, tc.args...)
		assert.NotEqual(t, 0, code, "%v", tc.args)
		assert.Empty(t, stdout, "%v", tc.args)
		assert.Equal(t, tc.want, stderr, "%v", tc.args)
	}
}

// TestInputsCheckedFirst: a missing trace, or an -o that cannot be a
// report's directory, fails before any replay: nothing on stdout, no
// report directory.
func TestInputsCheckedFirst(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	out := filepath.Join(tmp, "out")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{args("-o", out, "testdata/tiny.csv", "testdata/nosuch.csv"), 1, "simulate: testdata/nosuch.csv: no such file or directory\n"},
		{args("-o", out, "trainin"), 1, "simulate: trainin: no such file or directory (did you mean the bundled trace training?)\n"},
		{args("-o", out, "testdata"), 1, "simulate: testdata: is a directory, not a file\n"},
		{args("-o", file, "testdata/tiny.csv"), 2, "simulate: -o " + file + ": not a directory: a report is a directory of files (see simulate -h)\n"},
		{args("-o", filepath.Join(file, "sub"), "testdata/tiny.csv"), 2, "simulate: -o " + filepath.Join(file, "sub") + ": cannot be created: " + file + " is not a directory (see simulate -h)\n"},
		{args("-o", "testdata/tiny.csv", "testdata/tiny.csv"), 2, "simulate: -o testdata/tiny.csv: is an input of the run too; name another directory (see simulate -h)\n"},
	} {
		code, stdout, stderr := run(t, nil, tc.args...)
		assert.Equal(t, tc.code, code, "%v", tc.args)
		assert.Empty(t, stdout, "%v: no work done", tc.args)
		assert.Equal(t, tc.want, stderr)
		assert.NoDirExists(t, out)
	}
}

// TestFailedRunWritesNoReport: a run in which a replay fails writes no
// report, which would look complete, and says so.
func TestFailedRunWritesNoReport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := run(t, nil, args("-o", out, "testdata/tiny.csv", "testdata/badsize.csv")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "testdata/tiny.csv", "the table of the replays that succeeded")
	assert.Contains(t, stderr, "(no report written to "+out+")")
	assert.NoDirExists(t, out)
}

// reportFiles returns the files of dir, and the strategies that its
// summary.csv, summary.json and manifest give.
func reportFiles(t *testing.T, dir string) (files []string, csvSpecs, jsonSpecs []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		files = append(files, e.Name())
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.csv"))
	require.NoError(t, err)
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	require.NoError(t, err)
	col := slices.Index(rows[0], "strategy")
	for _, r := range rows[1:] {
		csvSpecs = append(csvSpecs, r[col])
	}
	b, err = os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	var results []struct {
		Strategy string `json:"strategy"`
	}
	require.NoError(t, json.Unmarshal(b, &results))
	for _, r := range results {
		jsonSpecs = append(jsonSpecs, r.Strategy)
	}
	m, err := os.ReadFile(filepath.Join(dir, ".report-files"))
	require.NoError(t, err)
	for _, f := range strings.Fields(string(m)) {
		assert.Contains(t, files, f, "the manifest lists what the directory holds")
	}
	return files, csvSpecs, jsonSpecs
}

// TestReportDirectory: a second run into a report's directory is refused
// and leaves it as it was; with --force it replaces the report whole, stale
// figures gone and other files kept; a shard into a full report likewise.
func TestReportDirectory(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, _, stderr := run(t, nil, "-s", "naive", "--plot-format", "svg", "--figures", "peak,memory", "-o", out, "testdata/tiny.csv")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, os.WriteFile(filepath.Join(out, "notes.txt"), []byte("mine"), 0o644))
	before, _, _ := reportFiles(t, out)
	require.Contains(t, before, "tiny-memory.svg")

	code, stdout, stderr := run(t, nil, "-s", "round", "-o", out, "testdata/tiny.csv")
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "simulate: -o "+out+": holds a report already (.report-files): name another directory, or replace it with --force (see simulate -h)\n", stderr)
	after, specs, _ := reportFiles(t, out)
	assert.Equal(t, before, after)
	assert.Equal(t, "naive", strings.SplitN(specs[0], ":", 2)[0])

	code, _, stderr = run(t, nil, "--force", "-s", "round", "--plot-format", "svg", "--figures", "peak", "-o", out, "testdata/tiny.csv")
	require.Equal(t, 0, code, stderr)
	after, specs, _ = reportFiles(t, out)
	assert.NotContains(t, after, "tiny-memory.svg", "the old report's figure is gone")
	assert.Contains(t, after, "notes.txt", "files not of the report stay")
	assert.Equal(t, "round", strings.SplitN(specs[0], ":", 2)[0])
	assert.False(t, slices.ContainsFunc(after, func(f string) bool { return strings.HasPrefix(f, ".report-tmp") || f == ".report.lock" }), "%v", after)

	code, _, stderr = run(t, nil, "--shard", "1/2", "-s", "naive", "-o", out, "testdata/tiny.csv")
	assert.Equal(t, 2, code, "a shard into a full report: %s", stderr)
	code, _, stderr = run(t, nil, "--force", "--shard", "1/2", "-s", "naive", "-s", "round", "-o", out, "testdata/tiny.csv")
	require.Equal(t, 0, code, stderr)
	after, _, _ = reportFiles(t, out)
	assert.NotContains(t, after, "index.html", "the full report's index is gone")
	assert.Contains(t, after, ShardFile)
}

// TestConcurrentReports: runs writing one directory at once never leave a
// report mixed of two runs: without --force one wins and the others say
// that another run wrote it; with --force the last wins whole.
func TestConcurrentReports(t *testing.T) {
	specs := []string{"naive", "round", "unpooled", "bestfit"}
	for _, force := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "out")
		codes := make([]int, len(specs))
		errs := make([]string, len(specs))
		var wg sync.WaitGroup
		for i, s := range specs {
			wg.Go(func() {
				a := []string{"-s", s, "--plot-format", "svg", "--figures", "peak", "-o", out, "testdata/tiny.csv"}
				if force {
					a = append(a, "--force")
				}
				codes[i], _, errs[i] = run(t, nil, a...)
			})
		}
		wg.Wait()
		wins := 0
		for i, c := range codes {
			if c == 0 {
				wins++
				continue
			}
			assert.False(t, force, "with --force every run succeeds: %s", errs[i])
			assert.Regexp(t, `^simulate: (-o )?`+regexpQuote(out)+`: (another run wrote a report into it meanwhile|holds a report already)`, errs[i])
		}
		if !force {
			assert.GreaterOrEqual(t, wins, 1)
		}
		_, csvSpecs, jsonSpecs := reportFiles(t, out)
		require.Len(t, csvSpecs, 1)
		assert.Equal(t, csvSpecs, jsonSpecs, "summary.csv and summary.json of one run")
		idx, err := os.ReadFile(filepath.Join(out, "index.html"))
		require.NoError(t, err)
		assert.Contains(t, string(idx), ">"+strings.SplitN(csvSpecs[0], ":", 2)[0]+"</td>")
	}
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestOutputOverInput: no command writes its output over its input.
func TestOutputOverInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "p.csv")
	b, err := os.ReadFile("testdata/minimalloc.csv")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(in, b, 0o644))
	for _, a := range [][]string{
		{"plan", "-o", in, in},
		{"convert", in, in},
		{"merge", "-o", dir, dir},
	} {
		code, stdout, stderr := run(t, nil, a...)
		assert.Equal(t, 2, code, "%v: %s", a, stderr)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "is an input of the run too", "%v", a)
		got, err := os.ReadFile(in)
		require.NoError(t, err)
		assert.Equal(t, b, got, "%v: the input is untouched", a)
	}
	code, _, stderr := run(t, nil, "plan", "-o", dir, in)
	assert.Equal(t, 2, code)
	assert.Equal(t, "simulate: -o "+dir+": is a directory; want a file (see simulate plan -h)\n", stderr)
}

// TestInterrupted: a run whose context ends stops, writes nothing, and
// exits 130 (128 + N after signal N), saying so in words.
func TestInterrupted(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.csv")
	require.NoError(t, os.WriteFile(old, []byte("what was there\n"), 0o644))
	for _, tc := range []struct {
		cause error
		code  int
		want  string
	}{
		{context.Canceled, 130, "simulate: interrupted: stopped, output files left complete or as they were\n"},
		{&interruptError{os.Interrupt}, 130, "simulate: interrupted by SIGINT (Ctrl-C): stopped, output files left complete or as they were\n"},
		{&interruptError{syscall.SIGTERM}, 143, "simulate: interrupted by SIGTERM: stopped, output files left complete or as they were\n"},
	} {
		for _, a := range [][]string{
			{"gen", "--events", "100000", "-o", old, "random"},
			{"gen", "--events", "100000", "random"},
			{"-o", filepath.Join(dir, "report"), "testdata/tiny.csv"},
			{"inspect", "testdata/tiny.csv"},
			{"convert", "testdata/tiny.csv", old},
			{"plan", "-o", old, "testdata/tiny.csv"},
			{"merge", "-o", filepath.Join(dir, "merged"), "testdata"},
		} {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(tc.cause)
			var stdout, stderr bytes.Buffer
			code := Command{Stdout: &stdout, Stderr: &stderr}.Run(ctx, a)
			assert.Equal(t, tc.code, code, "%v", a)
			assert.Equal(t, tc.want, stderr.String(), "%v", a)
			assert.Less(t, stdout.Len(), 64<<10, "%v: at most what one buffer held", a)
		}
	}
	b, err := os.ReadFile(old)
	require.NoError(t, err)
	assert.Equal(t, "what was there\n", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file or report left: %v", entries)
}

// TestSignalDuringGen sends SIGTERM to a simulate gen writing over a file:
// it exits 143 at once, and the file holds what it held before.
func TestSignalDuringGen(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM")
	}
	if os.Getenv("GPUALLOC_TEST_MAIN") == "1" {
		os.Exit(Main(strings.Fields(os.Getenv("GPUALLOC_TEST_ARGS")), os.Stdout, os.Stderr))
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "old.csv.gz")
	require.NoError(t, os.WriteFile(out, []byte("what was there\n"), 0o644))
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalDuringGen$")
	cmd.Env = append(os.Environ(), "GPUALLOC_TEST_MAIN=1", "GPUALLOC_TEST_ARGS=gen --events 1000000000 -o "+out+" random")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	// Wait for the temporary to grow: the generator is writing.
	for deadline := time.Now().Add(time.Minute); ; {
		entries, _ := os.ReadDir(dir)
		if len(entries) == 2 {
			if fi, err := entries[0].Info(); err == nil && fi.Size() > 0 && strings.HasSuffix(entries[0].Name(), ".tmp") {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "no temporary written")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	start := time.Now()
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 143, ee.ExitCode(), stderr.String())
	assert.Less(t, time.Since(start), 10*time.Second, "stopped promptly")
	assert.Equal(t, "simulate: interrupted by SIGTERM: stopped, output files left complete or as they were\n", stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "what was there\n", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "the temporary is gone")
}

// TestGenIsAtomic: gen's output file appears whole, with the permissions
// of a new file, and reads back as what gen writes to stdout.
func TestGenIsAtomic(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"t.csv", "t.csv.gz"} {
		out := filepath.Join(dir, name)
		code, _, stderr := run(t, nil, "gen", "--model", "tiny", "--steps", "1", "-o", out, "training")
		require.Equal(t, 0, code, stderr)
		_, want, _ := run(t, nil, "gen", "--model", "tiny", "--steps", "1", "training")
		f, err := os.Open(out)
		require.NoError(t, err)
		var r io.Reader = f
		if strings.HasSuffix(name, ".gz") {
			r, err = gzip.NewReader(f)
			require.NoError(t, err)
		}
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		f.Close()
		assert.Equal(t, want, string(got))
		fi, err := os.Stat(out)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "no temporary left")
	code, _, stderr := run(t, nil, "gen", "-o", dir, "training")
	assert.Equal(t, 2, code)
	assert.Equal(t, "simulate: -o "+dir+": is a directory; want a file (see simulate gen -h)\n", stderr)
}

// TestMistypedCommand: a misspelt subcommand is named, and errors of a
// subcommand point to its own help.
func TestMistypedCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stratgies"}, "simulate: stratgies: no such command or file; did you mean 'simulate strategies'? (see simulate -h)\n"},
		{[]string{"inpsect", "x.csv"}, "simulate: inpsect: no such command or file; did you mean 'simulate inspect'? (see simulate -h)\n"},
		{[]string{"fidelty"}, "simulate: fidelty: no such command or file; did you mean 'simulate fidelity'? (see simulate -h)\n"},
		{[]string{"merge", "-o", "x", "--nosuch"}, "simulate: unknown flag: --nosuch (see simulate merge -h)\n"},
		{[]string{"tune", "--capacity", "big", "training"}, "simulate: --capacity \"big\": want bytes or a number with a unit such as MiB (see simulate tune -h)\n"},
	} {
		code, _, stderr := run(t, nil, tc.args...)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Equal(t, tc.want, stderr)
	}
	code, stdout, _ := run(t, nil, "help", "gen")
	assert.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(stdout, "usage: simulate gen "), stdout)
	// A file of a command's near name is a trace.
	tiny := filepath.Join(testdataDir(t), "tiny.csv")
	t.Chdir(t.TempDir())
	b, err := os.ReadFile(tiny)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile("stratgies", b, 0o644))
	code, _, stderr := run(t, nil, "-s", "naive", "stratgies")
	assert.Equal(t, 0, code, stderr)
}

// testdataDir is the absolute path of testdata, for tests that change
// directory.
func testdataDir(t *testing.T) string {
	d, err := filepath.Abs("testdata")
	require.NoError(t, err)
	return d
}

// TestBundledNameBeatsDirectory: after -o training made a directory of
// that name, "training" is still the bundled trace; a file of that name
// wins.
func TestBundledNameBeatsDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	code, _, stderr := run(t, nil, args("-o", "training", "training")...)
	require.Equal(t, 0, code, stderr)
	require.DirExists(t, "training")
	code, stdout, stderr := run(t, nil, "-s", "naive", "-f", "csv", "training")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "\ntraining,\"naive:")
}

// TestSizes: fractional sizes with a unit, and errors that say what is
// wrong with a size or a fraction.
func TestSizes(t *testing.T) {
	var res []struct {
		CapacityBytes int64 `json:"capacity_bytes"`
	}
	runJSON(t, nil, &res, "-s", "naive", "-f", "json", "--capacity", "5.41GiB", "testdata/tiny.csv")
	require.NotEmpty(t, res)
	assert.Equal(t, int64(5808943268), res[0].CapacityBytes)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--capacity", "8EiB"}, `simulate: --capacity "8EiB": more than the largest size, 9223372036854775807 bytes (8 EiB less one byte) (see simulate -h)` + "\n"},
		{[]string{"--capacity", "0"}, `simulate: --capacity "0": want a size above 0, such as 80GiB (see simulate -h)` + "\n"},
		{[]string{"--capacity", "-1GiB"}, `simulate: --capacity "-1GiB": negative (see simulate -h)` + "\n"},
		{[]string{"--capacity", "1.5"}, `simulate: --capacity "1.5": not a whole number of bytes (a fraction needs a unit, as in 1.5KiB) (see simulate -h)` + "\n"},
		{[]string{"gen", "--max-size", "99999EB", "random"}, `simulate: --max-size "99999EB": more than the largest size, 9223372036854775807 bytes (8 EiB less one byte) (see simulate gen -h)` + "\n"},
		{[]string{"tune", "--memory-fraction", "0", "training"}, "simulate: --memory-fraction 0: want a number in (0, 1]; leave the flag out for no fraction (see simulate tune -h)\n"},
		{[]string{"tune", "--memory-fraction", "-0.5", "training"}, "simulate: --memory-fraction -0.5: want a number in (0, 1]; leave the flag out for no fraction (see simulate tune -h)\n"},
	} {
		code, _, stderr := run(t, nil, tc.args...)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Equal(t, tc.want, stderr)
	}
}

// TestFidelityNeedsSnapshot: fidelity on a bundled trace's name says
// what it needs.
func TestFidelityNeedsSnapshot(t *testing.T) {
	code, _, stderr := run(t, nil, "fidelity", "training")
	assert.Equal(t, 1, code)
	assert.Equal(t, "simulate: training: a bundled trace, not a PyTorch snapshot: fidelity needs a snapshot, the file torch.cuda.memory._dump_snapshot writes\n", stderr)
	code, _, stderr = run(t, nil, "fidelity", "testdata/nosuch.pickle")
	assert.Equal(t, 1, code)
	assert.Equal(t, "simulate: testdata/nosuch.pickle: no such file or directory\n", stderr)
}

// TestMergeRefusesDamagedShards: a shard file that is no gzip, is cut
// short, or holds a null row is refused with what is wrong with it.
func TestMergeRefusesDamagedShards(t *testing.T) {
	dirs := runShards(t, 2)
	path, good, plain := shardBytes(t, dirs[1])
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	var d map[string]any
	require.NoError(t, json.Unmarshal(plain, &d))
	rows := d["rows"].([]any)
	rows[1] = nil
	nullRow, err := json.Marshal(d)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"plain JSON", plain, "simulate: merge: " + path + ": not gzip-compressed (what simulate --shard writes): it starts with \"{\\\"run\\\":\\\""},
		{"empty", nil, "simulate: merge: " + path + ": not gzip-compressed (what simulate --shard writes): the file is empty\n"},
		{"cut short", good[:len(good)/2], "simulate: merge: " + path + ": cut short (the shard's run did not finish writing it?): unexpected EOF\n"},
		{"null row", gz(nullRow), "simulate: merge: " + path + ": row 2 of " + itoa(len(rows)) + " has no result (no trace or strategy): the file is damaged; run the shard again\n"},
		{"not JSON", gz([]byte("{\"run\": nope}")), "simulate: merge: " + path + ": not the JSON simulate --shard writes: byte 10 of the decompressed data: invalid character 'o' in literal null (expecting 'u')\n"},
	} {
		require.NoError(t, os.WriteFile(path, tc.data, 0o644))
		out := filepath.Join(t.TempDir(), "out")
		code, stdout, stderr := run(t, nil, "merge", "-o", out, dirs[0], dirs[1])
		assert.Equal(t, 1, code, tc.name)
		assert.Empty(t, stdout, tc.name)
		assert.True(t, strings.HasPrefix(stderr, tc.want), "%s: %s", tc.name, stderr)
		assert.NoDirExists(t, out, tc.name)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// shardBytes returns the path of the shard file in dir, its bytes as
// simulate --shard wrote them, and those bytes decompressed.
func shardBytes(t *testing.T, dir string) (path string, good, plain []byte) {
	t.Helper()
	path = filepath.Join(dir, ShardFile)
	good, err := os.ReadFile(path)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(good))
	require.NoError(t, err)
	plain, err = io.ReadAll(zr)
	require.NoError(t, err)
	return path, good, plain
}

// TestMergeRefusesBadShardFields: a shard file whose fields that place it
// in its run are missing or out of range is refused as not what
// simulate --shard writes, never a crash.
func TestMergeRefusesBadShardFields(t *testing.T) {
	dirs := runShards(t, 2)
	path, _, plain := shardBytes(t, dirs[1])
	prefix := "simulate: merge: " + path + ": not the JSON simulate --shard writes: "
	for _, tc := range []struct {
		field string
		value any // nil: the field is removed
		want  string
	}{
		{"shards", 0, `"shards" is 0 or missing, want 1 or more`},
		{"shards", nil, `"shards" is 0 or missing, want 1 or more`},
		{"shards", -3, `"shards" is -3 or missing, want 1 or more`},
		{"shard", nil, `"shard" is 0 or missing, want 1 to "shards" (2)`},
		{"shard", 3, `"shard" is 3 or missing, want 1 to "shards" (2)`},
		{"run", nil, `"run" is empty or missing`},
		{"jobs", -1, `"jobs" is -1, want 0 or more`},
		{"first", -1, `"first" is -1, want 0 to "jobs" (10)`},
		{"first", 1 << 62, `"first" is 4611686018427387904, want 0 to "jobs" (10)`},
		{"jobs", 0, `"first" is 5, want 0 to "jobs" (0)`},
	} {
		var d map[string]any
		require.NoError(t, json.Unmarshal(plain, &d))
		if tc.value == nil {
			delete(d, tc.field)
		} else {
			d[tc.field] = tc.value
		}
		b, err := json.Marshal(d)
		require.NoError(t, err)
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		out := filepath.Join(t.TempDir(), "out")
		code, stdout, stderr := run(t, nil, "merge", "-o", out, dirs[0], dirs[1])
		assert.Equal(t, 1, code, "%s %v", tc.field, tc.value)
		assert.Empty(t, stdout)
		assert.Equal(t, prefix+tc.want+"\n", stderr, "%s %v", tc.field, tc.value)
		assert.NoDirExists(t, out)
	}
}

// TestMergeHugeShardCount: shards of a run split in more parts than it
// has replays, and a shard count near the largest int, neither overflow
// nor list every missing shard.
func TestMergeHugeShardCount(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	n := "9223372036854775807"
	code, _, stderr := run(t, nil, "-s", "naive", "--shard", n+"/"+n, "--figures", "peak", "--plot-format", "svg", "-o", dir, "testdata/tiny.csv")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run(t, nil, "merge", "-o", filepath.Join(t.TempDir(), "out"), dir)
	assert.Equal(t, 1, code)
	assert.Equal(t, "simulate: merge: missing 9223372036854775806 of "+n+" shards: 1/"+n+", 2/"+n+", 3/"+n+", 4/"+n+", 5/"+n+", 6/"+n+", 7/"+n+", 8/"+n+", 9/"+n+", 10/"+n+", ...\n", stderr)
}

// TestDeviceCostsErrors: a --device-costs table that cannot be used is
// refused naming the file and line, and the column at fault; one saved
// with a byte order mark reads as without it.
func TestDeviceCostsErrors(t *testing.T) {
	good, err := os.ReadFile("testdata/costs.csv")
	require.NoError(t, err)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text, want string
	}{
		{"long.csv", "call,size_bytes,ns\n" + strings.Repeat("x", 70000) + "\n", "long.csv:2: longer than 64 KiB: not a table of costs"},
		{"huge.csv", "call,size_bytes,ns\ncuMemAlloc,4096,1e19\n", `huge.csv:2: ns "1e19" is more than 1e12 (1000 s for one call): the costs of a replay's calls could not be added up`},
		{"empty.csv", "", `empty.csv: no header "call,size_bytes,ns"`},
	} {
		path := filepath.Join(dir, tc.name)
		require.NoError(t, os.WriteFile(path, []byte(tc.text), 0o644))
		code, stdout, stderr := run(t, nil, "--device-costs", path, "-s", "naive", "testdata/tiny.csv")
		assert.Equal(t, 1, code, tc.name)
		assert.Empty(t, stdout, tc.name)
		assert.Equal(t, "simulate: --device-costs "+filepath.Join(dir, tc.want)+"\n", stderr, tc.name)
	}
	code, _, stderr := run(t, nil, "--device-costs", dir, "-s", "naive", "testdata/tiny.csv")
	assert.Equal(t, 1, code)
	assert.Equal(t, "simulate: --device-costs "+dir+": is a directory, not a file\n", stderr)
	bom := filepath.Join(dir, "bom.csv")
	require.NoError(t, os.WriteFile(bom, append([]byte("\ufeff"), good...), 0o644))
	_, want, _ := run(t, nil, "--device-costs", "testdata/costs.csv", "-s", "unpooled", "-f", "csv", "testdata/tiny.csv")
	code, got, stderr := run(t, nil, "--device-costs", bom, "-s", "unpooled", "-f", "csv", "testdata/tiny.csv")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, normalize(want), normalize(got))
}

// TestGenRefusesOverflow: gen refuses parameters whose sizes would not fit
// in an int64, naming them, and writes nothing.
func TestGenRefusesOverflow(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.csv")
	for _, a := range [][]string{
		{"gen", "training", "--model", "large", "--batch", "1000000", "--seq", "1000000"},
		{"gen", "training", "--model", "large", "--batch", "1000000", "--seq", "1000000", "-o", out},
	} {
		code, stdout, stderr := run(t, nil, a...)
		assert.Equal(t, 1, code, "%v", a)
		assert.Empty(t, stdout, "%v", a)
		assert.Equal(t, "simulate: gen: batch 1000000 and seq 1000000 with model large: the attention scores of a layer (batch x heads x seq x seq x 4 bytes) would be 8e+19 bytes, more than the 2^58 bytes a generated tensor may have; lower them\n", stderr, "%v", a)
	}
	assert.NoFileExists(t, out)
}

// TestProbeFindings: mistakes a probe of hostile command lines found,
// each refused with a line that says what to do: a flag's value that does
// not parse, said in the help's words; an explicit count of 0 for gen,
// which gen.Options would take for its default; plan -o -, which would
// write a file named "-"; merge given a file.
func TestProbeFindings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"gen", "--steps", "abc", "training"}, 2, `simulate: --steps "abc": want a whole number (see simulate gen -h)`},
		{[]string{"gen", "--events", "18446744073709551616", "random"}, 2, `simulate: --events "18446744073709551616": want a whole number, at most 9223372036854775807 (see simulate gen -h)`},
		{[]string{"gen", "--seed", "-1", "random"}, 2, `simulate: --seed "-1": want a whole number, 0 or more (see simulate gen -h)`},
		{[]string{"-j", "x", "testdata/tiny.csv"}, 2, `simulate: --jobs "x": want a whole number (see simulate -h)`},
		{[]string{"--title=maybe", "testdata/tiny.csv"}, 2, `simulate: --title "maybe": want true or false (see simulate -h)`},
		{[]string{"plan", "--time-limit", "1e9h", "testdata/tiny.csv"}, 2, `simulate: --time-limit "1e9h": want a duration with a unit, such as 10s, 1m30s or 2h (see simulate plan -h)`},
		{[]string{"tune", "--memory-fraction", "abc", "testdata/tiny.csv"}, 2, `simulate: --memory-fraction "abc": want a number (see simulate tune -h)`},
		{[]string{"gen", "--steps", "0", "training"}, 2, `simulate: --steps 0: want 1 or more (see simulate gen -h)`},
		{[]string{"gen", "--max-live", "-3", "random"}, 2, `simulate: --max-live -3: want 1 or more (see simulate gen -h)`},
		{[]string{"gen", "--events", "0", "random"}, 2, `simulate: --events 0: want 1 or more (see simulate gen -h)`},
		{[]string{"plan", "-o", "-", "testdata/tiny.csv"}, 2, `simulate: plan: -o -: the table goes to standard output; name a FILE for the placement (see simulate plan -h)`},
		{[]string{"merge", "-o", "OUT", "testdata/tiny.csv"}, 1, `simulate: merge: testdata/tiny.csv: not a directory: not the output of simulate --shard k/n -o DIR`},
	} {
		dir := t.TempDir()
		for i, a := range tc.args {
			if a == "OUT" {
				tc.args[i] = filepath.Join(dir, "out")
			}
		}
		wd, err := os.Getwd()
		require.NoError(t, err)
		code, stdout, stderr := run(t, nil, tc.args...)
		assert.Equal(t, tc.code, code, "%v", tc.args)
		assert.Empty(t, stdout, "%v", tc.args)
		assert.Equal(t, tc.want+"\n", stderr, "%v", tc.args)
		assert.NoFileExists(t, filepath.Join(wd, "-"), "%v", tc.args)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries, "%v: nothing written", tc.args)
	}
}

// failingWriter fails every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestStdoutFails: a command whose standard output cannot be written
// fails, saying so, even where it wrote only its help.
func TestStdoutFails(t *testing.T) {
	for _, a := range [][]string{
		{"help"},
		{"gen", "-h"},
		{"strategies"},
		{"inspect", "testdata/tiny.csv"},
		{"-s", "naive", "-f", "json", "testdata/tiny.csv"},
		{"gen", "--events", "10", "random"},
		{"convert", "testdata/tiny.csv", "-"},
	} {
		var stderr bytes.Buffer
		code := Command{Stdout: failingWriter{}, Stderr: &stderr}.Run(context.Background(), a)
		assert.Equal(t, 1, code, "%v", a)
		assert.Equal(t, "simulate: standard output: no space left on device\n", stderr.String(), "%v", a)
	}
}

// TestConvertSnapshotInputs: convert to a .pickle reads a snapshot from
// standard input as from a file, and names what is wrong with an input
// that is no snapshot file as every command does.
func TestConvertSnapshotInputs(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/fidelity_match.pickle")
	require.NoError(t, err)
	want := filepath.Join(dir, "want.pickle")
	code, _, stderr := run(t, nil, "convert", "testdata/fidelity_match.pickle", want)
	require.Equal(t, 0, code, stderr)
	got := filepath.Join(dir, "got.pickle")
	var errb bytes.Buffer
	code = Command{Stdin: bytes.NewReader(data), Stderr: &errb}.Run(context.Background(), []string{"convert", "-", got})
	require.Equal(t, 0, code, errb.String())
	a, err := os.ReadFile(want)
	require.NoError(t, err)
	b, err := os.ReadFile(got)
	require.NoError(t, err)
	assert.Equal(t, a, b, "from standard input as from the file")
	for _, tc := range []struct{ in, want string }{
		{dir, dir + ": is a directory, not a file"},
		{filepath.Join(dir, "nosuch.pickle"), filepath.Join(dir, "nosuch.pickle") + ": no such file or directory"},
		{"training", "training: a bundled trace, not a PyTorch snapshot: an OUT ending in .pickle needs a snapshot, the file torch.cuda.memory._dump_snapshot writes"},
	} {
		code, _, stderr := run(t, nil, "convert", tc.in, filepath.Join(dir, "out.pickle"))
		assert.Equal(t, 1, code, tc.in)
		assert.Equal(t, "simulate: "+tc.want+"\n", stderr, tc.in)
	}
}

// TestHelpOfNoCommand: help for a command that does not exist says so,
// rather than print the replay's help as if it were the command's.
func TestHelpOfNoCommand(t *testing.T) {
	code, stdout, stderr := run(t, nil, "help", "bogus")
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "simulate: help bogus: no such command (commands: convert, ")
	code, stdout, _ = run(t, nil, "help", "help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "usage: simulate")
}

// TestConvertGzipName: an OUT ending in .gz in capitals is compressed as
// in lower case, not plain text under a name that says gzip.
func TestConvertGzipName(t *testing.T) {
	out := filepath.Join(t.TempDir(), "T.CSV.GZ")
	code, _, stderr := run(t, nil, "convert", "testdata/tiny.csv", out)
	require.Equal(t, 0, code, stderr)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	assert.Equal(t, []byte{0x1f, 0x8b}, b[:2], "gzip's magic number")
}
