package pytorch_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// TestPythonSimulatorAgrees checks that testdata/pysim.py, the pure-Python
// simulator of PyTorch's allocator that BENCHMARKS.md times against this
// package, follows the same rules: on a bundled trace it reaches the same
// peak of reserved memory with the same device allocations. It is skipped
// where python3 is not installed.
func TestPythonSimulatorAgrees(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	const trace = "../../traces/bundled/transformer-cpu.csv.gz"
	out, err := exec.Command(python, "testdata/pysim.py", trace).Output()
	require.NoError(t, err)
	f := strings.Fields(string(out))
	require.Len(t, f, 5, "events, peak reserved, device mallocs, OOMs, seconds: %q", out)
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		return n
	}

	r, err := traces.Open(trace, traces.Options{})
	require.NoError(t, err)
	defer r.Close()
	p, err := gpualloc.Resolve(gpualloc.Spec{Name: "pytorch"}, nil)
	require.NoError(t, err)
	res, err := sim.Replay(r, sim.Config{Params: p, SeriesBuckets: -1})
	require.NoError(t, err)
	assert.Equal(t, res.Events, num(f[0]), "events")
	assert.Equal(t, res.PeakReservedBytes, num(f[1]), "peak reserved")
	assert.Equal(t, res.DeviceMallocs, num(f[2]), "device mallocs")
	assert.Equal(t, res.OOMs, num(f[3]), "OOMs")
}
