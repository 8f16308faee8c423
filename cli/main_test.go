package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/cmpimg"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/host"
	"github.com/gpualloc/gpualloc/sim"
	_ "github.com/gpualloc/gpualloc/strategy/all" // the built-in strategies, as cmd/simulate has them
	"github.com/gpualloc/gpualloc/traces"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// run runs the command in-process with the given environment variables.
func run(t *testing.T, environ map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := Command{
		Stdout:    &out,
		Stderr:    &errb,
		LookupEnv: func(k string) (string, bool) { v, ok := environ[k]; return v, ok },
	}
	code = c.Run(context.Background(), args)
	return code, out.String(), errb.String()
}

// Timings differ from run to run: the golden files hold zeros.
var jsonTiming = regexp.MustCompile(`("(?:elapsed_ns|events_per_sec|alloc_hit_ns_mean|alloc_device_ns_mean|device_call_ns_total)": )[0-9.e+-]+`)

// timingColumns are the CSV columns that normalize sets to 0 where they
// hold a number.
var timingColumns = map[string]bool{
	"elapsed_ns": true, "events_per_sec": true,
	"alloc_hit_ns_mean": true, "alloc_device_ns_mean": true, "device_call_ns_total": true,
}

func normalize(s string) string {
	s = jsonTiming.ReplaceAllString(s, "${1}0")
	if !strings.HasPrefix(s, "trace,strategy,") {
		return s
	}
	rows, err := csv.NewReader(strings.NewReader(s)).ReadAll()
	if err != nil {
		return s
	}
	for c, name := range rows[0] {
		if timingColumns[name] {
			for _, r := range rows[1:] {
				if r[c] != "" {
					r[c] = "0"
				}
			}
		}
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	w.WriteAll(rows)
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run 'go test ./cli -update' to create the golden file")
	assert.Equal(t, string(want), got, "output differs from %s (run with -update to accept)", path)
}

func TestGolden(t *testing.T) {
	goldenRuns(t, []goldenCase{
		{"bundled", nil, nil, 0},
		{"tiny_table", nil, []string{"testdata/tiny.csv"}, 0},
		{"tiny_json", nil, []string{"-f", "json", "testdata/tiny.csv"}, 0},
		{"tiny_csv", nil, []string{"--format=csv", "testdata/tiny.csv"}, 0},
		{"spec_params", nil, []string{"-s", "round:cutoff=20,page=8KiB", "-s", "naive:large_round=1MiB", "testdata/tiny.csv"}, 0},
		{"strategy_all", nil, []string{"-s", "all", "-j", "1", "testdata/tiny.csv", "testdata/twodev.csv"}, 0},
		{"env_mxnet", map[string]string{"MXNET_GPU_MEM_POOL_TYPE": "Round", "MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF": "20"}, []string{"-f", "json", "testdata/tiny.csv"}, 0},
		{"env_gpualloc_beats_mxnet", map[string]string{"GPUALLOC_POOL_TYPE": "unpooled", "MXNET_GPU_MEM_POOL_TYPE": "Round"}, []string{"testdata/tiny.csv"}, 0},
		{"flag_beats_env", map[string]string{"GPUALLOC_POOL_TYPE": "unpooled"}, []string{"-s", "naive", "testdata/tiny.csv"}, 0},
		{"capacity_oom", nil, []string{"--capacity", "8MiB", "testdata/tiny.csv"}, 0},
		{"host_json", nil, []string{"-b", "host", "--capacity", "64MiB", "-f", "json", "-s", "naive", "-s", "bestfit", "-s", "unpooled", "testdata/twodev.csv"}, 0},
		{"host_csv_oom", nil, []string{"-b", "host", "--capacity", "8MiB", "-f", "csv", "testdata/tiny.csv"}, 0},
		{"lenient", nil, []string{"--lenient", "-s", "naive", "testdata/badfree.csv"}, 0},
		{"inspect", nil, []string{"inspect", "testdata/tiny.csv", "testdata/twodev.csv"}, 0},
		{"inspect_json", nil, []string{"inspect", "-f", "json", "testdata/tiny.csv"}, 0},
		{"inspect_bundled", nil, []string{"inspect"}, 0},
		{"strategies", nil, []string{"strategies"}, 0},
		{"convert", nil, []string{"convert", "testdata/tiny.csv", "-"}, 0},
		{"gen", nil, []string{"gen", "--model", "tiny", "--steps", "1", "training"}, 0},
		{"rmm_inspect", nil, []string{"inspect", "-f", "json", "testdata/rmm.log"}, 0},
		{"rmm_convert", nil, []string{"convert", "testdata/rmm.log", "-"}, 0},
		{"rmm_replay", nil, []string{"-s", "naive", "-s", "unpooled", "testdata/rmm.log"}, 0},
		{"rmm_lenient", nil, []string{"convert", "--lenient", "testdata/rmm_midrun.log", "-"}, 0},
		{"minimalloc_inspect", nil, []string{"inspect", "testdata/minimalloc.csv", "testdata/rmm.log", "testdata/tiny.csv"}, 0},
		{"minimalloc_convert", nil, []string{"convert", "testdata/minimalloc.csv", "-"}, 0},
		{"minimalloc_replay", nil, []string{"-s", "naive", "testdata/minimalloc.csv"}, 0},

		{"err_bad_free", nil, []string{"testdata/badfree.csv"}, 1},
		{"err_bad_size", nil, []string{"-s", "naive", "testdata/badsize.csv"}, 1},
		{"err_not_trace", nil, []string{"testdata/notatrace.txt"}, 1},
		{"err_rmm_midrun", nil, []string{"-s", "naive", "testdata/rmm_midrun.log"}, 1},
		{"err_minimalloc_bad", nil, []string{"inspect", "testdata/minimalloc_bad.csv"}, 1},
		{"err_convert_minimalloc_bad", nil, []string{"convert", "testdata/minimalloc_bad.csv", "-"}, 1},
		{"err_missing", nil, []string{"testdata/nosuch.csv"}, 1},
		{"err_inspect_bad", nil, []string{"inspect", "testdata/badsize.csv"}, 1},
		{"err_unknown_strategy", nil, []string{"-s", "nosuch", "testdata/tiny.csv"}, 2},
		{"err_bad_param", nil, []string{"-s", "round:cutoff=40", "testdata/tiny.csv"}, 2},
		{"err_unknown_param", nil, []string{"-s", "round:cutof=20", "testdata/tiny.csv"}, 2},
		{"err_env_type", map[string]string{"MXNET_GPU_MEM_POOL_TYPE": "Pooled"}, []string{"testdata/tiny.csv"}, 2},
		{"err_env_spec", map[string]string{"GPUALLOC_POOL_TYPE": "round:cutoff=x"}, []string{"testdata/tiny.csv"}, 2},
		{"err_env_param", map[string]string{"MXNET_GPU_MEM_POOL_PAGE_SIZE": "big"}, []string{"-s", "naive", "testdata/tiny.csv"}, 2},
		{"err_bad_flag", nil, []string{"--nosuch"}, 2},
		{"err_bad_format", nil, []string{"-f", "xml"}, 2},
		{"err_bad_capacity", nil, []string{"--capacity", "lots"}, 2},
		{"err_backend", nil, []string{"-b", "tpu"}, 2},
		{"err_cuda_capacity", nil, []string{"-b", "cuda", "--capacity", "1GiB"}, 2},
		{"err_device_costs", nil, []string{"--device-costs", "testdata/costs_bad.csv", "testdata/tiny.csv"}, 1},
		{"device_costs", nil, []string{"--device-costs", "testdata/costs.csv", "-s", "unpooled", "-f", "csv", "testdata/tiny.csv"}, 0},
		{"err_gen_workload", nil, []string{"gen", "nosuch"}, 2},
		{"err_convert_args", nil, []string{"convert", "testdata/tiny.csv"}, 2},
		{"err_plot_format", nil, []string{"-o", "nosuch", "--plot-format", "png,bmp", "testdata/tiny.csv"}, 2},
		{"err_progress", nil, []string{"--progress", "sometimes", "testdata/tiny.csv"}, 2},

		{"help", nil, []string{"-h"}, 0},
		{"bundled_by_name", nil, []string{"-s", "round", "dynamic"}, 0},
		{"release", nil, []string{"-s", "naive", "-s", "unpooled", "-f", "json", "testdata/release.csv"}, 0},
		{"release_table", nil, []string{"-s", "naive", "testdata/release.csv"}, 0},
		{"release_convert", nil, []string{"convert", "testdata/release.csv", "-"}, 0},
		{"capacity_mark", nil, []string{"--capacity", "12MiB", "-s", "naive", "-s", "round", "-s", "unpooled", "testdata/tiny.csv"}, 0},
		{"env_pytorch_conf", map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}, []string{"-s", "pytorch", "testdata/tiny.csv"}, 0},
		{"err_near_noop", nil, []string{"testdata/near_noop.csv"}, 1},
		{"err_near_semicolon", nil, []string{"testdata/near_semicolon.csv"}, 1},
		{"err_near_quoted", nil, []string{"testdata/near_quoted.csv"}, 1},
		{"err_near_renamed", nil, []string{"testdata/near_renamed.csv"}, 1},
		{"err_convert_out_json", nil, []string{"convert", "testdata/tiny.csv", "out.json"}, 2},
		{"err_width", nil, []string{"-o", "nosuch", "--width", "3.3", "testdata/tiny.csv"}, 2},
		{"err_log_y", nil, []string{"-o", "nosuch", "--log-y=maybe", "testdata/tiny.csv"}, 2},
		{"err_figures", nil, []string{"-o", "nosuch", "--figures", "memory,pie", "testdata/tiny.csv"}, 2},
		{"err_pytorch_async", map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, []string{"testdata/tiny.csv"}, 2},
	})
}

