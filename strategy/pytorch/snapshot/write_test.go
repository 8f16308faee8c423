package snapshot_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/strategy/pytorch/snapshot"
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
			want.DeviceTraces[0][0].Category = "unknown"
			want.Segments[1].IsExpandable = true
			want.Segments[1].AllocatedSize, want.Segments[1].ActiveSize, want.Segments[1].RequestedSize = 2<<20, 2<<20, 4000
			got, data := roundTrip(t, want, proto)
			require.Equal(t, want, got, "protocol %d", proto)
			wantProto := byte(proto)
			if proto == 0 {
				wantProto = 4
			}
			assert.Equal(t, []byte{0x80, wantProto}, data[:2])
			assert.Equal(t, 1, bytes.Count(data, []byte("free_completed")), "strings go through the memo")
			again, _ := roundTrip(t, want, proto)
			assert.Equal(t, got, again)
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
	s := &snapshot.Snapshot{DeviceTraces: [][]snapshot.TraceEntry{nil, nil}}
	for i := range 5000 {
		s.DeviceTraces[1] = append(s.DeviceTraces[1], snapshot.TraceEntry{
			Action: snapshot.Alloc, Addr: a0 + uint64(i)<<9, Size: int64(i) * 1000, Stream: uint64(i % 3), TimeUS: int64(i),
			Category: string(rune('a'+i%26)) + string(rune('a'+i/26%26)),
		})
	}
	s.DeviceTraces[0] = []snapshot.TraceEntry{}
	for _, proto := range []int{2, 3, 4} {
		got, data := roundTrip(t, s, proto)
		require.Equal(t, s, got, "protocol %d", proto)
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
		require.Equal(t, s, got)
	})
}
