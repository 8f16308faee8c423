package pytorch

import (
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// The variables that the allocators modelled read their settings from.
//
// PyTorch's CUDA allocator reads PYTORCH_CUDA_ALLOC_CONF in every release
// modelled (CUDAAllocatorConfig::instance, c10/cuda/CUDAAllocatorConfig.h).
// PYTORCH_ALLOC_CONF, the name common to all accelerators, came with
// AcceleratorAllocatorConfig (c10/core/AllocatorConfig.cpp,
// pytorch/pytorch#149601) for 2.9, whose CUDA allocator still took its
// settings from PYTORCH_CUDA_ALLOC_CONF alone (issue #183387:
// expandable_segments in PYTORCH_ALLOC_CONF has no effect in 2.9.1). From
// 2.10 CUDAAllocatorConfig reuses the common configuration
// (pytorch/pytorch#165131, #165135, merged in October 2025) and
// CUDAAllocatorConfig::instance reads PYTORCH_CUDA_ALLOC_CONF first, then,
// when it is unset, PYTORCH_ALLOC_CONF: the older name wins when both are
// set. torch_npu reads PYTORCH_NPU_ALLOC_CONF alone (its
// CachingAllocatorConfig::instance, torch_npu/csrc/core/npu/NPUAllocatorConfig.h).
const (
	EnvCUDAConf = "PYTORCH_CUDA_ALLOC_CONF"
	EnvConf     = "PYTORCH_ALLOC_CONF"
	EnvNPUConf  = "PYTORCH_NPU_ALLOC_CONF"
)

// ReadsEnvConf reports whether the CUDA allocator of release v (the
// newest for the zero Version) reads PYTORCH_ALLOC_CONF: from 2.10 (see
// [EnvConf]).
func (v Version) ReadsEnvConf() bool { return v.atLeast(2, 10) }

// extension reports whether key is one of the strategy's own settings
// that no PyTorch release parses, and that say which allocator is
// modelled rather than how it is set: version, device and deviceN.key.
func extension(key string) bool {
	if key == "version" || key == "device" {
		return true
	}
	_, _, per, err := deviceItem(key)
	return per || err != nil
}

// PasteLine returns the line a user sets for the allocator that conf (in
// the syntax of [ParseConf]) configures, "VARIABLE=settings": the
// variable that allocator reads (PYTORCH_NPU_ALLOC_CONF for device:npu,
// else PYTORCH_CUDA_ALLOC_CONF, which every PyTorch release reads and
// which wins from 2.10; see [EnvCUDAConf]), and the settings of conf that
// PyTorch parses. It leaves out the strategy's version, device and
// deviceN.key items, and memory_fraction, which PyTorch's parser rejects
// as unknown too ("Unrecognized CachingAllocator option",
// CUDAAllocatorConfig::parseArgs, c10/cuda/CUDAAllocatorConfig.cpp): a
// program sets the fraction by a call, which [FractionCall] writes, and a
// caller that prints the line prints the call beside it ([Paste]), so
// that the two replay as the figures shown.
func PasteLine(conf string) string {
	variable := EnvCUDAConf
	var kept []string
	for _, item := range snapshot.SplitConf(conf) {
		k, v, _ := strings.Cut(item, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "device" && strings.EqualFold(v, "npu") {
			variable = EnvNPUConf
		}
		if extension(k) || k == "memory_fraction" {
			continue
		}
		kept = append(kept, strings.TrimSpace(item))
	}
	return variable + "=" + strings.Join(kept, ",")
}

// FractionCall returns the Python call that caps the allocator's reserved
// memory at the fraction that conf's memory_fraction item gives (the last
// one, as the strategy reads conf): torch.cuda.set_per_process_memory_fraction(F)
// for PyTorch's CUDA allocator, torch.npu.set_per_process_memory_fraction(F)
// for torch_npu's (device:npu; torch_npu/npu/memory.py in Ascend/pytorch).
// It is "" when conf sets no fraction, or 0, no cap.
func FractionCall(conf string) string {
	module, fraction := "cuda", ""
	for _, item := range snapshot.SplitConf(conf) {
		k, v, _ := strings.Cut(item, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case k == "device":
			module = "cuda"
			if strings.EqualFold(v, "npu") {
				module = "npu"
			}
		case k == "memory_fraction":
			fraction = v
		}
	}
	if f, err := strconv.ParseFloat(fraction, 64); err != nil || f == 0 {
		return ""
	}
	return "torch." + module + ".set_per_process_memory_fraction(" + fraction + ")"
}

// Paste returns what a user sets for conf: [PasteLine], and, when conf
// sets a memory fraction, "PasteLine plus FractionCall" (the line in the
// environment, the call in the program); the two replay as conf does.
func Paste(conf string) string {
	line := PasteLine(conf)
	if call := FractionCall(conf); call != "" {
		return line + " plus " + call
	}
	return line
}

// AllocatorParams returns the parameters of the pytorch strategy that conf's
// version and device items set (version=2.8, device=npu), in that order,
// so that a spec whose conf is replaced keeps the allocator conf chose.
// Items of deviceN are per device and have no parameter; they are left
// out.
func AllocatorParams(conf string) []gpualloc.KeyValue {
	var version, device string
	for _, item := range snapshot.SplitConf(conf) {
		k, v, _ := strings.Cut(item, ":")
		switch strings.TrimSpace(k) {
		case "version":
			version = strings.TrimSpace(v)
		case "device":
			device = strings.TrimSpace(v)
		}
	}
	var out []gpualloc.KeyValue
	if version != "" {
		out = append(out, gpualloc.KeyValue{Key: "version", Value: version})
	}
	if device != "" {
		out = append(out, gpualloc.KeyValue{Key: "device", Value: device})
	}
	return out
}
