package snapshot_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

// stream returns s as a Stream whose entries are handed over in one
// variable, spoilt after each yield: WriteStream must not keep them.
func stream(s *snapshot.Snapshot, pulled *int) *snapshot.Stream {
	return &snapshot.Stream{Segments: s.Segments, Devices: s.NumTraces(), AllocatorSettings: s.AllocatorSettings,
		Frames: s.Frames, Stacks: s.Stacks,
		Entries: func(d int, yield func(*snapshot.TraceEntry) bool) error {
			var e snapshot.TraceEntry
			for _, x := range s.Trace(d).All() {
				e = x
				*pulled++
				if !yield(&e) {
					return nil
				}
				e = snapshot.TraceEntry{Action: "spoilt", Addr: 1, Size: -1, Category: "spoilt", Stack: snapshot.StackID(len(s.Stacks) - 1)}
			}
			return nil
		}}
}

// TestWriteStreamSameAsWrite writes generated snapshots with frames, pools
// and several devices, and one with more entries than a batch and a
// frame, streamed and whole: the same bytes, in every protocol.
func TestWriteStreamSameAsWrite(t *testing.T) {
	var snaps []*snapshot.Snapshot
	for _, o := range []genOptions{
		{Devices: 1, Events: 3000, Slots: 8, Frames: 50, Stacks: 20, Seed: 1},
		{Devices: 3, Events: 2500, Slots: 5, Frames: 300, Stacks: 40, Pools: true, Seed: 2},
		{Devices: 2, Events: 0, Slots: 0, Frames: 1, Stacks: 1, Seed: 3},
	} {
		var b bytes.Buffer
		_, err := genSnapshot(&b, o)
		require.NoError(t, err)
		s, err := snapshot.Read(bytes.NewReader(b.Bytes()), "gen.pickle")
		require.NoError(t, err)
		snaps = append(snaps, s)
	}
	snaps = append(snaps, wantTwoDevices(true))
	for i, s := range snaps {
		for _, proto := range []int{0, 2, 3, 4} {
			var whole, streamed bytes.Buffer
			require.NoError(t, snapshot.Write(&whole, s, snapshot.WriteOptions{Protocol: proto}))
			pulled := 0
			require.NoError(t, snapshot.WriteStream(&streamed, stream(s, &pulled), snapshot.WriteOptions{Protocol: proto}))
			require.Equal(t, whole.Bytes(), streamed.Bytes(), "snapshot %d, protocol %d", i, proto)
			n := 0
			for d := range s.NumTraces() {
				n += s.Trace(d).Len()
			}
			assert.Equal(t, n, pulled, "snapshot %d", i)
		}
	}
}

type failWriter struct{ left int }

func (w *failWriter) Write(b []byte) (int, error) {
	if w.left < len(b) {
		return 0, errors.New("disk full")
	}
	w.left -= len(b)
	return len(b), nil
}

// TestWriteStreamErrors checks that the error of the entries stops the
// write and is its error, and that a writer that fails stops the entries
// being read.
func TestWriteStreamErrors(t *testing.T) {
	s := wantTwoDevices(true)
	st := stream(s, new(int))
	st.Entries = func(d int, yield func(*snapshot.TraceEntry) bool) error {
		return errors.New("spill file damaged")
	}
	err := snapshot.WriteStream(&bytes.Buffer{}, st, snapshot.WriteOptions{})
	require.EqualError(t, err, "spill file damaged")

	entries := make([]snapshot.TraceEntry, 100_000)
	for i := range entries {
		entries[i] = snapshot.TraceEntry{Action: snapshot.Alloc, Addr: uint64(i) << 9, Size: 512, TimeUS: int64(i)}
	}
	big := snapshot.New(nil, entries)
	pulled := 0
	err = snapshot.WriteStream(&failWriter{left: 1 << 16}, stream(big, &pulled), snapshot.WriteOptions{})
	require.EqualError(t, err, "disk full")
	assert.Less(t, pulled, 20_000, "the entries stop once the writer fails")
}
