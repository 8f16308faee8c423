package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/dataset"
	"github.com/gpualloc/gpualloc/diff"
	"github.com/gpualloc/gpualloc/diff/difftest"
	"github.com/gpualloc/gpualloc/internal/browsercheck"
	"github.com/gpualloc/gpualloc/internal/duckdbcheck"
)

// writeCSV writes a native trace of the given lines into dir.
func writeCSV(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	return writeText(t, dir, name, "op,id,size,device\n"+strings.Join(lines, "\n")+"\n")
}

// TestDiffErrors checks the error line and exit status of bad inputs.
func TestDiffErrors(t *testing.T) {
	dir := t.TempDir()
	one := writeCSV(t, dir, "one.csv", "alloc,1,1048576,0", "free,1,,0")
	two := writeCSV(t, dir, "two.csv", "alloc,1,1048576,0", "alloc,2,1048576,1")
	bad := writeCSV(t, dir, "bad.csv", "alloc,1,lots,0")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"diff", one}, 2, "simulate: diff: want two traces, A and B, or the ranks of a job; got 1"},
		{[]string{"diff", one, filepath.Join(dir, "missing.csv")}, 1, "missing.csv"},
		{[]string{"diff", one, bad}, 1, "bad.csv:2"},
		{[]string{"diff", one, two, one}, 1, "the devices do not match: " + one + " has device 0 and " + two + " devices 0, 1"},
		{[]string{"diff", one, filepath.Join(dir, "nomatch*.csv")}, 1, "nomatch*.csv: no file matches the pattern"},
		{[]string{"diff", "--with", "nosuch", one, one}, 2, "--with"},
		{[]string{"diff", "--by", "file", one, one}, 2, "--by"},
		{[]string{"diff", "--top", "0", one, one}, 2, "--top 0"},
		{[]string{"diff", "--step", "", one, one}, 2, "--step"},
	} {
		code, stdout, stderr := run(t, nil, c.args...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		assert.Empty(t, stdout, "%v", c.args)
		assert.Contains(t, stderr, c.want, "%v", c.args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
}

// TestDiffJSON compares two traces of one program, B holding 32 MiB more
// at its peak, through the command, and checks the JSON fields the
// issue names and that they add up.
func TestDiffJSON(t *testing.T) {
	dir := t.TempDir()
	a := writeCSV(t, dir, "a.csv", "alloc,1,16777216,0", "alloc,2,4194304,0", "free,2,,0", "free,1,,0")
	b := writeCSV(t, dir, "b.csv", "alloc,1,16777216,0", "alloc,2,4194304,0", "alloc,3,33554432,0", "free,3,,0", "free,2,,0", "free,1,,0")
	code, stdout, stderr := run(t, nil, "diff", "-f", "json", a, b)
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 1)
	for _, k := range []string{"a", "b", "device", "a_peak_reserved_bytes", "b_peak_reserved_bytes", "a_peak_live_bytes", "b_peak_live_bytes",
		"delta_reserved_bytes", "delta_live_bytes", "delta_allocator_bytes", "sites", "cross"} {
		assert.Contains(t, rows[0], k)
	}
	var pairs []diff.Pair
	require.NoError(t, json.Unmarshal([]byte(stdout), &pairs))
	p := pairs[0]
	assert.EqualValues(t, 32<<20, p.DeltaLiveBytes)
	assert.EqualValues(t, 32<<20, p.DeltaPeakLiveBytes)
	assert.Equal(t, p.DeltaReservedBytes, p.DeltaLiveBytes+p.DeltaAllocatorBytes)
	var sum int64
	for _, s := range p.Sites {
		sum += s.DeltaBytes
		for _, k := range []string{"site", "a_bytes", "b_bytes", "delta_bytes", "a_count", "b_count"} {
			assert.Contains(t, rows[0]["sites"].([]any)[0], k)
		}
	}
	assert.Equal(t, p.DeltaLiveBytes, sum)
	require.Len(t, p.Cross, 2)
	for _, k := range []string{"trace", "spec", "peak_reserved_bytes"} {
		assert.Contains(t, rows[0]["cross"].([]any)[0], k)
	}

	// CSV: a row with the same columns.
	code, stdout, stderr = run(t, nil, "diff", "-f", "csv", a, b)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2)
	assert.True(t, strings.HasPrefix(lines[0], "a,b,device,b_device,"), lines[0])

	// The table: at most 100 columns, the parts of the difference.
	code, stdout, stderr = run(t, nil, "diff", a, b)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "the program holds +32.0 MiB (live)")
	for _, line := range strings.Split(stdout, "\n") {
		assert.LessOrEqual(t, len([]rune(line)), 100, line)
	}
}

