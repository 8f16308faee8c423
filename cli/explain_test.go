package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/internal/browsercheck"
	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/sim"
)

func TestExplainGolden(t *testing.T) {
	goldenRuns(t, []goldenCase{
		{"explain_frag", nil, []string{"explain", "--capacity", "200MiB", "testdata/explain_frag.csv"}, 0},
		{"explain_frag_json", nil, []string{"explain", "--capacity", "200MiB", "-f", "json", "testdata/explain_frag.csv"}, 0},
		{"explain_frag_csv", nil, []string{"explain", "--capacity", "200MiB", "-f", "csv", "--top", "1", "testdata/explain_frag.csv"}, 0},
		{"explain_at_time", nil, []string{"explain", "--at", "295us", "--by", "stream", "testdata/explain_frag.csv"}, 0},
		{"err_explain_by", nil, []string{"explain", "--by", "file", "testdata/tiny.csv"}, 2},
		{"err_explain_at", nil, []string{"explain", "--at", "soon", "testdata/tiny.csv"}, 2},
		{"err_explain_at_range", nil, []string{"explain", "--at", "1000000", "testdata/tiny.csv"}, 1},
		{"err_explain_capacity", nil, []string{"explain", "--capacity", "0", "testdata/tiny.csv"}, 2},
		{"err_explain_top", nil, []string{"explain", "--top", "0", "testdata/tiny.csv"}, 2},
		{"err_explain_time_limit", nil, []string{"explain", "--time-limit", "0s", "testdata/tiny.csv"}, 2},
		{"err_explain_strategy", nil, []string{"explain", "-s", "pytorch:nope=1", "testdata/tiny.csv"}, 2},
		{"err_explain_no_trace", nil, []string{"explain"}, 2},
	})
}

// TestExplainDevicesApart checks that each device is explained on a device
// of its own: two devices with 60 MiB live each fit devices of 100 MiB,
// although together they hold 120 MiB.
func TestExplainDevicesApart(t *testing.T) {
	var reps []explain.Report
	runJSON(t, nil, &reps, "explain", "--capacity", "100MiB", "-f", "json", "testdata/explain_twodev.csv")
	require.Len(t, reps, 2)
	for i, r := range reps {
		assert.Equal(t, i, r.Device)
		assert.Equal(t, explain.Fits, r.Verdict)
		assert.EqualValues(t, 60<<20, r.PeakLiveBytes)
		assert.EqualValues(t, 60<<20, r.LiveBytes)
		for _, a := range r.Alternatives {
			if a.PeakReservedBytes != nil {
				assert.LessOrEqual(t, *a.PeakReservedBytes, int64(100<<20), a.Label)
			}
		}
	}
}

// TestExplainSnapshot explains a real snapshot on a device it runs out of,
// through the command, and checks that the table fits 100 columns.
func TestExplainSnapshot(t *testing.T) {
	path := pk.SharedSnapshot(t, sharedSnapshotDir, "forward_ctx128.pickle")
	code, stdout, stderr := run(t, nil, "explain", "--capacity", "18600MiB", path)
	require.Equal(t, 0, code, stderr)
	for _, line := range strings.Split(stdout, "\n") {
		assert.LessOrEqual(t, len([]rune(line)), 100, line)
	}
	assert.Contains(t, stdout, "out of memory (replayed) at event")
	assert.Contains(t, stdout, "cs336_basics/transformer.py:")
	assert.Contains(t, stdout, "fragmentation-bound")
}

// TestExplainSuggestionPasted pastes the line that explain suggests for a
// real snapshot that runs out of memory, into the environment of a replay
// on the same device, as a user would: the replay has no OOM, and its peak
// and the headroom are the figures explain showed.
func TestExplainSuggestionPasted(t *testing.T) {
	path := pk.SharedSnapshot(t, sharedSnapshotDir, "forward_ctx128.pickle")
	var reps []explain.Report
	runJSON(t, nil, &reps, "explain", "-f", "json", "--capacity", "18600MiB", path)
	require.Len(t, reps, 1)
	r := reps[0]
	require.Equal(t, explain.FragmentationBound, r.Verdict)
	key, value, ok := strings.Cut(r.Suggestion, "=")
	require.True(t, ok, "suggestion %q", r.Suggestion)
	require.NotNil(t, r.HeadroomBytes)
	var rows []sim.Result
	runJSON(t, map[string]string{key: value}, &rows, "-f", "json", "--capacity", "18600MiB", path)
	require.Len(t, rows, 1)
	assert.Zero(t, rows[0].OOMs, "%s", r.Suggestion)
	assert.Equal(t, r.CapacityBytes-*r.HeadroomBytes, rows[0].PeakReservedBytes, "%s", r.Suggestion)
	var shown bool
	for _, a := range r.Alternatives {
		shown = shown || a.PeakReservedBytes != nil && *a.PeakReservedBytes == rows[0].PeakReservedBytes && *a.Fits
	}
	assert.True(t, shown, "no row shows the peak %d of %s", rows[0].PeakReservedBytes, r.Suggestion)
}

// FuzzParseAt checks that any --at value is an event, a time or one line
// of bad usage.
func FuzzParseAt(f *testing.F) {
	for _, s := range []string{"0", "12", "-1", "1.5s", "300ms", "1500us", "soon", "", "9223372036854775808", "-2s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		at, err := parseAt(s)
		if err != nil {
			var ue *usageError
			if !errors.As(err, &ue) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("parseAt(%q): %v", s, err)
			}
			return
		}
		if at.Event < 0 || at.TimeUS < 0 {
			t.Fatalf("parseAt(%q) = %+v", s, at)
		}
	})
}

