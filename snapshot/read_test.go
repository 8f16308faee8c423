package snapshot_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// sharedDir holds real PyTorch snapshots where the project's shared
// fixtures are checked out beside the repository.
const sharedDir = "../../shared/traces/pytorch"

const (
	a0 = pk.A0
	a1 = pk.A1
	a2 = pk.A2
	a3 = pk.A3
)

// wantTwoDevices is what Read makes of pk.TwoDevices.
func wantTwoDevices(withTime bool) *snapshot.Snapshot {
	tm := func(t int64) int64 {
		if withTime {
			return t
		}
		return snapshot.NoTime
	}
	s := snapshot.New([]snapshot.Segment{
		{Device: 0, Address: a0, TotalSize: 6 << 20, Stream: 7, SegmentType: "large", Blocks: []snapshot.Block{
			{Address: a0, Size: 2 << 20, RequestedSize: 1000, State: snapshot.Inactive},
			{Address: a1, Size: 2 << 20, RequestedSize: 2000, State: snapshot.Inactive},
			{Address: a2, Size: 2 << 20, RequestedSize: 3000, State: snapshot.ActiveAllocated}}},
		{Device: 1, Address: a3, TotalSize: 2 << 20, Stream: 9, SegmentType: "large", Blocks: []snapshot.Block{
			{Address: a3, Size: 2 << 20, RequestedSize: 4000, State: snapshot.ActivePendingFree}}},
	}, []snapshot.TraceEntry{
		{Action: snapshot.Alloc, Addr: a1, Size: 2000, Stream: 7, TimeUS: tm(10)},
		{Action: snapshot.FreeRequested, Addr: a0, Size: 1000, Stream: 7, TimeUS: tm(11)},
		{Action: snapshot.FreeCompleted, Addr: a0, Size: 1000, Stream: 7, TimeUS: tm(12)},
		{Action: snapshot.OutOfMemory, Addr: 123456, Size: 1 << 40, Stream: 7, TimeUS: tm(13)},
		{Action: snapshot.FreeCompleted, Addr: a1, Size: 2000, Stream: 7, TimeUS: tm(20)},
		{Action: snapshot.SegmentAlloc, Addr: a2, Size: 2 << 20, Stream: 5, TimeUS: tm(30)},
		{Action: snapshot.Alloc, Addr: a2, Size: 3000, Stream: 5, TimeUS: tm(31)},
		{Action: snapshot.SegmentMap, Addr: a2, Size: 2 << 20, Stream: 5, TimeUS: tm(32)},
		{Action: snapshot.SegmentUnmap, Addr: a2, Size: 2 << 20, Stream: 5, TimeUS: tm(33)},
		{Action: snapshot.TakeSnapshot, TimeUS: tm(34)},
		{Action: snapshot.SegmentFree, Addr: a2 + 4<<20, Size: 2 << 20, Stream: 5, TimeUS: tm(35)},
	}, []snapshot.TraceEntry{
		{Action: snapshot.Alloc, Addr: a3 + 0x1000, Size: 500, Stream: 9, TimeUS: tm(15)},
		{Action: snapshot.FreeCompleted, Addr: a3 + 0x1000, Size: 500, Stream: 9, TimeUS: tm(25)},
	})
	traces := snapshot.Traces(s)
	for _, t := range traces {
		for i := range t {
			t[i].Stack = 1 // pk.Entry's one frame
		}
	}
	s.SetTraces(traces...)
	s.Frames = []snapshot.Frame{{Name: "f", Filename: "x.py", Line: 1}}
	s.Stacks = [][]int32{nil, {0}}
	if withTime {
		s.AllocatorSettings = &snapshot.AllocatorSettings{
			Conf: "max_split_size_mb:64", Effective: true, MaxSplitSize: 64 << 20, GarbageCollectionThreshold: 0.5,
			RoundupPower2Divisions: [snapshot.Intervals]int64{0, 4},
			Other:                  map[string]any{"pinned_num_register_threads": int64(1), "release_lock_on_cudamalloc": false},
		}
	}
	return s
}

