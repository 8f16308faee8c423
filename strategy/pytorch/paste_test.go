package pytorch_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// openEnv opens spec on a 1 GiB device with the environment env.
func openEnv(t *testing.T, spec string, env map[string]string) *pytorch.Allocator {
	t.Helper()
	p, err := gpualloc.Select(spec, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	a, err := p.Open(strategytest.NewDevice(GiB))
	require.NoError(t, err)
	return a.(*pytorch.Allocator)
}

// TestEnvConfByRelease: PYTORCH_ALLOC_CONF sets the CUDA allocator's
// settings from 2.10 only; 2.9 (pytorch/pytorch#183387) and older take
// them from PYTORCH_CUDA_ALLOC_CONF alone, and the strategy's own items
// (here the release itself) still apply. With both set,
// PYTORCH_CUDA_ALLOC_CONF wins in every release.
func TestEnvConfByRelease(t *testing.T) {
	for _, tt := range []struct {
		spec, conf string
		expandable bool
	}{
		{"pytorch:version=2.9", "expandable_segments:True", false},
		{"pytorch:version=2.10", "expandable_segments:True", true},
		{"pytorch", "expandable_segments:True,version:2.9", false},
		{"pytorch", "expandable_segments:True,version:2.10", true},
		{"pytorch", "expandable_segments:True", true}, // the newest
	} {
		a := openEnv(t, tt.spec, map[string]string{pytorch.EnvConf: tt.conf})
		assert.Equal(t, tt.expandable, a.Config().ExpandableSegments, "%s with PYTORCH_ALLOC_CONF=%s", tt.spec, tt.conf)
	}
	a := openEnv(t, "pytorch:version=2.9", map[string]string{pytorch.EnvConf: "version:2.9,max_split_size_mb:64"})
	assert.Equal(t, "2.9", a.Config().Version.String())
	assert.Equal(t, pytorch.DefaultConfig().MaxSplitSize, a.Config().MaxSplitSize)

	for _, v := range []string{"2.9", "2.11"} {
		env := map[string]string{pytorch.EnvConf: "max_split_size_mb:64", pytorch.EnvCUDAConf: "max_split_size_mb:128"}
		a := openEnv(t, "pytorch:version="+v, env)
		assert.Equal(t, int64(128*MiB), a.Config().MaxSplitSize, v)
	}
	a = openEnv(t, "pytorch:version=2.1", map[string]string{pytorch.EnvCUDAConf: "expandable_segments:True"})
	assert.True(t, a.Config().ExpandableSegments)
}

// TestEnvConfFigures: under 2.9, PYTORCH_ALLOC_CONF=expandable_segments:True
// leaves a 15 MiB request in a 20 MiB segment of its own kind, as
// without it; under 2.10 it maps a 20 MiB page of an expandable segment,
// one device allocation either way but a mapping, not a cudaMalloc.
func TestEnvConfFigures(t *testing.T) {
	env := map[string]string{pytorch.EnvConf: "expandable_segments:True,max_split_size_mb:20"}
	var reserved []int64
	for _, v := range []string{"2.9", "2.10"} {
		a := openEnv(t, "pytorch:version="+v, env)
		alloc(t, a, 30*MiB, 0)
		reserved = append(reserved, a.Stats().Reserved)
	}
	// 2.9: a cudaMalloc of 30 MiB rounded to 2 MiB; 2.10: two 20 MiB pages.
	assert.Equal(t, []int64{30 * MiB, 40 * MiB}, reserved)
}

// TestPasteLine: the line to paste names the variable the allocator
// reads and leaves out what PyTorch would reject.
func TestPasteLine(t *testing.T) {
	for _, tt := range []struct{ conf, want string }{
		{"", "PYTORCH_CUDA_ALLOC_CONF="},
		{"max_split_size_mb:64,version:2.8", "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64"},
		{"expandable_segments:True,device1.expandable_segments:False,device:npu", "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True"},
		{"roundup_power2_divisions:[256:1,512:2,>:8],memory_fraction:0.5", "PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:[256:1,512:2,>:8]"},
	} {
		assert.Equal(t, tt.want, pytorch.PasteLine(tt.conf), tt.conf)
	}
	// The fraction is a call of the program's, beside the line.
	for _, tt := range []struct{ conf, call, paste string }{
		{"expandable_segments:True", "", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
		{"memory_fraction:0.5,expandable_segments:True", "torch.cuda.set_per_process_memory_fraction(0.5)",
			"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True plus torch.cuda.set_per_process_memory_fraction(0.5)"},
		{"device:npu,memory_fraction:0.25,memory_fraction:0.75", "torch.npu.set_per_process_memory_fraction(0.75)",
			"PYTORCH_NPU_ALLOC_CONF= plus torch.npu.set_per_process_memory_fraction(0.75)"},
		{"memory_fraction:0", "", "PYTORCH_CUDA_ALLOC_CONF="},
	} {
		assert.Equal(t, tt.call, pytorch.FractionCall(tt.conf), tt.conf)
		assert.Equal(t, tt.paste, pytorch.Paste(tt.conf), tt.conf)
	}
	assert.Equal(t, []gpualloc.KeyValue{{Key: "version", Value: "2.8"}, {Key: "device", Value: "npu"}},
		pytorch.AllocatorParams("device:npu,expandable_segments:True,version:2.8,device0.expandable_segments:False"))
	assert.Empty(t, pytorch.AllocatorParams("max_split_size_mb:64"))
}

// FuzzPasteLine: whatever the conf, the line names one of the variables
// and keeps no item of the strategy's own that names the allocator, nor
// the memory fraction, which PyTorch's parser would reject.
func FuzzPasteLine(f *testing.F) {
	for _, s := range []string{"", "device:npu,version:2.8", "device0.expandable_segments:False,max_split_size_mb:64", ",,:", "roundup_power2_divisions:[1:2,>:4]", "memory_fraction:0.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, conf string) {
		line := pytorch.PasteLine(conf)
		variable, rest, ok := strings.Cut(line, "=")
		if !ok || variable != pytorch.EnvCUDAConf && variable != pytorch.EnvNPUConf {
			t.Fatalf("%q: line %q", conf, line)
		}
		for _, item := range strings.Split(rest, ",") {
			k, _, _ := strings.Cut(item, ":")
			k = strings.TrimSpace(k)
			if k == "version" || k == "device" || k == "memory_fraction" || strings.HasPrefix(k, "device") && strings.Contains(k, ".") {
				t.Fatalf("%q: line %q keeps %q", conf, line, item)
			}
		}
	})
}
