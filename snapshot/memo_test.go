package snapshot_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

// TestReadMemoWideValues reads values that a pickle stores in its memo and
// refers to again, beyond the bits that the decoder's memo packs beside a
// kind: an address of 63 bits and a negative integer (a frame's line), each read the same
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
		str("action") + str("alloc") + str("addr") + "h\x01" + str("size") + "K\x10" +
		str("frames") + "](}(" + str("name") + str("f") + str("line") + neg + "q\x02" + "ueu}(" +
		str("action") + str("free_completed") + str("addr") + "h\x01" + str("size") + "K\x10" +
		str("frames") + "](}(" + str("name") + str("g") + str("line") + "h\x02" + "ueu" +
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
		}
		if !o.NoStacks {
			require.Equal(t, []snapshot.Frame{{Name: "f", Line: -1}, {Name: "g", Line: -1}}, s.Frames)
		}
	}
}

// TestReadMemoStoredOver reads a memo slot that the pickle stores a new
// value in while the container it held is still to be used: Python's
// pickle.loads gives the new value, and so does Read, whatever that
// container became.
func TestReadMemoStoredOver(t *testing.T) {
	str := func(s string) string { return "\x8c" + string(rune(len(s))) + s }
	entry := func(addr, size string) string {
		return "(" + str("action") + str("alloc") + str("addr") + addr + str("size") + size + "u"
	}
	data := []byte("\x80\x04}" + str("segments") + "]s" + str("device_traces") + "]" +
		"]}q\x00" + entry("K\x10", "K\x05") + // an entry, in slot 0
		"K\x07q\x000" + // slot 0 holds 7 now
		"aa" + // the entry into its trace, the trace into device_traces
		"]}" + entry("K\x20", "h\x00") + "aas.") // device 1's entry, of size 7
	s, err := snapshot.Read(bytes.NewReader(data), "m.pickle")
	require.NoError(t, err)
	require.Equal(t, 2, s.NumTraces())
	require.Equal(t, int64(5), s.Trace(0).At(0).Size)
	require.Equal(t, int64(7), s.Trace(1).At(0).Size)
}
