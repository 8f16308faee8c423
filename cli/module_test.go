package cli_test

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeFiles returns the Go files that docs/write-a-strategy.md's "Write
// your own strategy" shows, by the name in each block's first line ("// main.go").
func readmeFiles(t *testing.T) map[string]string {
	t.Helper()
	readme, err := os.ReadFile("../docs/write-a-strategy.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## Write your own strategy\n")
	require.True(t, ok, "docs/write-a-strategy.md has a section \"Write your own strategy\"")
	section, _, _ = strings.Cut(section, "\n## ")
	files := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```go\n// ([a-z]+\\.go)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		files[m[1]] = m[2]
	}
	require.Contains(t, files, "main.go")
	return files
}

// moduleFile returns the go.mod of a module that imports imports (packages
// of this repository, which it requires and replaces by its directory), as
// `go mod tidy` would write it: one requirement for every module that
// provides a package to the build, found by `go list -deps` in the
// repository. With that list complete the go command loads no go.mod beyond
// the listed ones, so the build needs nothing a fresh module cache lacks
// once the repository's own packages are built. A go.mod that requires only
// gpualloc would make it walk the full module graph, whose unpruned corners
// (svgo's requirements) name modules no package uses.
func moduleFile(t *testing.T, gobin, repo string, imports ...string) string {
	t.Helper()
	cmd := exec.Command(gobin, append([]string{"list", "-deps", "-f",
		"{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}"}, imports...)...)
	cmd.Dir = repo
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps %s", strings.Join(imports, " "))
	// The go line is the repository's own: a lower one ("go 1.25" against
	// "go 1.25.0") also makes the go command load the full module graph.
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	require.NoError(t, err)
	goLine := regexp.MustCompile(`(?m)^go [0-9.]+$`).Find(gomod)
	require.NotNil(t, goLine, "go.mod has a go line")
	var b strings.Builder
	b.WriteString("module example.com/mysim\n\n" + string(goLine) + "\n\n")
	b.WriteString("require github.com/gpualloc/gpualloc v0.0.0\n\n")
	b.WriteString("replace github.com/gpualloc/gpualloc => " + repo + "\n\n")
	seen := map[string]bool{}
	for _, mod := range strings.Fields(strings.ReplaceAll(string(out), " ", "@")) {
		if !seen[mod] {
			seen[mod] = true
			b.WriteString("require " + strings.Replace(mod, "@", " ", 1) + " // indirect\n")
		}
	}
	return b.String()
}

// imports returns the packages of this module that files import.
func imports(t *testing.T, files map[string]string) []string {
	t.Helper()
	set := map[string]bool{}
	for name, src := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		require.NoError(t, err)
		for _, spec := range f.Imports {
			path, err := strconv.Unquote(spec.Path.Value)
			require.NoError(t, err)
			if path == "github.com/gpualloc/gpualloc" || strings.HasPrefix(path, "github.com/gpualloc/gpualloc/") {
				set[path] = true
			}
		}
	}
	var paths []string
	for p := range set {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// TestThirdPartyModule builds the example of docs/write-a-strategy.md as a module outside
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
	files := readmeFiles(t)
	for name, src := range files {
		require.NoError(t, os.WriteFile(filepath.Join(mod, name), []byte(src), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(moduleFile(t, gobin, repo, imports(t, files)...)), 0o644))
	// The repository's go.sum holds every checksum the module needs, so
	// the build needs no network.
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gobin, append([]string{"run", "."}, args...)...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOWORK=off")
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
