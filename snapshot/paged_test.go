package snapshot

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPaged checks the decoder's paged lists across their pages.
func TestPaged(t *testing.T) {
	const n = 3*pageSize + 17
	var tr paged[entryRec]
	for i := range n {
		tr.append(entryRec{addr: uint64(i), action: uint32(i % 2), category: noStr})
	}
	require.Equal(t, n, tr.len())
	for _, i := range []uint64{0, pageSize - 1, pageSize, 2*pageSize + 5, n - 1} {
		require.Equal(t, uint64(i), tr.at(i).addr)
	}
	d := &decoder{strs: []string{"alloc", "free_completed"}}
	flat := d.entries(&tr)
	require.Len(t, flat, n)
	for i, e := range flat {
		require.Equal(t, TraceEntry{Addr: uint64(i), Action: [...]Action{Alloc, FreeCompleted}[i%2]}, e)
	}
	require.Equal(t, 0, tr.len())
	require.Equal(t, []TraceEntry{}, d.entries(&tr))
	var one paged[entryRec]
	one.append(entryRec{addr: 7, action: noStr, category: 1})
	require.Equal(t, []TraceEntry{{Addr: 7, Category: "free_completed"}}, d.entries(&one))

	var m paged[val]
	for i := range 2*pageSize + 3 {
		m.append(intVal(int64(i)))
	}
	require.Equal(t, 2*pageSize+3, m.len())
	for _, i := range []uint64{0, pageSize - 1, pageSize, 2 * pageSize, 2*pageSize + 2} {
		require.Equal(t, intVal(int64(i)), *m.at(i))
	}
}
