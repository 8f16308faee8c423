package snapshot

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPaged checks the decoder's paged lists across their pages.
func TestPaged(t *testing.T) {
	const n = 3*pageSize + 17
	var tr paged[TraceEntry]
	for i := range n {
		tr.append(TraceEntry{Addr: uint64(i)})
	}
	require.Equal(t, n, tr.len())
	for _, i := range []uint64{0, pageSize - 1, pageSize, 2*pageSize + 5, n - 1} {
		require.Equal(t, uint64(i), tr.at(i).Addr)
	}
	flat := tr.flat()
	require.Len(t, flat, n)
	for i, e := range flat {
		require.Equal(t, uint64(i), e.Addr)
	}
	require.Equal(t, 0, tr.len())
	require.Equal(t, []TraceEntry{}, tr.flat())
	var one paged[TraceEntry]
	one.append(TraceEntry{Addr: 7})
	require.Equal(t, []TraceEntry{{Addr: 7}}, one.flat())

	var m paged[val]
	for i := range 2*pageSize + 3 {
		m.append(intVal(int64(i)))
	}
	require.Equal(t, 2*pageSize+3, m.len())
	for _, i := range []uint64{0, pageSize - 1, pageSize, 2 * pageSize, 2*pageSize + 2} {
		require.Equal(t, intVal(int64(i)), *m.at(i))
	}
}