// TestExplainRowsReplay replays each row of a real snapshot of two devices
// with simulate -s SPEC on the same devices: each device's peak reserved
// bytes and OOMs are those its row shows. tune's best is each device's
// own, so the rows of the two devices may differ in spec.
func TestExplainRowsReplay(t *testing.T) {
	path := pk.SharedSnapshot(t, sharedSnapshotDir, "npu_two_devices.pickle")
	var reps []explain.Report
	runJSON(t, nil, &reps, "explain", "-f", "json", "--capacity", "600MiB", path)
	require.Len(t, reps, 2)
	replays := map[string][]sim.Result{}
	for _, rep := range reps {
		for _, a := range rep.Alternatives {
			if a.Spec == "offline" || a.TimedOut && a.PeakReservedBytes == nil {
				continue
			}
			rows, ok := replays[a.Spec]
			if !ok {
				runJSON(t, nil, &rows, "-f", "json", "--capacity", "600MiB", "-s", a.Spec, path)
				replays[a.Spec] = rows
			}
			found := false
			for _, r := range rows {
				if r.Device == nil || *r.Device != rep.Device {
					continue
				}
				found = true
				require.NotNil(t, a.PeakReservedBytes, a.Label)
				assert.Equal(t, r.PeakReservedBytes, *a.PeakReservedBytes, "%s on device %d", a.Label, rep.Device)
				assert.Equal(t, r.OOMs == 0, *a.Fits, "%s on device %d", a.Label, rep.Device)
			}
			assert.True(t, found, "%s: no row of device %d", a.Label, rep.Device)
		}
	}
	assert.Contains(t, replays, reps[0].Alternatives[len(reps[0].Alternatives)-2].Spec, "tune's best replayed")
}

// TestExplainPage writes the page of a trace and checks that it shows
// every figure, each a PNG of the report's width, that a headless browser
// loads it with every image and no console error, and that a second write
// into the directory needs --force.
func TestExplainPage(t *testing.T) {
	dir := t.TempDir() + "/page"
	code, _, stderr := run(t, nil, "explain", "-o", dir, "--capacity", "100MiB", "testdata/explain_twodev.csv")
	require.Equal(t, 0, code, stderr)
	page, err := os.ReadFile(dir + "/index.html")
	require.NoError(t, err)
	for d := range 2 {
		for _, kind := range []string{"memory", "breakdown", "holders"} {
			name := fmt.Sprintf("explain_twodev-device%d-%s.png", d, kind)
			assert.Contains(t, string(page), `<img src="`+name+`"`)
			f, err := os.Open(dir + "/" + name)
			require.NoError(t, err)
			img, err := png.Decode(f)
			f.Close()
			require.NoError(t, err, name)
			assert.Equal(t, 990, img.Bounds().Dx(), name) // 3.3 in at 300 dpi
		}
	}
	browsercheck.Page(t, dir+"/index.html")
	code, _, stderr = run(t, nil, "explain", "-o", dir, "testdata/explain_twodev.csv")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--force")
	code, _, stderr = run(t, nil, "explain", "-o", dir, "--force", "testdata/explain_twodev.csv")
	assert.Equal(t, 0, code, stderr)
}

// TestExplainStdin explains a snapshot read from standard input as from
// its file: with its stacks.
func TestExplainStdin(t *testing.T) {
	path := pk.SharedSnapshot(t, sharedSnapshotDir, "small_train_step.pickle")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var fromFile, fromStdin []explain.Report
	runJSON(t, nil, &fromFile, "explain", "-f", "json", path)
	var out, errb strings.Builder
	c := Command{Stdin: strings.NewReader(string(data)), Stdout: &out, Stderr: &errb}
	require.Equal(t, 0, c.Run(context.Background(), []string{"explain", "-f", "json", "-"}), errb.String())
	require.NoError(t, json.Unmarshal([]byte(out.String()), &fromStdin))
	require.Len(t, fromStdin, 1)
	assert.True(t, fromStdin[0].Frames)
	assert.Equal(t, fromFile[0].Holders, fromStdin[0].Holders)
}

// TestExplainTempDir explains a trace of 200,000 events, more than its
// events' pages hold in memory: the rest go to a temporary file in
// --temp-dir, which must exist, and the figures are those of a trace held
// whole.
func TestExplainTempDir(t *testing.T) {
	var b strings.Builder
	b.WriteString("op,id,size\n")
	for i := range 100_000 {
		fmt.Fprintf(&b, "alloc,%d,%d\nfree,%d,\n", i, (i%13+1)<<16, i)
	}
	path := writeText(t, t.TempDir(), "long.csv", b.String())
	missing := t.TempDir() + "/missing"
	code, _, stderr := run(t, nil, "explain", "--time-limit", "1ns", "--temp-dir", missing, path)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "long.csv: holding its events: making a temporary file")
	assert.Contains(t, stderr, missing)

	var reps []explain.Report
	runJSON(t, nil, &reps, "explain", "--time-limit", "1ns", "--temp-dir", t.TempDir(), "-f", "json", path)
	require.Len(t, reps, 1)
	// One block live at a time, in the first small segment of 2 MiB: the
	// peak of reserved bytes is the first event's.
	r := reps[0]
	assert.Equal(t, explain.MomentPeak, r.Moment)
	assert.EqualValues(t, 0, r.EventIndex)
	assert.EqualValues(t, 2<<20, r.ReservedBytes)
	assert.EqualValues(t, 1<<16, r.LiveBytes)
	assert.EqualValues(t, 13<<16, r.PeakLiveBytes)
	assert.Equal(t, []explain.Holder{{Site: "64 KiB", Bytes: 1 << 16, Count: 1}}, r.Holders)
}
