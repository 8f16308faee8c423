package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
)

// Sums of sizes never wrap: the mean of allocations whose sizes add up past
// 2^63 is exact, and a trace whose live bytes would pass 2^63 is refused at
// its line.
func TestInspectLargeSizes(t *testing.T) {
	dir := t.TempDir()
	seq := writeText(t, dir, "seq.csv", "op,id,size\nalloc,1,6000000000000000000\nfree,1,\n"+
		"alloc,2,6000000000000000000\nfree,2,\nalloc,3,3\n")
	var infos []traceInfo
	runJSON(t, nil, &infos, "inspect", "-f", "json", seq)
	require.Len(t, infos, 1)
	assert.Equal(t, int64(4000000000000000001), infos[0].MeanSize)
	assert.Equal(t, int64(6000000000000000000), infos[0].PeakLiveBytes)

	both := writeText(t, dir, "both.csv", "op,id,size\nalloc,1,6000000000000000000\nalloc,2,6000000000000000000\n")
	code, _, errs := run(t, nil, "inspect", both)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "both.csv:3: alloc of id 2 (6000000000000000000 bytes) takes the live bytes past 2^63-1 (8 EiB)")
}

// A trace of several devices counts its failed allocations device by
// device, and the device rows add up to the whole's.
func TestInspectAllocFailuresPerDevice(t *testing.T) {
	oom := func(t int64) pk.Dict {
		return pk.Dict{{K: "action", V: "oom"}, {K: "device_free", V: int64(1 << 20)}, {K: "size", V: int64(3 << 20)},
			{K: "stream", V: int64(0)}, {K: "time_us", V: t}}
	}
	dev0 := []any{pk.Entry("alloc", 0x1000, 512, 0, 1), oom(2), oom(3), pk.Entry("free_completed", 0x1000, 512, 0, 4)}
	dev1 := []any{pk.Entry("alloc", 0x9000, 512, 0, 1), oom(5), pk.Entry("free_completed", 0x9000, 512, 0, 6)}
	path := filepath.Join(t.TempDir(), "two.pickle")
	require.NoError(t, os.WriteFile(path, pkPickle(pk.Snapshot(nil, [][]any{dev0, dev1}, nil)), 0o644))
	code, out, errs := run(t, nil, "inspect", "-f", "json", path)
	require.Equal(t, 0, code, errs)
	var infos []traceInfo
	require.NoError(t, json.Unmarshal([]byte(out), &infos))
	require.Len(t, infos, 3)
	assert.Nil(t, infos[0].Device)
	assert.Equal(t, int64(3), infos[0].AllocFailures)
	assert.Equal(t, int64(2), infos[1].AllocFailures, "device 0")
	assert.Equal(t, int64(1), infos[2].AllocFailures, "device 1")
}

// inspect names the release that wrote each shared snapshot, as inferred
// from what it records, and torch_npu for those of Ascend NPUs.
func TestInspectPyTorchVersion(t *testing.T) {
	want := map[string]string{
		"compile_usermeta.pickle": "2.11", "xl_fwd_expandable.pickle": "2.11", // graph_capture_record_stream_reuse
		"small_train_step.pickle": "2.8", "forward_ctx128.pickle": "2.8", // allocator_settings without it
		"inference_2024.pickle": "2.2", // no allocator_settings
		"npu_expandable.pickle": "torch_npu", "npu_two_devices.pickle": "torch_npu",
	}
	for _, f := range pk.SharedSnapshots(t, sharedSnapshotDir) {
		v, ok := want[filepath.Base(f)]
		if !ok {
			continue
		}
		code, out, errs := run(t, nil, "inspect", "-f", "json", f)
		require.Equal(t, 0, code, errs)
		var infos []traceInfo
		require.NoError(t, json.Unmarshal([]byte(out), &infos))
		assert.Equal(t, v, infos[0].PyTorchVersion, f)
		assert.NotEmpty(t, infos[0].PyTorchVersionWhy, f)
		for _, i := range infos[1:] {
			assert.Empty(t, i.PyTorchVersion, "only the first row")
		}
		_, text, _ := run(t, nil, "inspect", f)
		assert.Contains(t, text, filepath.Base(f))
		assert.Contains(t, text, infos[0].PyTorchVersionWhy)
	}
}