// goldenCase is a run of the command in the environment env, with its
// exit status and the golden files NAME.stdout and NAME.stderr.
type goldenCase struct {
	name string
	env  map[string]string
	args []string
	code int
}

// goldenRuns runs each case as a subtest of its name, with goldenRun.
func goldenRuns(t *testing.T, cases []goldenCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { goldenRun(t, tc.name, tc.env, tc.code, tc.args...) })
	}
}

// runJSON runs the command, which must succeed, and decodes its output,
// JSON, into v.
// writeText writes text into the file name of dir and returns its path.
func writeText(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

func runJSON(t *testing.T, env map[string]string, v any, args ...string) {
	t.Helper()
	code, stdout, stderr := run(t, env, args...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), v))
}

// goldenRun runs the command and checks its exit status, and its output
// against the golden files NAME.stdout (timings zeroed) and NAME.stderr; an
// error is one line, "simulate: ...", without a stack trace.
func goldenRun(t *testing.T, name string, env map[string]string, wantCode int, args ...string) {
	t.Helper()
	code, stdout, stderr := run(t, env, args...)
	assert.Equal(t, wantCode, code, "exit status; stderr: %s", stderr)
	golden(t, name+".stdout", normalize(stdout))
	golden(t, name+".stderr", stderr)
	if code != 0 {
		assert.True(t, strings.HasPrefix(stderr, "simulate: "), "error line %q", stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		assert.NotContains(t, stderr, "goroutine", "no stack traces")
	}
}

// TestHelp checks that -h, --help and help print the usage of each command
// once, on stdout.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"inspect", "-h"}, {"inspect", "--help"}, {"gen", "--help"}, {"convert", "-h"}, {"strategies", "-h"}, {"fidelity", "-h"}} {
		code, stdout, stderr := run(t, nil, args...)
		assert.Equal(t, 0, code, "%v", args)
		assert.Contains(t, stdout, "usage: simulate", "%v", args)
		assert.Equal(t, 1, strings.Count(stdout, "usage:"), "%v: the help once", args)
		assert.Empty(t, stderr, "%v", args)
	}
}

