package snapshot_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// npuSegment is a segment of device dev whose one live block holds a
// request of req bytes in a block of size bytes.
func npuSegment(dev int, expandable bool, req, size int64) snapshot.Segment {
	return snapshot.Segment{Device: dev, Address: 1 << 40 * uint64(dev+1), TotalSize: 2 << 20, IsExpandable: expandable,
		Blocks: []snapshot.Block{
			{Address: 1 << 40 * uint64(dev+1), Size: size, RequestedSize: req, State: snapshot.ActiveAllocated},
			{Address: 1<<40*uint64(dev+1) + uint64(size), Size: 2<<20 - size, State: snapshot.Inactive},
		}}
}

// TestTorchNPU: a snapshot whose blocks hold their requests plus 32 bytes,
// rounded to 512, is torch_npu's; blocks of the request's own rounding,
// and allocator_settings, are PyTorch's.
func TestTorchNPU(t *testing.T) {
	npu := &snapshot.Snapshot{Segments: []snapshot.Segment{npuSegment(0, false, 512, 1024), npuSegment(1, false, 1000, 1536)}}
	assert.True(t, npu.TorchNPU())
	assert.Equal(t, "device:npu", npu.Conf())
	r, err := npu.DeviceRules(0)
	require.NoError(t, err)
	assert.Equal(t, int64(snapshot.NPUPad), r.Pad)
	assert.Equal(t, int64(1024), r.RoundSize(512))

	cuda := &snapshot.Snapshot{Segments: []snapshot.Segment{npuSegment(0, false, 512, 512), npuSegment(0, false, 1000, 1024)}}
	assert.False(t, cuda.TorchNPU())
	assert.Equal(t, "", cuda.Conf())
	r, err = cuda.DeviceRules(0)
	require.NoError(t, err)
	assert.Equal(t, int64(512), r.RoundSize(512))

	// 100 bytes round to 512 either way; a block not split tells nothing.
	none := &snapshot.Snapshot{Segments: []snapshot.Segment{npuSegment(0, false, 100, 512), npuSegment(0, false, 3000, 1<<20)}}
	assert.False(t, none.TorchNPU())

	withSettings := &snapshot.Snapshot{Segments: npu.Segments, AllocatorSettings: &snapshot.AllocatorSettings{MaxSplitSize: -1}}
	assert.False(t, withSettings.TorchNPU(), "torch_npu writes no allocator_settings")
}

// TestDeviceConf: where one device's segments are expandable and
// another's are not, the snapshot's conf says so per device.
func TestDeviceConf(t *testing.T) {
	s := &snapshot.Snapshot{Segments: []snapshot.Segment{npuSegment(0, true, 512, 1024), npuSegment(1, false, 512, 1024)}}
	assert.Equal(t, "expandable_segments:True,device1.expandable_segments:False,device:npu", s.Conf())
	assert.Equal(t, "expandable_segments:True,device:npu", s.DeviceConf(0))
	assert.Equal(t, "device:npu", s.DeviceConf(1))
	assert.Equal(t, "expandable_segments:True,device:npu", s.DeviceConf(2), "a device that shows nothing takes the file's")
	r0, err := s.DeviceRules(0)
	require.NoError(t, err)
	r1, err := s.DeviceRules(1)
	require.NoError(t, err)
	assert.True(t, r0.Expandable)
	assert.False(t, r1.Expandable)

	// Settings that record expandable segments hold for every device.
	s.AllocatorSettings = &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: -1, ExpandableSegments: true}
	assert.Equal(t, "expandable_segments:True", s.Conf())
	assert.Equal(t, "expandable_segments:True", s.DeviceConf(1))
}

// TestPyTorchVersion: the release a snapshot points to.
func TestPyTorchVersion(t *testing.T) {
	seg := npuSegment(0, false, 512, 512) // PyTorch's rounding
	newest := &snapshot.Snapshot{Segments: []snapshot.Segment{seg},
		AllocatorSettings: &snapshot.AllocatorSettings{MaxSplitSize: -1, Other: map[string]any{"graph_capture_record_stream_reuse": false}}}
	v, why := newest.PyTorchVersion()
	assert.Equal(t, snapshot.NewestPyTorch, v)
	assert.Contains(t, why, "graph_capture_record_stream_reuse")
	assert.Equal(t, "", newest.Conf())

	older := &snapshot.Snapshot{Segments: []snapshot.Segment{seg}, AllocatorSettings: &snapshot.AllocatorSettings{MaxSplitSize: -1}}
	v, _ = older.PyTorchVersion()
	assert.Equal(t, "2.8", v)
	assert.Equal(t, "", older.Conf(), "the release is not a setting")
	older.AllocatorSettings.Conf = "version:2.4" // as a replay of release 2.4 records it
	assert.Equal(t, "version:2.4", older.Conf())

	none := &snapshot.Snapshot{Segments: []snapshot.Segment{seg}}
	v, why = none.PyTorchVersion()
	assert.Equal(t, "2.2", v, "no entries")
	assert.Contains(t, why, "no allocator_settings")
	timed := snapshot.New([]snapshot.Segment{seg}, []snapshot.TraceEntry{{Action: snapshot.Alloc, Addr: seg.Address, Size: 512, TimeUS: 7}})
	v, _ = timed.PyTorchVersion()
	assert.Equal(t, "2.2", v, "entries with time_us")
	untimed := snapshot.New([]snapshot.Segment{seg}, []snapshot.TraceEntry{{Action: snapshot.Alloc, Addr: seg.Address, Size: 512, TimeUS: snapshot.NoTime}})
	v, why = untimed.PyTorchVersion()
	assert.Equal(t, "2.1", v, "entries without time_us")
	assert.Contains(t, why, "without time_us")
	r, _ := untimed.Release()
	assert.Equal(t, "2.1", r)

	npu := &snapshot.Snapshot{Segments: []snapshot.Segment{npuSegment(0, false, 512, 1024)}}
	v, why = npu.PyTorchVersion()
	assert.Equal(t, "", v)
	assert.Contains(t, why, "torch_npu")
}
