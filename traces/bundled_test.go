package traces_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

var update = flag.Bool("update", false, "regenerate the bundled traces from the go:generate lines of bundled.go")

// A genLine is a go:generate line of bundled.go, parsed.
type genLine struct {
	out      string // -o
	workload string
	opts     gen.Options
}

// generateLines parses the "simulate gen" command lines of bundled.go, so
// that they stay the one statement of how each bundled trace is made.
func generateLines(t *testing.T) []genLine {
	t.Helper()
	src, err := os.ReadFile("bundled.go")
	require.NoError(t, err)
	fields := map[string]string{} // flag -> Options field
	for _, wl := range gen.Workloads() {
		for _, p := range wl.Params {
			fields[p.Flag] = p.Field
		}
	}
	var lines []genLine
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		cmd, ok := strings.CutPrefix(sc.Text(), "//go:generate go run ../cmd/simulate gen ")
		if !ok {
			continue
		}
		args := strings.Fields(cmd)
		var g genLine
		opts := reflect.ValueOf(&g.opts).Elem()
		for len(args) > 1 {
			flagName, val := strings.TrimLeft(args[0], "-"), args[1]
			args = args[2:]
			if flagName == "o" {
				g.out = val
				continue
			}
			f := opts.FieldByName(fields[flagName])
			require.True(t, f.IsValid(), "unknown flag --%s in %q", flagName, sc.Text())
			switch f.Kind() {
			case reflect.String:
				f.SetString(val)
			case reflect.Int, reflect.Int64:
				n, err := strconv.ParseInt(val, 10, 64)
				require.NoError(t, err)
				f.SetInt(n)
			case reflect.Uint64:
				n, err := strconv.ParseUint(val, 10, 64)
				require.NoError(t, err)
				f.SetUint(n)
			default:
				t.Fatalf("flag --%s: unexpected kind %s", flagName, f.Kind())
			}
		}
		require.Len(t, args, 1, "no workload at the end of %q", sc.Text())
		g.workload = args[0]
		require.NotEmpty(t, g.out, "no -o in %q", sc.Text())
		lines = append(lines, g)
	}
	require.NotEmpty(t, lines, "no go:generate lines in bundled.go")
	return lines
}

// TestBundledUpToDate checks that each bundled trace is what its go:generate
// line makes now. It compares the decompressed text, byte for byte: the
// compressed bytes depend on compress/flate's version too. With -update it
// rewrites the files instead.
func TestBundledUpToDate(t *testing.T) {
	lines := generateLines(t)
	generated := map[string]bool{}
	for _, g := range lines {
		name := strings.TrimSuffix(filepath.Base(g.out), ".csv.gz")
		assert.False(t, generated[name], "%s has one go:generate line", name)
		generated[name] = true
		_, recorded := traces.BundleRecorded[name]
		assert.False(t, recorded, "%s is generated, not recorded", name)
	}
	for _, b := range traces.Bundled() {
		if _, recorded := traces.BundleRecorded[b.Name]; !recorded {
			assert.True(t, generated[b.Name], "%s has a go:generate line in bundled.go, or is listed as recorded", b.Name)
		}
	}
	for _, g := range lines {
		t.Run(g.workload, func(t *testing.T) {
			if *update {
				require.NoError(t, gen.WriteFile(filepath.FromSlash(g.out), g.workload, g.opts))
				return
			}
			var want bytes.Buffer
			w := traces.NewWriter(&want, gen.ColumnsOf(g.workload)...)
			require.NoError(t, gen.Generate(w, g.workload, g.opts))
			require.NoError(t, w.Close())

			f, err := os.Open(filepath.FromSlash(g.out))
			require.NoError(t, err)
			defer f.Close()
			zr, err := gzip.NewReader(f)
			require.NoError(t, err)
			got, err := io.ReadAll(zr)
			require.NoError(t, err)
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("%s differs from what %q generates now; run go generate ./traces (or go test ./traces -run TestBundledUpToDate -update)", g.out, g.workload)
			}
		})
	}
}

// TestBundledRecorded checks that each recorded trace is bundled and names
// a command that exists to record it again. The recordings themselves cannot
// be repeated here: they need PyTorch, and real addresses and timings differ
// from run to run.
func TestBundledRecorded(t *testing.T) {
	require.NotEmpty(t, traces.BundleRecorded)
	for name, cmd := range traces.BundleRecorded {
		_, ok := traces.LookupBundled(name)
		assert.True(t, ok, "recorded trace %s is bundled", name)
		script, ok := strings.CutPrefix(strings.Fields(cmd)[0], "traces/")
		require.True(t, ok, "%s: %q runs from the repository's root", name, cmd)
		fi, err := os.Stat(filepath.FromSlash(script))
		require.NoError(t, err, "%s: %q", name, cmd)
		assert.NotZero(t, fi.Mode()&0o111, "%s is executable", script)
	}
	versions, err := os.ReadFile(filepath.Join("record", "VERSIONS"))
	require.NoError(t, err)
	assert.Contains(t, string(versions), "python3-torch ")
}

// TestBundled checks that every bundled trace reads cleanly, is small, and
// has a description.
func TestBundled(t *testing.T) {
	bs := traces.Bundled()
	require.NotEmpty(t, bs)
	for i, b := range bs {
		if i > 0 {
			assert.Less(t, bs[i-1].Name, b.Name, "sorted by name")
		}
		assert.NotEmpty(t, b.Description, b.Name)
		assert.Less(t, b.Size, int64(2<<20), "%s is small", b.Name)
		r, err := b.Open()
		require.NoError(t, err, b.Name)
		var n, allocs int64
		for r.Scan() {
			n++
			if r.Event().Op == traces.OpAlloc {
				allocs++
			}
		}
		require.NoError(t, r.Err(), b.Name)
		assert.True(t, r.HasTime(), b.Name)
		assert.Equal(t, 2*allocs, n, "%s frees everything", b.Name)
		assert.Greater(t, n, int64(10_000), b.Name)
		assert.Less(t, n, int64(500_000), b.Name)
		t.Logf("%s: %d events, %d bytes", b.Name, n, b.Size)

		lb, ok := traces.LookupBundled(b.Name)
		assert.True(t, ok)
		assert.Equal(t, b.Size, lb.Size)
	}
	_, ok := traces.LookupBundled("nonesuch")
	assert.False(t, ok)
}