// TestReadmeShowsCurrentOutput keeps the README's sample output true: it is
// what 'go run ./cmd/simulate' prints on the bundled traces.
func TestReadmeShowsCurrentOutput(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	code, stdout, _ := run(t, nil)
	require.Equal(t, 0, code)
	assert.Contains(t, string(readme), "```\n"+stdout+"```\n", "README.md's sample table differs from the output of simulate on the bundled traces")
}

// TestReport writes a report on two small traces and checks its files: the
// list, the summaries (timings zeroed) and the time series against golden
// files, and that stdout is what it is without -o.
func TestReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	args := []string{"-s", "naive", "-s", "round", "-s", "unpooled", "testdata/tiny.csv", "testdata/twodev.csv"}
	code, stdout, stderr := run(t, nil, append([]string{"-o", dir, "--plot-format", "svg,png"}, args...)...)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	_, plain, _ := run(t, nil, args...)
	assert.Equal(t, plain, stdout, "-o changes nothing on stdout")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files strings.Builder
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		assert.Positive(t, info.Size(), e.Name())
		files.WriteString(e.Name() + "\n")
	}
	golden(t, "report.files", files.String())
	for _, name := range []string{"summary.csv", "summary.json", "timeseries.csv"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		golden(t, "report."+name, normalize(string(b)))
	}
	idx, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".svg") {
			assert.Contains(t, string(idx), `id="`+strings.TrimSuffix(e.Name(), ".svg")+`"`, "index.html shows %s", e.Name())
		}
	}
}

