package pytorch

import (
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc/snapshot"
)

// AllocatorSettings returns the allocator's settings as PyTorch records them
// in a memory snapshot's "allocator_settings": the effective
// max_split_size, roundup_power2_divisions, garbage_collection_threshold and
// expandable_segments, and in Conf the PYTORCH_CUDA_ALLOC_CONF string that
// sets every setting that differs from PyTorch's default
// (max_non_split_rounding_mb included, which PyTorch records only there,
// and memory_fraction, which PyTorch sets by a call and does not record at
// all: the strategy reads it in its conf), with version:X.Y for a release
// before the newest, and graph_capture_record_stream_reuse, which PyTorch
// records from 2.9, so that the snapshot says which release wrote it. It
// makes the allocator a
// [snapshot.SettingsReporter].
func (a *Allocator) AllocatorSettings() snapshot.AllocatorSettings {
	c := a.c
	s := snapshot.DefaultSettings()
	s.Effective = true
	var conf []string
	if c.MaxSplitSize != unlimitedSplit {
		s.MaxSplitSize = c.MaxSplitSize
		conf = append(conf, "max_split_size_mb:"+strconv.FormatInt(c.MaxSplitSize/mib, 10))
	}
	s.RoundupPower2Divisions = c.RoundupPower2Divisions
	if d := snapshot.FormatDivisions(c.RoundupPower2Divisions); d != "0" {
		conf = append(conf, "roundup_power2_divisions:"+d)
	}
	s.GarbageCollectionThreshold = c.GarbageCollectionThreshold
	if c.GarbageCollectionThreshold > 0 {
		conf = append(conf, "garbage_collection_threshold:"+strconv.FormatFloat(c.GarbageCollectionThreshold, 'g', -1, 64))
	}
	s.ExpandableSegments = c.ExpandableSegments
	if c.ExpandableSegments {
		conf = append(conf, "expandable_segments:True")
	}
	if c.MaxNonSplitRounding != largeBuffer {
		conf = append(conf, "max_non_split_rounding_mb:"+strconv.FormatInt(c.MaxNonSplitRounding/mib, 10))
	}
	if c.MemoryFraction > 0 {
		conf = append(conf, "memory_fraction:"+strconv.FormatFloat(c.MemoryFraction, 'g', -1, 64))
	}
	if c.Version.resolve() != Newest() {
		conf = append(conf, "version:"+c.Version.String())
	}
	if c.Version.atLeast(2, 9) {
		// Recorded from 2.9 (pytorch/pytorch#158352, off by default), as
		// snapshot.Snapshot.PyTorchVersion reads it back.
		s.Other = map[string]any{"graph_capture_record_stream_reuse": false}
	}
	if c.Device != CUDA {
		conf = append(conf, "device:"+c.Device.String())
	}
	s.Conf = strings.Join(conf, ",")
	return s
}

// RoundSize returns the size of the block the allocator sets aside for a
// request of size bytes: [Config.RoundSize] of its settings.
func (a *Allocator) RoundSize(size int64) int64 { return a.c.RoundSize(size) }

// Models names the allocator that a models, with its source file:
// [Config.Models] of its settings.
func (a *Allocator) Models() string { return a.c.Models() }

// Models names the allocator that c configures, with its source file:
// PyTorch's CUDACachingAllocator or torch_npu's NPUCachingAllocator.
func (c Config) Models() string {
	if c.Device == NPU {
		return c.Device.Allocator()
	}
	return "PyTorch " + c.Version.String() + " " + c.Device.Allocator()[len("PyTorch "):]
}