func TestRead(t *testing.T) {
	for _, proto := range []int{2, 3, 4, 5} {
		for _, memo := range []bool{false, true} {
			data := pk.Encode(pk.TwoDevices(true), pk.Options{Proto: proto, Memo: memo, AllLong: proto == 3})
			if memo {
				require.Equal(t, 1, strings.Count(string(data), "free_completed"), "no memo reference written")
			}
			s, err := snapshot.Read(bytes.NewReader(data), "t.pickle")
			require.NoError(t, err, "protocol %d, memo %v", proto, memo)
			require.Equal(t, snapshot.Flat(wantTwoDevices(true)), snapshot.Flat(s), "protocol %d, memo %v", proto, memo)
			assert.Equal(t, []int{0, 1}, s.Devices())
		}
	}
}

func TestReadOld(t *testing.T) {
	// No time_us, no allocator_settings, every integer as LONG1.
	data := pk.Encode(pk.TwoDevices(false), pk.Options{Proto: 2, AllLong: true})
	s, err := snapshot.Read(bytes.NewReader(data), "old.pickle")
	require.NoError(t, err)
	require.Equal(t, snapshot.Flat(wantTwoDevices(false)), snapshot.Flat(s))
	assert.Equal(t, "", s.AllocatorSettings.AllocConf())
}

// oldBlocks are the blocks of a segment at a0 as PyTorch 2.0 and 2.1 write
// them: no address.
func oldBlocks() []any {
	var blocks []any
	for _, b := range []pk.Dict{pk.Block(0, 512, 300, "active_allocated"), pk.Block(0, 1024, 0, "inactive"), pk.Block(0, 2<<20-1536, 0, "inactive")} {
		blocks = append(blocks, b[1:])
	}
	return blocks
}

var wantOldSegment = snapshot.Segment{Address: a0, TotalSize: 2 << 20, SegmentType: "small", Blocks: []snapshot.Block{
	{Address: a0, Size: 512, RequestedSize: 300, State: snapshot.ActiveAllocated},
	{Address: a0 + 512, Size: 1024, State: snapshot.Inactive},
	{Address: a0 + 1536, Size: 2<<20 - 1536, State: snapshot.Inactive}}}

func TestReadLegacy(t *testing.T) {
	// torch.cuda.memory_snapshot(): a bare list of segments, here with
	// blocks that have no address.
	seg := pk.Dict{{K: "device", V: 0}, {K: "address", V: a0}, {K: "total_size", V: int64(2 << 20)}, {K: "stream", V: 0},
		{K: "segment_type", V: "small"}, {K: "blocks", V: oldBlocks()}}
	s, err := snapshot.Read(bytes.NewReader(pk.Encode([]any{seg}, pk.Options{Proto: 2})), "legacy.pickle")
	require.NoError(t, err)
	assert.Equal(t, &snapshot.Snapshot{Segments: []snapshot.Segment{wantOldSegment}}, s)
	st, err := s.InitialState(0)
	require.NoError(t, err)
	assert.Len(t, st.Allocs(), 1)

	s, err = snapshot.Read(bytes.NewReader(pk.Encode([]any{}, pk.Options{Proto: 2})), "empty.pickle")
	require.NoError(t, err)
	assert.Equal(t, &snapshot.Snapshot{}, s)
}

func TestReadNoBlockAddress(t *testing.T) {
	// A 2023 snapshot: a dict with a trace, blocks without addresses.
	seg := pk.Segment(0, a0, 0, "small")
	seg[len(seg)-1].V = oldBlocks()
	data := pk.Encode(pk.Snapshot([]any{seg}, [][]any{{pk.Entry("alloc", a0, 300, 0, -1)}}, nil), pk.Options{Proto: 4, Memo: true})
	s, err := snapshot.Read(bytes.NewReader(data), "2023.pickle")
	require.NoError(t, err)
	require.Len(t, s.Segments, 1)
	assert.Equal(t, wantOldSegment.Blocks, s.Segments[0].Blocks)
	st, err := s.InitialState(0)
	require.NoError(t, err)
	assert.Empty(t, st.Allocs(), "the trace allocates the live block")
}