// TestReportBundled writes the report of 'simulate -o DIR' on the bundled
// traces, checks that every figure is there and opens, and that the
// README's figure is this report's (-update rewrites it).
func TestReportBundled(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := run(t, nil, "-o", dir)
	require.Equal(t, 0, code, stderr)
	var want []string
	for _, tr := range traces.Bundled() {
		for _, fig := range []string{"memory", "fragmentation", "peak", "trace"} {
			want = append(want, tr.Name+"-"+fig)
		}
	}
	want = append(want, "overhead")
	for _, fig := range want {
		for _, ext := range []string{".png", ".svg"} {
			b, err := os.ReadFile(filepath.Join(dir, fig+ext))
			if !assert.NoError(t, err) {
				continue
			}
			assert.Greater(t, len(b), 1000, "%s%s is not empty", fig, ext)
			if ext == ".png" {
				img, err := png.Decode(bytes.NewReader(b))
				if assert.NoError(t, err, fig) {
					assert.Greater(t, img.Bounds().Dy(), 300, fig)
				}
			}
		}
	}
	for _, f := range []string{"index.html", "summary.csv", "summary.json", "timeseries.csv"} {
		info, err := os.Stat(filepath.Join(dir, f))
		if assert.NoError(t, err) {
			assert.Positive(t, info.Size(), f)
		}
	}

	got, err := os.ReadFile(filepath.Join(dir, readmeFigure))
	require.NoError(t, err)
	docs := filepath.Join("..", "docs", readmeFigure)
	if *update {
		require.NoError(t, os.WriteFile(docs, got, 0o644))
		return
	}
	have, err := os.ReadFile(docs)
	require.NoError(t, err)
	same, err := cmpimg.EqualApprox("png", got, have, 0.02)
	require.NoError(t, err)
	assert.True(t, same, "docs/%s differs from the report of 'simulate -o DIR' (run 'go test ./cli -update' to refresh it)", readmeFigure)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "docs/"+readmeFigure), "README.md shows docs/%s", readmeFigure)
}

// readmeFigure is the figure of the bundled report that README.md shows.
const readmeFigure = "dynamic-memory.png"

