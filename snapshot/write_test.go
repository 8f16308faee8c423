package snapshot_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// roundTrip writes s and reads it back.
func roundTrip(t *testing.T, s *snapshot.Snapshot, proto int) (*snapshot.Snapshot, []byte) {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, snapshot.Write(&b, s, snapshot.WriteOptions{Protocol: proto}))
	got, err := snapshot.Read(bytes.NewReader(b.Bytes()), "w.pickle")
	require.NoError(t, err, "protocol %d", proto)
	return got, b.Bytes()
}

func TestWriteRoundTrip(t *testing.T) {
	for _, proto := range []int{0, 2, 3, 4} {
		for _, withTime := range []bool{false, true} {
			want := wantTwoDevices(withTime)
			want.Segments[0].Blocks[2].Category = "activation"
			traces := snapshot.Traces(want)
			traces[0][0].Category = "unknown"
			want.SetTraces(traces...)
			want.Segments[1].IsExpandable = true
			want.Segments[1].AllocatedSize, want.Segments[1].ActiveSize, want.Segments[1].RequestedSize = 2<<20, 2<<20, 4000
			got, data := roundTrip(t, want, proto)
			require.Equal(t, snapshot.Flat(want), snapshot.Flat(got), "protocol %d", proto)
			wantProto := byte(proto)
			if proto == 0 {
				wantProto = 4
			}
			assert.Equal(t, []byte{0x80, wantProto}, data[:2])
			assert.Equal(t, 1, bytes.Count(data, []byte("free_completed")), "strings go through the memo")
			again, _ := roundTrip(t, want, proto)
			assert.Equal(t, snapshot.Flat(got), snapshot.Flat(again))
		}
	}
}

func TestWriteDeterministic(t *testing.T) {
	s := wantTwoDevices(true)
	s.AllocatorSettings.Other = map[string]any{"a": int64(1), "b": []any{"x", 2.5, nil}, "c": map[string]any{"k": true, "j": int64(-1 << 40)}, "d": uint64(1 << 63)}
	var first []byte
	for i := range 5 {
		var b bytes.Buffer
		require.NoError(t, snapshot.Write(&b, s, snapshot.WriteOptions{}))
		if i == 0 {
			first = b.Bytes()
			continue
		}
		require.Equal(t, first, b.Bytes())
	}
	got, err := snapshot.Read(bytes.NewReader(first), "d.pickle")
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"a": int64(1), "b": []any{"x", 2.5, nil}, "c": map[string]any{"k": true, "j": int64(-1 << 40)}},
		map[string]any{"a": got.AllocatorSettings.Other["a"], "b": got.AllocatorSettings.Other["b"], "c": got.AllocatorSettings.Other["c"]})
	assert.Equal(t, "9223372036854775808", got.AllocatorSettings.Other["d"].(interface{ String() string }).String())
}

func TestWriteLarge(t *testing.T) {
	// Many entries: several frames, several APPENDS batches, memo indices
	// past 255 (protocols 2 and 3 then need LONG_BINPUT and LONG_BINGET).
	var tr []snapshot.TraceEntry
	for i := range 5000 {
		tr = append(tr, snapshot.TraceEntry{
			Action: snapshot.Alloc, Addr: a0 + uint64(i)<<9, Size: int64(i) * 1000, Stream: uint64(i % 3), TimeUS: int64(i),
			Category: string(rune('a'+i%26)) + string(rune('a'+i/26%26)),
		})
	}
	s := snapshot.New(nil, []snapshot.TraceEntry{}, tr)
	for _, proto := range []int{2, 3, 4} {
		got, data := roundTrip(t, s, proto)
		require.Equal(t, snapshot.Flat(s), snapshot.Flat(got), "protocol %d", proto)
		if proto == 4 {
			assert.Greater(t, bytes.Count(data, []byte{0x95}), 1, "frames")
		}
	}
}

func TestWriteErrors(t *testing.T) {
	for _, proto := range []int{1, 5, -1} {
		err := snapshot.Write(&bytes.Buffer{}, &snapshot.Snapshot{}, snapshot.WriteOptions{Protocol: proto})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "want 2, 3 or 4")
	}
	s := &snapshot.Snapshot{AllocatorSettings: &snapshot.AllocatorSettings{Other: map[string]any{"x": struct{}{}}}}
	err := snapshot.Write(&bytes.Buffer{}, s, snapshot.WriteOptions{})
	require.EqualError(t, err, "snapshot: write: allocator_settings.x: cannot write a struct {}")
}

func TestWriteShared(t *testing.T) {
	pk.ForEachShared(t, sharedDir, func(t *testing.T, name string, data []byte) {
		s, err := snapshot.Read(bytes.NewReader(data), name)
		require.NoError(t, err)
		got, _ := roundTrip(t, s, 4)
		// The frames and stacks are numbered as they are first met, in
		// the order of the keys of each dict, which Write fixes and
		// PyTorch's versions do not.
		require.Equal(t, withoutStacks(s), withoutStacks(got))
		require.Equal(t, stacksOf(s), stacksOf(got))
	})
}

// stacksOf returns the frames of every stack that s names, in the order
// of its segments, blocks and entries.
func stacksOf(s *snapshot.Snapshot) [][]snapshot.Frame {
	var out [][]snapshot.Frame
	for _, sg := range s.Segments {
		out = append(out, s.StackFrames(sg.Stack))
		for _, b := range sg.Blocks {
			out = append(out, s.StackFrames(b.Stack))
		}
	}
	for d := range s.NumTraces() {
		for _, e := range s.Trace(d).All() {
			out = append(out, s.StackFrames(e.Stack))
		}
	}
	return out
}