// TestDiffSwapJSON checks through the command that swapping A and B
// negates every difference.
func TestDiffSwapJSON(t *testing.T) {
	dir := t.TempDir()
	a := writeCSV(t, dir, "a.csv", "alloc,1,16777216,0", "alloc,2,3000000,0", "free,1,,0", "alloc,3,20000000,0")
	b := writeCSV(t, dir, "b.csv", "alloc,1,1048576,0", "alloc,2,3000000,0", "alloc,3,5000000,0")
	var ab, ba []diff.Pair
	runJSON(t, nil, &ab, "diff", "-f", "json", a, b)
	runJSON(t, nil, &ba, "diff", "-f", "json", b, a)
	require.Len(t, ab, 1)
	require.Len(t, ba, 1)
	assert.NotZero(t, ab[0].DeltaReservedBytes)
	for _, f := range [][2]int64{
		{ab[0].DeltaReservedBytes, ba[0].DeltaReservedBytes}, {ab[0].DeltaLiveBytes, ba[0].DeltaLiveBytes},
		{ab[0].DeltaAllocatorBytes, ba[0].DeltaAllocatorBytes}, {ab[0].DeltaPeakLiveBytes, ba[0].DeltaPeakLiveBytes},
		{ab[0].DeltaAllocatedBytes, ba[0].DeltaAllocatedBytes}, {ab[0].DeltaDeviceAllocs, ba[0].DeltaDeviceAllocs},
		{ab[0].DeltaRoundingBytes, ba[0].DeltaRoundingBytes}, {ab[0].DeltaFragmented, ba[0].DeltaFragmented},
		{ab[0].DeltaCachedBytes, ba[0].DeltaCachedBytes},
	} {
		assert.Equal(t, -f[0], f[1])
	}
}

// TestDiffRanks summarises five ranks named by a glob, of which one
// holds 64 MiB more.
func TestDiffRanks(t *testing.T) {
	dir := t.TempDir()
	for k := range 5 {
		extra := "alloc,9,1048576,0"
		if k == 2 {
			extra = "alloc,9,67108864,0"
		}
		writeCSV(t, dir, "rank"+string(rune('0'+k))+".csv", "alloc,1,134217728,0", extra, "free,9,,0")
	}
	var sums []diff.Summary
	runJSON(t, nil, &sums, "diff", "-f", "json", filepath.Join(dir, "rank*.csv"))
	require.Len(t, sums, 1)
	s := sums[0]
	require.Len(t, s.Ranks, 5)
	want := filepath.Join(dir, "rank2.csv")
	assert.Equal(t, want, s.PeakRank)
	assert.Equal(t, want, s.Divergent)
	assert.Positive(t, s.PeakOverMedianBytes)
	code, stdout, stderr := run(t, nil, "diff", filepath.Join(dir, "rank*.csv"))
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "divergent   "+want)
}

// TestDiffPage writes the page of two real snapshots and of their ranks,
// and opens each in a headless browser.
func TestDiffPage(t *testing.T) {
	a, b := sharedPath(t, "forward_ctx128.pickle"), sharedPath(t, "forward_bf16_ctx128.pickle")
	for _, c := range []struct {
		name   string
		args   []string
		figs   []string
		tables []string
	}{
		{"pair", []string{a, b}, []string{"device0-memory.png", "device0-sites.png"}, []string{"site_diffs.parquet"}},
		{"ranks", []string{a, b, sharedPath(t, "small_train_step.pickle")}, []string{"device0-memory.png", "device0-ranks.png"}, []string{"rank_sites.parquet"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report")
			code, _, stderr := run(t, nil, append([]string{"diff", "-o", out}, c.args...)...)
			require.Equal(t, 0, code, stderr)
			html, err := os.ReadFile(filepath.Join(out, "index.html"))
			require.NoError(t, err)
			for _, f := range c.figs {
				assert.Contains(t, string(html), `src="`+f+`"`)
				fh, err := os.Open(filepath.Join(out, f))
				require.NoError(t, err)
				_, err = png.Decode(fh)
				fh.Close()
				require.NoError(t, err, f)
			}
			// The data: a row per event of each trace, the site tables.
			events, err := parquet.ReadFile[dataset.Event](filepath.Join(out, "events.parquet"))
			require.NoError(t, err)
			perTrace := map[string]int{}
			for _, e := range events {
				perTrace[e.Trace]++
			}
			assert.Len(t, perTrace, len(c.args))
			sites, err := parquet.ReadFile[diff.SiteRow](filepath.Join(out, "sites.parquet"))
			require.NoError(t, err)
			assert.NotEmpty(t, sites)
			for _, f := range c.tables {
				_, err := os.Stat(filepath.Join(out, f))
				assert.NoError(t, err)
			}
			browsercheck.Page(t, filepath.Join(out, "index.html"))
			if duckdbcheck.Modules() != "" {
				r := duckdbcheck.Query(t, "SELECT trace, count(*), max(reserved_bytes) FROM '"+filepath.Join(out, "events.parquet")+"' GROUP BY trace ORDER BY trace")
				assert.Len(t, r.Rows, len(c.args))
			}
		})
	}
}

