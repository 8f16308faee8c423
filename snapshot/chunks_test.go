package snapshot

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChunks checks the decoder's paged memo and chunked trace lists
// across their page and chunk boundaries.
func TestChunks(t *testing.T) {
	const n = 3*entryChunk + 17
	var tr entries
	for i := range n {
		tr.append(TraceEntry{Addr: uint64(i)})
	}
	require.Equal(t, n, tr.len())
	for _, i := range []uint32{0, entryChunk - 1, entryChunk, 2*entryChunk + 5, n - 1} {
		require.Equal(t, uint64(i), tr.at(i).Addr)
	}
	flat := tr.flat()
	require.Len(t, flat, n)
	for i, e := range flat {
		require.Equal(t, uint64(i), e.Addr)
	}
	require.Equal(t, 0, tr.len())
	require.Equal(t, []TraceEntry{}, tr.flat())
	var one entries
	one.append(TraceEntry{Addr: 7})
	require.Equal(t, []TraceEntry{{Addr: 7}}, one.flat())

	var m memo
	for i := range 2*memoPage + 3 {
		m.append(intVal(int64(i)))
	}
	require.Equal(t, uint64(2*memoPage+3), m.len())
	for _, i := range []uint64{0, memoPage - 1, memoPage, 2 * memoPage, 2*memoPage + 2} {
		require.Equal(t, intVal(int64(i)), *m.at(i))
	}
}
