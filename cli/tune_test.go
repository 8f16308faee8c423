package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
)

func TestTuneGolden(t *testing.T) {
	goldenRuns(t, []goldenCase{
		{"tune_table", nil, []string{"tune", "testdata/tiny.csv"}, 0},
		{"tune_json", nil, []string{"tune", "-f", "json", "--capacity", "24MiB", "testdata/tiny.csv"}, 0},
		{"err_tune_oom", nil, []string{"tune", "--capacity", "4MiB", "testdata/tiny.csv"}, 1},
		{"err_tune_args", nil, []string{"tune", "testdata/tiny.csv", "testdata/twodev.csv"}, 2},
		{"err_tune_fraction", nil, []string{"tune", "--memory-fraction", "1.5", "testdata/tiny.csv"}, 2},
		{"err_tune_trace", nil, []string{"tune", "testdata/badfree.csv"}, 1},
	})
}

// tuneAndReplay tunes a trace, replays it with the conf that tune printed
// and checks that the replay gives exactly tune's figures, and that the
// setting is no worse than PyTorch's defaults. Tune's device mallocs are
// the trace's, summed over its devices: the replay's row without a device,
// which a trace of several devices follows with a row per device; its peak
// is the largest device's, each device being of the capacity, never the
// sum.
func tuneAndReplay(t *testing.T, trace string) {
	var tuned tuneResult
	runJSON(t, nil, &tuned, "tune", "-f", "json", trace)
	assert.LessOrEqual(t, tuned.PeakReservedBytes, tuned.DefaultPeakReservedBytes)
	assert.Positive(t, tuned.Tried)

	var rows []struct {
		Device        *int  `json:"device"`
		PeakReserved  int64 `json:"peak_reserved_bytes"`
		DeviceMallocs int64 `json:"device_mallocs"`
		OOMs          int64 `json:"ooms"`
	}
	spec := "pytorch"
	if strings.HasPrefix(tuned.Paste, "PYTORCH_NPU_ALLOC_CONF=") {
		spec = "pytorch:device=npu" // torch_npu's rules, as tune replays a snapshot torch_npu wrote
	}
	runJSON(t, map[string]string{"PYTORCH_CUDA_ALLOC_CONF": tuned.Conf}, &rows, "-f", "json", "-s", spec, trace)
	require.NotEmpty(t, rows)
	replayed := rows[0]
	require.Nil(t, replayed.Device, "the first row is the trace's")
	var mallocs int64
	peak := replayed.PeakReserved
	if len(rows) > 1 {
		peak = 0
	}
	for i, r := range rows[1:] {
		require.NotNil(t, r.Device, "row %d", i+1)
		assert.Zero(t, r.OOMs, "device %d", *r.Device)
		mallocs += r.DeviceMallocs
		peak = max(peak, r.PeakReserved)
	}
	require.NotEqual(t, 2, len(rows), "one device has no row of its own")
	if len(rows) > 1 {
		assert.Equal(t, replayed.DeviceMallocs, mallocs, "the trace's device mallocs are its devices'")
	}
	assert.Equal(t, tuned.PeakReservedBytes, peak, "PYTORCH_CUDA_ALLOC_CONF=%s", tuned.Conf)
	assert.LessOrEqual(t, tuned.PeakReservedBytes, tuned.CapacityBytes, "a device's peak within a device")
	assert.Equal(t, tuned.DeviceMallocs, replayed.DeviceMallocs, "PYTORCH_CUDA_ALLOC_CONF=%s", tuned.Conf)
	assert.Zero(t, replayed.OOMs)
	t.Logf("%s: PYTORCH_CUDA_ALLOC_CONF=%s: peak reserved %d (defaults %d), %d device mallocs, %d settings tried",
		trace, tuned.Conf, tuned.PeakReservedBytes, tuned.DefaultPeakReservedBytes, tuned.DeviceMallocs, tuned.Tried)
}