// BenchmarkWrite measures Write on a snapshot of 1M trace entries and 10,000
// blocks: bytes per second and bytes of file per entry.
func BenchmarkWrite(b *testing.B) {
	tr := make([]snapshot.TraceEntry, 0, 1_000_000)
	actions := []snapshot.Action{snapshot.SegmentAlloc, snapshot.Alloc, snapshot.FreeRequested, snapshot.FreeCompleted}
	for i := range 1_000_000 {
		tr = append(tr, snapshot.TraceEntry{
			Action: actions[i%4], Addr: a0 + uint64(i)<<12, Size: int64(i%5000) * 4096, TimeUS: int64(i) * 7,
		})
	}
	s := snapshot.New(nil, tr)
	seg := snapshot.Segment{Address: a0, TotalSize: 10_000 << 20, SegmentType: "large"}
	for i := range 10_000 {
		seg.Blocks = append(seg.Blocks, snapshot.Block{Address: a0 + uint64(i)<<20, Size: 1 << 20, RequestedSize: 1000, State: snapshot.ActiveAllocated})
	}
	s.Segments = []snapshot.Segment{seg}
	var n countingWriter
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		if err := snapshot.Write(&n, s, snapshot.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(n))
	b.ReportMetric(float64(n)/1_010_000, "B/item")
}

type countingWriter int64

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}

// FuzzWriteRoundTrip decodes, writes and decodes again, as image/png's
// fuzz test does: whatever Read accepts, Write writes so that Read gives
// the same snapshot back.
func FuzzWriteRoundTrip(f *testing.F) {
	for _, proto := range []int{2, 4} {
		f.Add(pk.Encode(pk.TwoDevices(true), pk.Options{Proto: proto, Memo: true}))
		f.Add(pk.Encode(pk.TwoDevices(false), pk.Options{Proto: proto, AllLong: true}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := snapshot.Read(bytes.NewReader(data), "f.pickle")
		if err != nil || hasNaN(s) {
			return
		}
		var b bytes.Buffer
		if err := snapshot.Write(&b, s, snapshot.WriteOptions{}); err != nil {
			if strings.Contains(err.Error(), "beyond 64 bits") {
				return // a settings value Write cannot give the viewer
			}
			t.Fatal(err)
		}
		got, err := snapshot.Read(bytes.NewReader(b.Bytes()), "f.pickle")
		require.NoError(t, err)
		fs, fg := resolveStacks(emptyIsNil(s)), resolveStacks(emptyIsNil(got))
		if !reflect.DeepEqual(s, got) || !reflect.DeepEqual(fs, fg) {
			t.Fatalf("read back differs:\n%+v\n%+v", s.AllocatorSettings, got.AllocatorSettings)
		}
	})
}

// emptyIsNil makes the empty lists of s nil: a list the input leaves out
// is written empty.
func emptyIsNil(s *snapshot.Snapshot) *snapshot.Snapshot {
	for i := range s.Segments {
		if len(s.Segments[i].Blocks) == 0 {
			s.Segments[i].Blocks = nil
		}
	}
	return s
}

// resolveStacks returns the frames of each segment's, block's and
// entry's stack, in that order, and clears the stacks of s: the tables of
// frames and stacks are indexes, in which a stack that nothing kept (the
// frames of an entry that a POP_MARK dropped) is not written back.
func resolveStacks(s *snapshot.Snapshot) [][]snapshot.Frame {
	var out [][]snapshot.Frame
	for i := range s.Segments {
		sg := &s.Segments[i]
		out = append(out, s.StackFrames(sg.Stack))
		sg.Stack = 0
		for j := range sg.Blocks {
			out = append(out, s.StackFrames(sg.Blocks[j].Stack))
			sg.Blocks[j].Stack = 0
		}
	}
	traces := snapshot.Traces(s)
	for _, t := range traces {
		for i := range t {
			out = append(out, s.StackFrames(t[i].Stack))
			t[i].Stack = 0
		}
	}
	s.SetTraces(traces...)
	s.Frames, s.Stacks = nil, nil
	return out
}

// hasNaN reports whether the settings hold a NaN, which equals nothing.
func hasNaN(s *snapshot.Snapshot) bool {
	if s.AllocatorSettings == nil {
		return false
	}
	return strings.Contains(fmt.Sprint(s.AllocatorSettings.Other), "NaN")
}

func TestReadSettingsHoldingThemselves(t *testing.T) {
	// allocator_settings: {"x": <the same dict>}, through the memo.
	data := []byte("\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\x12allocator_settings\x94}\x94(\x8c\x01x\x94h\x04uu.")
	_, err := snapshot.Read(bytes.NewReader(data), "c.pickle")
	require.EqualError(t, err, "c.pickle: allocator_settings.x: nested too deeply, too large, or holding itself")
}

func TestAllocConfMemoryFraction(t *testing.T) {
	s := &snapshot.AllocatorSettings{Effective: true, MaxSplitSize: -1, GarbageCollectionThreshold: 0.6,
		Conf: "garbage_collection_threshold:0.6,memory_fraction:0.5"}
	assert.Equal(t, "garbage_collection_threshold:0.6,memory_fraction:0.5", s.AllocConf())
}