// sharedFacts are what each shared real snapshot holds where it departs
// from the most of them: settings recorded with the defaults, one device
// with a trace, a start state that the rebuild explains.
var sharedFacts = map[string]struct {
	noSettings  bool   // a file from before PyTorch recorded allocator_settings, or torch_npu's
	conf        string // the PYTORCH_CUDA_ALLOC_CONF it was recorded with
	devices     []int
	unexplained bool // a trace that the rebuild does not explain: a patched build, or torch_npu's allocator
}{
	"custom_fields.pickle":     {unexplained: true},
	"empty.pickle":             {devices: []int{}},
	"inference_2024.pickle":    {noSettings: true},
	"npu_empty_cache.pickle":   {noSettings: true},
	"npu_expandable.pickle":    {noSettings: true, unexplained: true},
	"npu_two_devices.pickle":   {noSettings: true, devices: []int{0, 1}, unexplained: true},
	"xl_fwd_expandable.pickle": {conf: "expandable_segments:True"},
}

func TestReadShared(t *testing.T) {
	pk.ForEachShared(t, sharedDir, func(t *testing.T, name string, data []byte) {
		fact := sharedFacts[name]
		s, err := snapshot.Read(bytes.NewReader(data), name)
		require.NoError(t, err)
		if fact.noSettings {
			require.Nil(t, s.AllocatorSettings)
		} else {
			require.NotNil(t, s.AllocatorSettings)
			assert.True(t, s.AllocatorSettings.Effective)
		}
		assert.Equal(t, fact.conf, s.AllocatorSettings.AllocConf())
		if fact.devices == nil {
			fact.devices = []int{0}
		}
		assert.Equal(t, fact.devices, s.Devices())
		for _, dev := range s.Devices() {
			st, err := s.InitialState(dev)
			if fact.unexplained {
				t.Logf("device %d: %v", dev, err)
			} else {
				require.NoError(t, err)
				assert.Empty(t, st.Unplaced)
			}
			checkState(t, st)
		}
	})
}

// checkState checks that the blocks of every segment of st tile it.
func checkState(t testing.TB, st *snapshot.State) {
	t.Helper()
	for _, sg := range st.Segments {
		at := sg.Address
		for _, b := range sg.Blocks {
			require.Equal(t, at, b.Address, "segment %#x", sg.Address)
			require.Positive(t, b.Size)
			at += uint64(b.Size)
		}
		require.Equal(t, sg.Address+uint64(sg.TotalSize), at, "segment %#x", sg.Address)
	}
}

// snap is a snapshot of device 0 with no segments and the given entries.
func snap(entries ...any) []byte {
	return pk.Encode(pk.Snapshot(nil, [][]any{entries}, nil), pk.Options{Proto: 4, Memo: true})
}

func top(kvs ...pk.KV) []byte {
	return pk.Encode(pk.Dict(kvs), pk.Options{Proto: 4})
}