func TestTuneReplaysTheSame(t *testing.T) {
	tuneAndReplay(t, "../traces/bundled/dynamic.csv.gz")
}

func TestTuneShared(t *testing.T) {
	for _, f := range pk.SharedSnapshots(t, sharedSnapshotDir) {
		t.Run(filepath.Base(f), func(t *testing.T) { tuneAndReplay(t, f) })
	}
}

func TestTuneHelp(t *testing.T) {
	code, stdout, stderr := run(t, nil, "tune", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "usage: simulate tune [flags] TRACE")
	assert.Empty(t, stderr)
}

// TestReadmeShowsTune keeps the example of tune in docs/sweeps-tuning-sharding.md true.
func TestReadmeShowsTune(t *testing.T) {
	readme, err := os.ReadFile("../docs/sweeps-tuning-sharding.md")
	require.NoError(t, err)
	code, stdout, stderr := run(t, nil, "tune", "dynamic")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, string(readme), "$ go run ./cmd/simulate tune dynamic\n"+stdout+"```\n", "docs/sweeps-tuning-sharding.md's tune example differs from the output of simulate tune dynamic")
}

// TestTuneRecordedCapacity: without --capacity, tune takes the device size
// a snapshot records (here one that simulate --snapshot wrote), and the
// replay of the printed line, which takes it too, gives tune's figures.
func TestTuneRecordedCapacity(t *testing.T) {
	snaps := exportSnapshots(t, 1, "-s", "pytorch", "--capacity", "24MiB", "testdata/tiny.csv")

	for _, tc := range []struct {
		args []string
		want int64
	}{
		{nil, 24 << 20},
		{[]string{"--capacity", "80GiB"}, 80 << 30},
	} {
		var tuned tuneResult
		runJSON(t, nil, &tuned, append(append([]string{"tune", "-f", "json"}, tc.args...), snaps[0])...)
		assert.Equal(t, tc.want, tuned.CapacityBytes, "%v", tc.args)
	}
	tuneAndReplay(t, snaps[0])
}

// The text of tune says the range of max_split_size_mb that gives the
// same peak as the value it prints, when it knows one.
func TestTunePlateau(t *testing.T) {
	var b strings.Builder
	writeTune(&b, tuneResult{Trace: "t", Paste: "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:100", Conf: "max_split_size_mb:100", MaxSplitSizeMBRange: []int64{32, 512}})
	assert.Contains(t, b.String(), "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:100\n"+
		"  max_split_size_mb from 32 to 512 gives the same peak reserved (every value tried in that range)\n")
	b.Reset()
	writeTune(&b, tuneResult{Trace: "t", Conf: "max_split_size_mb:100"})
	assert.NotContains(t, b.String(), "gives the same peak")

	snap := filepath.Join(sharedSnapshotDir, "small_train_step.pickle")
	if _, err := os.Stat(snap); err != nil {
		t.Skipf("no snapshot at %s", snap)
	}
	var tuned tuneResult
	runJSON(t, nil, &tuned, "tune", "-f", "json", snap)
	require.Len(t, tuned.MaxSplitSizeMBRange, 2, "conf %s", tuned.Conf)
	var ms int64
	_, err := fmt.Sscanf(tuned.Conf, "max_split_size_mb:%d", &ms)
	require.NoError(t, err, tuned.Conf)
	assert.LessOrEqual(t, tuned.MaxSplitSizeMBRange[0], ms)
	assert.GreaterOrEqual(t, tuned.MaxSplitSizeMBRange[1], ms)
	assert.Less(t, tuned.MaxSplitSizeMBRange[0], tuned.MaxSplitSizeMBRange[1])
}

