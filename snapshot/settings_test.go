package snapshot_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpualloc/gpualloc/snapshot"
)

func TestAllocConf(t *testing.T) {
	def := snapshot.DefaultSettings()
	def.Effective = true
	all := func(n int64) (d [snapshot.Intervals]int64) {
		for i := range d {
			d[i] = n
		}
		return d
	}
	for _, tc := range []struct {
		name string
		s    *snapshot.AllocatorSettings
		want string
	}{
		{"none", nil, ""},
		{"defaults", &def, ""},
		{"every setting", &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: 256 << 20, GarbageCollectionThreshold: 0.6,
			ExpandableSegments: true, RoundupPower2Divisions: all(4)},
			"max_split_size_mb:256,roundup_power2_divisions:4,garbage_collection_threshold:0.6,expandable_segments:True"},
		{"divisions list", &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: -1, RoundupPower2Divisions: [snapshot.Intervals]int64{4, 8}},
			"roundup_power2_divisions:[1:4,2:8]"},
		{"divisions from the second", &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: -1,
			RoundupPower2Divisions: [snapshot.Intervals]int64{0, 8, 0, 2}}, "roundup_power2_divisions:[1:0,2:8,8:2]"},
		{"conf only", &snapshot.AllocatorSettings{MaxSplitSize: -1,
			Conf: "backend:native, max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4],max_non_split_rounding_mb:40,"},
			"max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4],max_non_split_rounding_mb:40"},
		{"effective beats conf", &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: 64 << 20,
			Conf: "max_split_size_mb:128,max_non_split_rounding_mb:40"},
			"max_split_size_mb:64,max_non_split_rounding_mb:40"},
		{"memory fraction of a replay's snapshot", &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: -1, GarbageCollectionThreshold: 0.5,
			Conf: "garbage_collection_threshold:0.5,memory_fraction:0.75"}, "garbage_collection_threshold:0.5,memory_fraction:0.75"},
	} {
		assert.Equal(t, tc.want, tc.s.AllocConf(), tc.name)
	}
}

func TestDeviceMemory(t *testing.T) {
	s := &snapshot.AllocatorSettings{Other: map[string]any{"device_memory": []any{int64(1 << 30), int64(0), int64(2 << 30)}}}
	assert.Equal(t, []int64{1 << 30, 0, 2 << 30, 0, 0}, []int64{s.DeviceMemory(0), s.DeviceMemory(1), s.DeviceMemory(2), s.DeviceMemory(3), s.DeviceMemory(-1)})
	var none *snapshot.AllocatorSettings
	assert.Zero(t, none.DeviceMemory(0))
	assert.Zero(t, none.MemoryFraction())
	s.Other["memory_fraction"] = 1.5
	assert.Zero(t, s.MemoryFraction(), "out of range")
}

func TestSplitConf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  ", nil},
		{"a:1", []string{"a:1"}},
		{"a:1,", []string{"a:1"}}, // PyTorch accepts one trailing comma
		{"a:1, ", []string{"a:1"}},
		{"a:1,,b:2", []string{"a:1", "", "b:2"}}, // PyTorch rejects an empty item
		{",a:1", []string{"", "a:1"}},
		{"r:[1:2,>:4], e:True", []string{"r:[1:2,>:4]", " e:True"}},
	} {
		assert.Equal(t, tc.want, snapshot.SplitConf(tc.in), "%q", tc.in)
	}
}

func TestFormatDivisions(t *testing.T) {
	assert.Equal(t, "0", snapshot.FormatDivisions([snapshot.Intervals]int64{}))
	var d [snapshot.Intervals]int64
	d[15] = 2
	assert.Equal(t, "[1:0,32768:2]", snapshot.FormatDivisions(d))
}
