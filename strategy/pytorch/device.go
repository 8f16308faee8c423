package pytorch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
)

// A Device is the caching allocator modelled: PyTorch's for CUDA, or
// torch_npu's for Ascend NPUs, which is modelled on it and differs where
// [NPU] says.
type Device uint8

const (
	// CUDA is PyTorch's CUDA caching allocator
	// (c10/cuda/CUDACachingAllocator.cpp).
	CUDA Device = iota
	// NPU is torch_npu's caching allocator for Ascend NPUs
	// (torch_npu/csrc/core/npu/NPUCachingAllocator.cpp in Ascend/pytorch).
	// It differs from CUDA's in two rules:
	//
	//   - round_size adds AddPadSize() bytes, 32, to every request before
	//     rounding it, so that a block is at least 32 bytes larger than
	//     its request: 512 bytes become a block of 1024, 40 MiB one of
	//     40 MiB + 512, and its segment 42 MiB (get_allocation_size
	//     rounds to 2 MiB as CUDA's does). (AddPadSize is 0 only on
	//     Ascend950 with CANN 9.1.0 or newer, which is not modelled.)
	//   - with expandable segments, malloc moves a block of a request of
	//     at least kRoundLarge (2 MiB) to the next multiple of
	//     base_addr_aligned_kb (16 KiB by default, m_base_addr_aligned_size
	//     = kAlignRoundLarge in NPUAllocatorConfig.h) when the block still
	//     holds the request from there: the bytes before it are a free
	//     block of their own, back in the pool.
	//
	// Its pools, best fit, splitting, segment and page sizes (2 MiB and
	// 20 MiB, large_segment_size_mb unset), release and retry, empty_cache
	// and the range reserved for an expandable segment (1 1/8 of the
	// device's memory, numSegments in ExpandableSegment's constructor)
	// are CUDA's.
	NPU
)

// npuPad is torch_npu's AddPadSize (NPUCachingAllocator.cpp): bytes added
// to every request before round_size rounds it.
const npuPad = 32

// npuAlign is the default of torch_npu's base_addr_aligned_kb, in bytes:
// kAlignRoundLarge (NPUAllocatorConfig.h).
const npuAlign = 16 << 10

// roundLarge is kRoundLarge: the least request whose block torch_npu
// aligns in an expandable segment.
const roundLarge = 2 << 20

// String returns the device's name as the device parameter reads it:
// "cuda" or "npu".
func (d Device) String() string {
	if d == NPU {
		return "npu"
	}
	return "cuda"
}

// Allocator returns the name of the allocator that d models, with its
// source file: what fidelity compared a snapshot with.
func (d Device) Allocator() string {
	if d == NPU {
		return "torch_npu NPUCachingAllocator (torch_npu/csrc/core/npu/NPUCachingAllocator.cpp)"
	}
	return "PyTorch CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp)"
}

// parseDevice reads the device parameter or conf key: cuda or npu.
func parseDevice(v string) (Device, error) {
	switch strings.ToLower(v) {
	case "cuda":
		return CUDA, nil
	case "npu":
		return NPU, nil
	}
	return CUDA, fmt.Errorf("want cuda or npu")
}

// pad returns the bytes the device's allocator adds to a request before
// rounding it.
func (d Device) pad() int64 {
	if d == NPU {
		return npuPad
	}
	return 0
}

// DeviceIndexer is a backend that knows the index of its device, as the
// simulator's devices do: a conf item "deviceN.key:value" applies only to
// the allocator of device N (see [ParseConfFor]).
type DeviceIndexer interface {
	Index() int
}

// deviceIndex returns b's device index, 0 when b does not say.
func deviceIndex(b gpualloc.Backend) int {
	if d, ok := b.(DeviceIndexer); ok {
		return d.Index()
	}
	return 0
}

// deviceItem splits a conf key "deviceN.key" into N and key; ok is false
// for a key with no such prefix.
func deviceItem(k string) (dev int, key string, ok bool, err error) {
	rest, found := strings.CutPrefix(k, "device")
	if !found {
		return 0, k, false, nil
	}
	n, key, found := strings.Cut(rest, ".")
	if !found {
		return 0, k, false, nil
	}
	dev, perr := strconv.Atoi(n)
	if perr != nil || dev < 0 || n != strconv.Itoa(dev) {
		return 0, k, false, &gpualloc.ParamError{Key: k, Msg: "want deviceN.setting, N a device index"}
	}
	return dev, key, true, nil
}