// TestTuneNPU: on a snapshot that torch_npu wrote every setting replays
// with torch_npu's rules, so that the setting it records, tried among the
// others, gives the figures of the "as recorded" baseline; the line to
// paste is torch_npu's variable, without the strategy's device item,
// which torch_npu's parser would reject, and replays to the same figures.
func TestTuneNPU(t *testing.T) {
	path := pk.SharedSnapshot(t, sharedSnapshotDir, "npu_expandable.pickle")
	var res tuneResult
	runJSON(t, nil, &res, "tune", "-f", "json", path)
	assert.Equal(t, "expandable_segments:True,device:npu", res.RecordedConf)
	assert.Equal(t, "PYTORCH_NPU_ALLOC_CONF="+res.Conf, res.Paste)
	assert.NotContains(t, res.Paste, "device")
	var rows []struct {
		PeakReservedBytes int64 `json:"peak_reserved_bytes"`
		DeviceMallocs     int64 `json:"device_mallocs"`
	}
	runJSON(t, map[string]string{"PYTORCH_CUDA_ALLOC_CONF": res.Conf}, &rows, "-f", "json", "-s", "pytorch:device=npu", path)
	require.Len(t, rows, 1)
	assert.Equal(t, res.PeakReservedBytes, rows[0].PeakReservedBytes)
	assert.Equal(t, res.DeviceMallocs, rows[0].DeviceMallocs)
	if res.Conf == "expandable_segments:True" {
		assert.Equal(t, res.RecordedPeakReservedBytes, res.PeakReservedBytes)
		assert.Equal(t, res.RecordedDeviceMallocs, res.DeviceMallocs)
	}
}

// TestTunePasteCall: with --memory-fraction the line to paste has no
// memory_fraction, which PyTorch's parser rejects, and the call beside it
// sets the fraction; the line in the environment and the fraction the call
// sets replay exactly tune's figures, which the line alone does not give:
// under the cap of 50 MiB the segment of 40 MiB is made only after the
// cached one of 30 MiB is released.
func TestTunePasteCall(t *testing.T) {
	const mib = 1 << 20
	trace := writeText(t, t.TempDir(), "capped.csv", fmt.Sprintf("op,id,size,stream,time_us\n"+
		"alloc,1,%d,0,0\nfree,1,,0,1\nalloc,2,%d,0,2\nfree,2,,0,3\nalloc,3,%d,0,4\nfree,3,,0,5\n", 30*mib, 40*mib, 30*mib))
	var tuned tuneResult
	runJSON(t, nil, &tuned, "tune", "-f", "json", "--memory-fraction", "0.5", "--capacity", "100MiB", trace)
	assert.NotContains(t, tuned.Paste, "memory_fraction")
	assert.Equal(t, "torch.cuda.set_per_process_memory_fraction(0.5)", tuned.PasteCall)
	variable, value, _ := strings.Cut(tuned.Paste, "=")
	type row struct {
		PeakReserved  int64 `json:"peak_reserved_bytes"`
		DeviceMallocs int64 `json:"device_mallocs"`
		OOMs          int64 `json:"ooms"`
	}
	var rows, alone []row
	runJSON(t, map[string]string{variable: value}, &rows, "-f", "json", "--capacity", "100MiB", "-s", "pytorch:memory_fraction=0.5", trace)
	require.Len(t, rows, 1)
	assert.Equal(t, row{tuned.PeakReservedBytes, tuned.DeviceMallocs, 0}, rows[0], tuned.Paste)
	runJSON(t, map[string]string{variable: value}, &alone, "-f", "json", "--capacity", "100MiB", "-s", "pytorch", trace)
	assert.NotEqual(t, rows[0].PeakReserved, alone[0].PeakReserved, "the line without the call")

	code, stdout, stderr := run(t, nil, "tune", "--memory-fraction", "0.5", "--capacity", "100MiB", trace)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(stdout, "\n")
	assert.Equal(t, tuned.Paste, lines[0])
	assert.Equal(t, "  plus torch.cuda.set_per_process_memory_fraction(0.5) in the program", lines[1])
}
