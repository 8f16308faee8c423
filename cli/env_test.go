package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
)

// When both of PyTorch's variables are set, the one ignored is named, even
// when its value is not valid.
func TestIgnoredPyTorchVariable(t *testing.T) {
	code, _, errs := run(t, map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": "bogus:1"},
		"-s", "pytorch", "testdata/tiny.csv")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set pytorch's parameters; "+
		"PYTORCH_ALLOC_CONF=bogus:1 is ignored: PYTORCH_CUDA_ALLOC_CONF, also set, wins")
}

// TestEnvConfByReleaseNote: PYTORCH_ALLOC_CONF sets pytorch's parameters
// only under releases that read it (2.10 and later): under 2.9 the note
// says that the replay ignores it, as the replay does (no expandable
// segment: no device mapping), and a sweep says which releases read it.
func TestEnvConfByReleaseNote(t *testing.T) {
	env := map[string]string{"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
	var rows []struct {
		DeviceMaps int64 `json:"device_maps"`
	}
	code, _, errs := run(t, env, "-s", "pytorch:version=2.9", "testdata/tiny.csv")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "simulate: environment: PYTORCH_ALLOC_CONF=expandable_segments:True: PyTorch 2.9 does not read PYTORCH_ALLOC_CONF "+
		"(its CUDA allocator reads it from 2.10, pytorch/pytorch#183387), and the replay ignores the PyTorch settings it gives, as PyTorch would; "+
		"PYTORCH_CUDA_ALLOC_CONF sets them in every release\n", errs)
	runJSON(t, env, &rows, "-f", "json", "-s", "pytorch:version=2.9", "testdata/tiny.csv")
	assert.Zero(t, rows[0].DeviceMaps, "2.9 maps no expandable segment")

	code, _, errs = run(t, env, "-s", "pytorch:version=2.10", "testdata/tiny.csv")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "simulate: environment: PYTORCH_ALLOC_CONF=expandable_segments:True set pytorch's parameters\n", errs)
	runJSON(t, env, &rows, "-f", "json", "-s", "pytorch:version=2.10", "testdata/tiny.csv")
	assert.Positive(t, rows[0].DeviceMaps, "2.10 maps expandable segments")

	code, _, errs = run(t, env, "-s", "pytorch:version=2.7..2.11", "testdata/tiny.csv")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "PYTORCH_ALLOC_CONF=expandable_segments:True set pytorch's parameters under PyTorch 2.10 and 2.11; "+
		"PyTorch 2.7 to 2.9 do not read PYTORCH_ALLOC_CONF")
}

// TestEnvConfAutoNote: with version=auto a snapshot that PyTorch 2.8 wrote
// replays with 2.8's rules, which take nothing from PYTORCH_ALLOC_CONF:
// the note says so and how to replay with them, and the figures are 2.8's.
func TestEnvConfAutoNote(t *testing.T) {
	path := pk.SharedSnapshot(t, sharedSnapshotDir, "forward_ctx128.pickle")
	env := map[string]string{"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
	code, _, errs := run(t, env, "-f", "json", "-s", "pytorch", path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, path+": PyTorch 2.8, which wrote it, does not read PYTORCH_ALLOC_CONF (pytorch/pytorch#183387): "+
		"version=auto replays it as PyTorch 2.8 would, without the settings of PYTORCH_ALLOC_CONF=expandable_segments:True; -s pytorch:version=2.11 replays with them")
	var auto, newest, old []struct {
		PeakReservedBytes int64 `json:"peak_reserved_bytes"`
		DeviceMallocs     int64 `json:"device_mallocs"`
	}
	runJSON(t, env, &auto, "-f", "json", "-s", "pytorch", path)
	runJSON(t, env, &newest, "-f", "json", "-s", "pytorch:version=2.10", path)
	runJSON(t, env, &old, "-f", "json", "-s", "pytorch:version=2.8", path)
	assert.Equal(t, old, auto, "version=auto ignores PYTORCH_ALLOC_CONF, as 2.8 does")
	assert.NotEqual(t, newest, auto, "2.10 reads it")
	code, _, errs = run(t, nil, "-s", "pytorch", path)
	require.Equal(t, 0, code, errs)
	assert.NotContains(t, errs, "PYTORCH_ALLOC_CONF")
}

// TestFidelityEnvConfByRelease: fidelity takes PyTorch's variables as
// simulate -s pytorch does. PYTORCH_ALLOC_CONF is not read for a snapshot
// that 2.8 wrote (a line says so, and the file is compared with the
// settings it records), as 2.8 would not read it.
func TestFidelityEnvConfByRelease(t *testing.T) {
	path := pk.SharedSnapshot(t, sharedSnapshotDir, "forward_ctx128.pickle")
	type row struct {
		Conf     string `json:"conf"`
		Peak     int64  `json:"replayed_peak_reserved_bytes"`
		Mallocs  int64  `json:"replayed_device_mallocs"`
		Matches  int64  `json:"address_matches"`
		Recorded int64  `json:"recorded_device_mallocs"`
	}
	var plain, env []row
	runJSON(t, nil, &plain, "fidelity", "-f", "json", path)
	vars := map[string]string{"PYTORCH_ALLOC_CONF": "expandable_segments:True"}
	code, _, errs := run(t, vars, "fidelity", "-f", "json", path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, path+": PyTorch 2.8, which wrote it, does not read PYTORCH_ALLOC_CONF")
	runJSON(t, vars, &env, "fidelity", "-f", "json", path)
	assert.Equal(t, plain, env)
	var replay []struct {
		Peak    int64 `json:"peak_reserved_bytes"`
		Mallocs int64 `json:"device_mallocs"`
	}
	runJSON(t, vars, &replay, "-f", "json", "-s", "pytorch", path)
	require.Len(t, env, 1)
	assert.Equal(t, env[0].Peak, replay[0].Peak, "fidelity and a replay agree")
	assert.Equal(t, env[0].Mallocs, replay[0].Mallocs)
}