func TestReadErrors(t *testing.T) {
	seg := func(kv pk.KV) []byte {
		return top(pk.KV{K: "segments", V: []any{pk.Dict{kv}}})
	}
	block := func(kv pk.KV) []byte {
		return seg(pk.KV{K: "blocks", V: []any{pk.Dict{kv}}})
	}
	settings := func(v any) []byte {
		return top(pk.KV{K: "segments", V: []any{}}, pk.KV{K: "allocator_settings", V: v})
	}
	for _, tc := range []struct {
		name string
		in   []byte
		msg  string
		not  bool // not a snapshot
	}{
		{"empty", nil, "x.pickle: not a PyTorch snapshot (not a pickle of protocol 2 to 5)", true},
		{"csv", []byte("op,id,size\nalloc,1,5\n"), "x.pickle: not a PyTorch snapshot (not a pickle of protocol 2 to 5)", true},
		{"list", pk.Encode([]any{1, 2}, pk.Options{Proto: 4}), "x.pickle: not a PyTorch snapshot (the pickle holds a list, not a dict or a list of segments)", true},
		{"dict", top(pk.KV{K: "a", V: 1}), "x.pickle: not a PyTorch snapshot (no segments list)", true},
		{"truncated", snap(pk.Entry("alloc", a0, 5, 0, 1))[:40], "x.pickle: not a PyTorch snapshot (bad pickle: ", true},
		{"segment", top(pk.KV{K: "segments", V: []any{1}}), "x.pickle: segments[0]: not a dict but an integer", false},
		{"device", seg(pk.KV{K: "device", V: -1}), "x.pickle: segments[0].device: out of range: -1", false},
		{"address", seg(pk.KV{K: "address", V: "x"}), "x.pickle: segments[0].address: not an integer but a string", false},
		{"total size", seg(pk.KV{K: "total_size", V: -5}), "x.pickle: segments[0].total_size: negative: -5", false},
		{"huge size", seg(pk.KV{K: "total_size", V: uint64(1) << 63}), "x.pickle: segments[0].total_size: 9223372036854775808 is more than 2^63-1 bytes", false},
		{"segment type", seg(pk.KV{K: "segment_type", V: 1.5}), "x.pickle: segments[0].segment_type: not a string but a float", false},
		{"blocks", seg(pk.KV{K: "blocks", V: pk.Dict{}}), "x.pickle: segments[0].blocks: not a list but a dict", false},
		{"block", seg(pk.KV{K: "blocks", V: []any{nil}}), "x.pickle: segments[0].blocks[0]: not a dict but None", false},
		{"block size", block(pk.KV{K: "size", V: -1}), "x.pickle: segments[0].blocks[0].size: negative: -1", false},
		{"traces", top(pk.KV{K: "segments", V: []any{}}, pk.KV{K: "device_traces", V: 3}), "x.pickle: device_traces: not a list", false},
		{"trace", top(pk.KV{K: "segments", V: []any{}}, pk.KV{K: "device_traces", V: []any{pk.Dict{}}}), "x.pickle: device_traces[0]: not a list", false},
		{"entry", snap([2]any{1, 2}), "x.pickle: device_traces[0][0]: not a dict but a tuple", false},
		{"entry size", snap(pk.Dict{{K: "action", V: "alloc"}, {K: "addr", V: a0}, {K: "size", V: "big"}}),
			"x.pickle: device_traces[0][0].size: not an integer but a string", false},
		{"negative size", snap(pk.Entry("alloc", a0, -5, 0, 1)), "x.pickle: device_traces[0][0].size: negative: -5", false},
		{"negative time", snap(pk.Dict{{K: "action", V: "alloc"}, {K: "time_us", V: -7}}), "x.pickle: device_traces[0][0].time_us: negative: -7", false},
		{"no action", snap(pk.Dict{{K: "addr", V: 5}}), "x.pickle: device_traces[0][0]: no action", false},
		{"settings", settings([]any{}), "x.pickle: allocator_settings: not a dict but a list", false},
		{"settings conf", settings(pk.Dict{{K: "PYTORCH_CUDA_ALLOC_CONF", V: 5}}),
			"x.pickle: allocator_settings.PYTORCH_CUDA_ALLOC_CONF: not a string but an integer", false},
		{"max split size", settings(pk.Dict{{K: "max_split_size", V: "x"}}),
			"x.pickle: allocator_settings.max_split_size: not an integer but a string", false},
		{"max split size range", settings(pk.Dict{{K: "max_split_size", V: uint64(1) << 63}, {K: "x", V: 1}}), "", false},
		{"gc threshold", settings(pk.Dict{{K: "garbage_collection_threshold", V: "high"}}),
			"x.pickle: allocator_settings.garbage_collection_threshold: not a number but a string", false},
		{"gc threshold range", settings(pk.Dict{{K: "garbage_collection_threshold", V: 1.5}}),
			"x.pickle: allocator_settings.garbage_collection_threshold: out of range: 1.5", false},
		{"gc threshold wide", settings(pk.Dict{{K: "garbage_collection_threshold", V: uint64(1) << 63}}),
			"x.pickle: allocator_settings.garbage_collection_threshold: out of range: 9.223372036854776e+18", false},
		{"divisions wide", settings(pk.Dict{{K: "roundup_power2_divisions", V: uint64(1) << 63}}),
			"x.pickle: allocator_settings.roundup_power2_divisions: out of range: 9223372036854775808", false},
		{"expandable", settings(pk.Dict{{K: "expandable_segments", V: "yes"}}),
			"x.pickle: allocator_settings.expandable_segments: not a bool but a string", false},
		{"divisions", settings(pk.Dict{{K: "roundup_power2_divisions", V: "4"}}),
			"x.pickle: allocator_settings.roundup_power2_divisions: not a dict but a string", false},
		{"divisions negative", settings(pk.Dict{{K: "roundup_power2_divisions", V: -4}}),
			"x.pickle: allocator_settings.roundup_power2_divisions: negative: -4", false},
		{"divisions interval", settings(pk.Dict{{K: "roundup_power2_divisions", V: pk.Dict{{K: "3", V: 4}}}}),
			"x.pickle: allocator_settings.roundup_power2_divisions: interval 3: not a power of two of MiB", false},
		{"divisions value", settings(pk.Dict{{K: "roundup_power2_divisions", V: pk.Dict{{K: "4", V: 1.5}}}}),
			"x.pickle: allocator_settings.roundup_power2_divisions[4]: not a number of divisions: 1.5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := snapshot.Read(bytes.NewReader(tc.in), "x.pickle")
			if tc.msg == "" {
				require.NoError(t, err)
				require.Equal(t, snapshot.NoMaxSplitSize, s.AllocatorSettings.MaxSplitSize)
				return
			}
			require.Error(t, err)
			assert.Nil(t, s)
			require.True(t, strings.HasPrefix(err.Error(), tc.msg), "%s\nwant %s", err, tc.msg)
			require.NotContains(t, err.Error(), "\n")
			var se *snapshot.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "x.pickle", se.Name)
			assert.Equal(t, tc.not, errors.Is(err, snapshot.ErrNotSnapshot))
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadIOError(t *testing.T) {
	_, err := snapshot.Read(failingReader{}, "x.pickle")
	require.EqualError(t, err, "x.pickle: read: disk on fire")
	assert.False(t, errors.Is(err, snapshot.ErrNotSnapshot))
}

func TestTrace(t *testing.T) {
	s := wantTwoDevices(false)
	assert.Len(t, s.Trace(1).Entries(), 2)
	assert.Zero(t, s.Trace(2).Len())
	assert.Zero(t, s.Trace(-1).Len())
	s.Segments = append(s.Segments, snapshot.Segment{Device: 5})
	assert.Equal(t, []int{0, 1, 5}, s.Devices())
}

func TestReadNoBlockAddressSegments(t *testing.T) {
	// Every segment's blocks are placed from its own address, whichever
	// segment's list of blocks without an address is longer.
	noAddr := func(sizes ...int64) []any {
		var blocks []any
		for _, n := range sizes {
			blocks = append(blocks, pk.Block(0, n, 0, "inactive")[1:])
		}
		return blocks
	}
	seg0, seg1 := pk.Segment(0, a0, 0, "small"), pk.Segment(0, a1, 0, "large")
	seg0[len(seg0)-1].V = noAddr(1<<20, 1<<20)
	seg1[len(seg1)-1].V = noAddr(512, 1024, 2<<20-1536)
	for _, memo := range []bool{false, true} {
		data := pk.Encode(pk.Snapshot([]any{seg0, seg1}, nil, nil), pk.Options{Proto: 4, Memo: memo})
		s, err := snapshot.Read(bytes.NewReader(data), "2023.pickle")
		require.NoError(t, err)
		require.Len(t, s.Segments, 2)
		var got [][]uint64
		for _, sg := range s.Segments {
			var addrs []uint64
			for _, b := range sg.Blocks {
				addrs = append(addrs, b.Address)
			}
			got = append(got, addrs)
		}
		assert.Equal(t, [][]uint64{{a0, a0 + 1<<20}, {a1, a1 + 512, a1 + 1536}}, got, "memo %v", memo)
	}
}
