package snapshot_test

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// junkLists returns a snapshot whose key "junk", which the package does
// not read, holds n empty lists, each memoized when memo is set, as
// Python's pickler writes them.
func junkLists(n int, memo bool) []byte {
	b := []byte("\x80\x04}(\x8c\x08segments]\x8c\x04junk](")
	for range n {
		b = append(b, ']')
		if memo {
			b = append(b, 0x94)
		}
	}
	return append(b, "eu."...)
}

// allocated returns the bytes that f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestReadSkippedCostsNothing reads a million empty lists under a key
// that the package does not read: they cost the read nothing but the
// pickle's stack, which holds them until their list's APPENDS (16 bytes
// each, as it grows, about 90 bytes allocated in all), and their memo
// entries, 9 bytes each. (When each was a container of its own, a GiB.)
func TestReadSkippedCostsNothing(t *testing.T) {
	const n = 1_000_000
	for _, memo := range []bool{false, true} {
		data := junkLists(n, memo)
		var err error
		got := allocated(func() { _, err = snapshot.Read(bytes.NewReader(data), "j.pickle") })
		require.NoError(t, err)
		limit := uint64(100 * n) // the stack of 16 bytes a value, grown as append grows it
		if memo {
			limit += 9 * n * 2 // the memo's pages, and the spare ones made ahead
		}
		assert.Less(t, got, limit, "memo %v: %d bytes allocated for %d skipped lists", memo, got, n)
	}
}

// TestReadSkippedMemo reads what a pickle's memo shares with a value that
// the package skips: a list holding itself, or referred to again, under a
// key that is not read, is read as Python reads it; one that a memo
// reference puts where the model reads it is refused, saying so.
func TestReadSkippedMemo(t *testing.T) {
	str := func(s string) string { return "\x8c" + string(rune(len(s))) + s }
	top := "\x80\x04}(" + str("segments") + "]"
	for _, tc := range []struct{ name, body, msg string }{
		{"list holding itself", str("junk") + "]q\x00h\x00a", ""},
		{"dict holding itself", str("junk") + "}q\x00(" + str("me") + "h\x00" + str("list") + "]q\x01h\x01a" + "u", ""},
		{"referred to again", str("junk") + "]q\x00(K\x01]e" + str("more") + "h\x00", ""},
		{"tuple of lists", str("junk") + "]q\x00]q\x01\x86" + str("more") + "(h\x00h\x01t", ""},
		{"as a trace", str("junk") + "]q\x00" + str("device_traces") + "(h\x00l",
			"device_traces[0]: refers through the memo to a list first written under a key that the reader skips, which it does not keep"},
		{"as the traces", str("junk") + "]q\x00" + str("device_traces") + "h\x00",
			"device_traces: refers through the memo to a list first written under a key that the reader skips, which it does not keep"},
		{"as frames", str("junk") + "]q\x00" + str("device_traces") + "](](}(" + str("action") + str("snapshot") + str("frames") + "h\x00ueeu",
			"device_traces[0][0].frames: refers through the memo to a list first written under a key that the reader skips, which it does not keep"},
		{"as an entry", str("junk") + "}q\x00" + str("device_traces") + "](](h\x00ee",
			"device_traces[0][0]: refers through the memo to a dict first written under a key that the reader skips, which it does not keep"},
		{"frames holding themselves", str("device_traces") + "](](}(" + str("action") + str("snapshot") + str("frames") + "]q\x00h\x00aueeu",
			"device_traces[0][0].frames[0]: not a dict but a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := snapshot.Read(bytes.NewReader([]byte(top+tc.body+"u.")), "m.pickle")
			if tc.msg == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, "m.pickle: "+tc.msg)
		})
	}
	// A dict of a field that the model reads, after an empty dict that is
	// skipped: the frames are read.
	data := pk.Encode(pk.Snapshot(nil, [][]any{{pk.Dict{{K: "action", V: "alloc"}, {K: "addr", V: a0}, {K: "size", V: 5},
		{K: "user_metadata", V: pk.Dict{}}, {K: "frames", V: []any{pk.Dict{{K: "name", V: "f"}}}}}}}, nil), pk.Options{Proto: 2})
	s, err := snapshot.Read(bytes.NewReader(data), "m.pickle")
	require.NoError(t, err)
	assert.Equal(t, []snapshot.Frame{{Name: "f"}}, s.StackFrames(s.Trace(0).At(0).Stack))
}