// TestProgress checks --progress: a bar with --progress always, nothing
// when standard error is not a terminal.
func TestProgress(t *testing.T) {
	for _, tc := range []struct {
		args []string
		bar  bool
	}{
		{[]string{"--progress", "always", "testdata/tiny.csv"}, true},
		{[]string{"--progress", "always"}, true}, // bundled: sizes unknown
		{[]string{"--progress", "auto", "testdata/tiny.csv"}, false},
		{[]string{"testdata/tiny.csv"}, false},
		{[]string{"--progress", "never", "testdata/tiny.csv"}, false},
	} {
		code, stdout, stderr := run(t, nil, append([]string{"-s", "naive"}, tc.args...)...)
		require.Equal(t, 0, code, "%v: %s", tc.args, stderr)
		assert.NotContains(t, stdout, "replaying", "%v: the bar is on stderr", tc.args)
		if tc.bar {
			assert.Contains(t, stderr, "replaying", "%v", tc.args)
		} else {
			assert.Empty(t, stderr, "%v", tc.args)
		}
	}
	// Concurrent jobs share the bar.
	p := newProgress(io.Discard, nil, 4)
	var wg sync.WaitGroup
	for range 4 {
		fn := p.job()
		wg.Go(func() {
			for n := int64(1); n <= 100; n++ {
				fn(n * sim.ProgressInterval)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(400*sim.ProgressInterval), p.events.Load())
	p.finish()
	assert.Equal(t, "950", shortCount(950))
	assert.Equal(t, "12.3k", shortCount(12345))
	assert.Equal(t, "100M", shortCount(100_000_000))
}

// TestCUDAWithoutGPU checks the one line that -b cuda and -b pinned give where there is
// no GPU: its text after "no CUDA driver found" is the loader's and varies
// by machine, so it is matched here rather than kept in a golden file.
func TestCUDAWithoutGPU(t *testing.T) {
	for _, backend := range []string{"cuda", "pinned"} {
		code, stdout, stderr := run(t, nil, "-b", backend, "-s", "naive", "testdata/tiny.csv")
		if code == 0 {
			t.Skip("a CUDA GPU is here")
		}
		assert.Equal(t, 1, code, backend)
		assert.Empty(t, stdout, backend)
		assert.Regexp(t, `^simulate: (no CUDA driver found \(.+\)|no CUDA device found.*)\n$`, stderr, backend)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line")
	}
}

// TestHostWithoutCapacity checks that -b host without --capacity limits
// the replay to the machine's memory, and reports that limit: not 80 GiB,
// and the total the host backend gives.
func TestHostWithoutCapacity(t *testing.T) {
	var res []sim.Result
	runJSON(t, nil, &res, "-b", "host", "-s", "unpooled", "-f", "json", "testdata/tiny.csv")
	require.Len(t, res, 1)
	assert.Equal(t, "host", res[0].Backend)
	assert.Positive(t, res[0].CapacityBytes)
	assert.NotEqual(t, int64(80<<30), res[0].CapacityBytes)
	b, err := host.Open(host.Options{})
	require.NoError(t, err)
	_, total := b.MemInfo()
	require.NoError(t, b.Close())
	assert.Equal(t, total, res[0].CapacityBytes, "the limit that held")
	assert.Zero(t, res[0].OOMs)
	require.NotNil(t, res[0].DeviceCallNSTotal)
	assert.Positive(t, *res[0].DeviceCallNSTotal)
	require.NotNil(t, res[0].AllocDeviceNSMean)
	assert.Positive(t, *res[0].AllocDeviceNSMean)
}

// TestHostLimit checks that the host backend of a replay without
// --capacity refuses more than the machine's memory, the capacity that the
// results report, rather than handing out address space beyond it.
func TestHostLimit(t *testing.T) {
	be, err := chooseBackend("host", 80<<30, false)
	if err != nil {
		t.Skipf("no host backend here: %v", err)
	}
	b, err := be.newBackend(0)
	require.NoError(t, err)
	defer b.(io.Closer).Close()
	_, total := b.MemInfo()
	assert.Equal(t, be.capacity, total)
	_, err = b.Malloc(total + 4096)
	assert.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
}

// TestReadProgress checks that every command that reads snapshots shows
// how much of the file it has read with --progress always (here at once:
// the delay is 0), nothing with auto when standard error is not a
// terminal, and refuses another mode.
func TestReadProgress(t *testing.T) {
	defer func(d time.Duration) { readProgressDelay = d }(readProgressDelay)
	readProgressDelay = 0
	const snap = "testdata/fidelity_match.pickle"
	for _, cmd := range [][]string{{"inspect"}, {"fidelity"}, {"tune", "-j", "1"}, {"plan", "--no-search"}} {
		args := append(append([]string(nil), cmd...), "--progress", "always", snap)
		code, stdout, stderr := run(t, nil, args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		assert.Contains(t, stderr, "reading "+snap, "%v", args)
		assert.NotContains(t, stdout, "reading", "%v: the bar is on stderr", args)

		args = append(append([]string(nil), cmd...), snap)
		code, _, stderr = run(t, nil, args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		assert.NotContains(t, stderr, "reading", "%v: not a terminal", args)

		args = append(append([]string(nil), cmd...), "--progress", "sometimes", snap)
		code, _, stderr = run(t, nil, args...)
		assert.Equal(t, 2, code, "%v", args)
		assert.Contains(t, stderr, `--progress "sometimes": want auto, always or never`, "%v", args)
	}
	// A replay's bar moves while the snapshot is read, before any event.
	code, _, stderr := run(t, nil, "-s", "pytorch", "--progress", "always", snap)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "replaying", stderr)
}