// sharedPath returns the path of a shared real snapshot, or skips.
func sharedPath(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "shared", "traces", "pytorch", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s: the shared snapshots are absent", p)
	}
	return p
}

// TestDiffShared compares real snapshots through the command: each run's
// figures are those simulate gives alone.
func TestDiffShared(t *testing.T) {
	a, b := sharedPath(t, "forward_ctx128.pickle"), sharedPath(t, "forward_bf16_ctx128.pickle")
	var pairs []diff.Pair
	runJSON(t, nil, &pairs, "diff", "-f", "json", a, b)
	require.Len(t, pairs, 1)
	p := pairs[0]
	// The stacks are read: the live bytes go by site, A's forward gone.
	assert.Equal(t, "site", string(p.By))
	found := false
	for _, s := range p.Sites {
		if strings.HasSuffix(s.Site, "cs336_basics/transformer.py:forward") {
			found = true
			assert.Equal(t, diff.Gone, s.Change)
		}
	}
	assert.True(t, found, "A's forward among %+v", p.Sites)
	for _, c := range []struct {
		path           string
		reserved, live int64
	}{{a, p.APeakReservedBytes, p.APeakLiveBytes}, {b, p.BPeakReservedBytes, p.BPeakLiveBytes}} {
		var res []map[string]any
		runJSON(t, nil, &res, "-f", "json", "-s", "pytorch", c.path)
		require.Len(t, res, 1)
		assert.EqualValues(t, res[0]["peak_reserved_bytes"], c.reserved, c.path)
		assert.EqualValues(t, res[0]["peak_requested_bytes"], c.live, c.path)
	}
}

// BenchmarkDiffRanks runs simulate diff in-process on the ranks of a
// job, generated snapshots of 20,000 trace entries each, one of them
// divergent: the target for 64 ranks is under 30 s on 2 cores
// (go test -run XXX -bench DiffRanks -cpu 2 ./cli/). It reports the
// seconds per job, the CPU seconds the process spent in it (an upper
// bound of the seconds on cores of its own), and the largest heap that a
// sampler saw every 5 ms (peak-heap-MiB), which should not grow with the
// ranks: the traces are read one at a time.
func BenchmarkDiffRanks(b *testing.B) {
	for _, ranks := range []int{8, 64} {
		b.Run(fmt.Sprintf("ranks=%d", ranks), func(b *testing.B) { benchDiffRanks(b, ranks, 20000) })
	}
}

func benchDiffRanks(b *testing.B, ranks, entries int) {
	dir := b.TempDir()
	var size int64
	for k := range ranks {
		var skew int64
		if k == ranks*5/8 {
			skew = 64 << 20
		}
		data := difftest.Snapshot(k%8, difftest.RankOps(0, entries, skew), "")
		size += int64(len(data))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%02d.pickle", k)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
		}
	}()
	var out bytes.Buffer
	cpu := cpuSeconds()
	b.ResetTimer()
	for b.Loop() {
		out.Reset()
		c := Command{Stdout: &out, Stderr: io.Discard, LookupEnv: func(string) (string, bool) { return "", false }}
		if code := c.Run(context.Background(), []string{"diff", "-f", "json", filepath.Join(dir, "rank*.pickle")}); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
	b.StopTimer()
	cpu = cpuSeconds() - cpu
	var sums []diff.Summary
	want := fmt.Sprintf("rank%02d.pickle", ranks*5/8)
	if err := json.Unmarshal(out.Bytes(), &sums); err != nil || len(sums) != 1 || filepath.Base(sums[0].Divergent) != want {
		b.Fatalf("summary %+v (%v): want %s divergent", sums, err, want)
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/job")
	b.ReportMetric(cpu/float64(b.N), "cpu-s/job")
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(size)/float64(ranks)/(1<<20), "MiB/snapshot")
}
