package snapshot_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

// TestReadMemoWideValues reads values that a pickle stores in its memo and
// refers to again, beyond the bits that the decoder's memo packs beside a
// kind: an address of 63 bits and a negative integer, each read the same
// through the memo as where it was first written.
func TestReadMemoWideValues(t *testing.T) {
	str := func(s string) string { return "\x8c" + string(rune(len(s))) + s }
	const addr = 0x7f00_0000_0000_0000
	long := "\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x7f" // addr, LONG1
	neg := "J\xff\xff\xff\xff"                         // -1, BININT
	data := []byte("\x80\x04}(" + str("segments") + "](}(" +
		str("device") + "K\x00" + str("address") + long + "q\x01" + str("total_size") + "J\x00\x00\x20\x00" +
		str("stream") + "K\x00" + str("segment_type") + str("large") + str("blocks") + "](}(" +
		str("address") + "h\x01" + str("size") + "J\x00\x00\x20\x00" + str("requested_size") + "K\x00" +
		str("state") + str("inactive") + "ueue" + str("device_traces") + "](](}(" +
		str("action") + str("alloc") + str("addr") + "h\x01" + str("size") + "K\x10" + str("time_us") + neg + "q\x02" + "u}(" +
		str("action") + str("free_completed") + str("addr") + "h\x01" + str("size") + "K\x10" + str("time_us") + "h\x02" + "u" +
		"eeu.")
	for _, o := range []snapshot.ReadOptions{{}, {NoStacks: true}} {
		s, err := snapshot.ReadWith(bytes.NewReader(data), "w.pickle", o)
		require.NoError(t, err)
		require.Len(t, s.Segments, 1)
		require.Equal(t, uint64(addr), s.Segments[0].Address)
		require.Len(t, s.Segments[0].Blocks, 1)
		require.Equal(t, uint64(addr), s.Segments[0].Blocks[0].Address)
		tr := s.Trace(0).Entries()
		require.Len(t, tr, 2)
		for _, e := range tr {
			require.Equal(t, uint64(addr), e.Addr)
			require.Equal(t, int64(-1), e.TimeUS)
		}
	}
}
