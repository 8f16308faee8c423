package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeFiles returns the Go files that README.md's "Write your own
// strategy" shows, by the name in each block's first line ("// main.go").
func readmeFiles(t *testing.T) map[string]string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## Write your own strategy\n")
	require.True(t, ok, "README.md has a section \"Write your own strategy\"")
	section, _, _ = strings.Cut(section, "\n## ")
	files := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```go\n// ([a-z]+\\.go)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		files[m[1]] = m[2]
	}
	require.Contains(t, files, "main.go")
	return files
}

// TestThirdPartyModule builds the README's example as a module outside
// this repository, its own strategy registered and cli.Main as its main, and
// runs it as a user would: the bundled traces replayed through that strategy
// and a built-in one, and a report written.
func TestThirdPartyModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not in -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	mod := t.TempDir()
	for name, src := range readmeFiles(t) {
		require.NoError(t, os.WriteFile(filepath.Join(mod, name), []byte(src), 0o644))
	}
	gomod := "module example.com/mysim\n\ngo 1.25\n\n" +
		"require github.com/gpualloc/gpualloc v0.0.0\n\n" +
		"replace github.com/gpualloc/gpualloc => " + repo + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644))
	// The repository's go.sum holds every checksum the module needs, so
	// the build needs no network.
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gobin, append([]string{"run", "."}, args...)...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go run . %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}

	report := filepath.Join(mod, "report")
	out := run("-s", "exactcache", "-s", "naive", "-f", "json", "-o", report)
	var results []struct {
		Trace, Strategy string
		Events          int64
		OOMs            int64 `json:"ooms"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &results), out)
	var traces []string
	for _, r := range results {
		if r.Strategy == "exactcache" {
			traces = append(traces, r.Trace)
			assert.Positive(t, r.Events)
		}
	}
	assert.Equal(t, []string{"dynamic", "resnet18-cpu", "training", "transformer-cpu"}, traces)
	assert.Len(t, results, 8, "two strategies on four bundled traces")
	for _, f := range []string{"index.html", "summary.json", "summary.csv", "timeseries.csv", "dynamic-memory.png"} {
		fi, err := os.Stat(filepath.Join(report, f))
		if assert.NoError(t, err, f) {
			assert.Positive(t, fi.Size(), f)
		}
	}
	assert.Contains(t, run("strategies"), "exactcache")
}
