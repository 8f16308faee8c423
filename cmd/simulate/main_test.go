package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// run runs the command in-process with the given environment variables.
func run(t *testing.T, environ map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{
		stdin:  strings.NewReader(""),
		stdout: &out,
		stderr: &errb,
		getenv: func(k string) (string, bool) { v, ok := environ[k]; return v, ok },
	}
	code = simulate(context.Background(), e, args)
	return code, out.String(), errb.String()
}

// Timings differ from run to run: the golden files hold zeros.
var jsonTiming = regexp.MustCompile(`("(?:elapsed_ns|events_per_sec)": )[0-9.e+-]+`)

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
		if name == "elapsed_ns" || name == "events_per_sec" {
			for _, r := range rows[1:] {
				r[c] = "0"
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
	require.NoError(t, err, "run 'go test ./cmd/simulate -update' to create the golden file")
	assert.Equal(t, string(want), got, "output differs from %s (run with -update to accept)", path)
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
	}{
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
		{"lenient", nil, []string{"--lenient", "-s", "naive", "testdata/badfree.csv"}, 0},
		{"inspect", nil, []string{"inspect", "testdata/tiny.csv", "testdata/twodev.csv"}, 0},
		{"inspect_json", nil, []string{"inspect", "-f", "json", "testdata/tiny.csv"}, 0},
		{"inspect_bundled", nil, []string{"inspect"}, 0},
		{"strategies", nil, []string{"strategies"}, 0},
		{"convert", nil, []string{"convert", "testdata/tiny.csv", "-"}, 0},
		{"gen", nil, []string{"gen", "--model", "tiny", "--steps", "1", "training"}, 0},

		{"err_bad_free", nil, []string{"testdata/badfree.csv"}, 1},
		{"err_bad_size", nil, []string{"-s", "naive", "testdata/badsize.csv"}, 1},
		{"err_not_trace", nil, []string{"testdata/notatrace.txt"}, 1},
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
		{"err_gen_workload", nil, []string{"gen", "nosuch"}, 2},
		{"err_convert_args", nil, []string{"convert", "testdata/tiny.csv"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tc.env, tc.args...)
			assert.Equal(t, tc.code, code, "exit status; stderr: %s", stderr)
			golden(t, tc.name+".stdout", normalize(stdout))
			golden(t, tc.name+".stderr", stderr)
			if code != 0 {
				lines := strings.Split(strings.TrimSpace(stderr), "\n")
				assert.True(t, strings.HasPrefix(lines[0], "simulate: "), "error line %q", lines[0])
				assert.NotContains(t, stderr, "goroutine", "no stack traces")
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"inspect", "-h"}, {"gen", "--help"}, {"convert", "-h"}, {"strategies", "-h"}} {
		code, stdout, stderr := run(t, nil, args...)
		assert.Equal(t, 0, code, "%v", args)
		assert.Contains(t, stdout, "usage: simulate", "%v", args)
		assert.Empty(t, stderr, "%v", args)
	}
}

// TestReadmeShowsCurrentOutput keeps the README's sample output true: it is
// what 'go run ./cmd/simulate' prints on the bundled traces.
func TestReadmeShowsCurrentOutput(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	code, stdout, _ := run(t, nil)
	require.Equal(t, 0, code)
	assert.Contains(t, string(readme), "```\n"+stdout+"```\n", "README.md's sample table differs from the output of simulate on the bundled traces")
}
