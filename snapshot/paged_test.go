package snapshot

import (
	"fmt"
	"os"
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

// A paged list past its spill's bound writes each page it fills and reads
// it back when asked, loading at most maxLoaded, and a value changed on a
// page written out is written again before the page is dropped.
func TestPagedSpill(t *testing.T) {
	defer func(n int64, l int) { spillAfter, maxLoaded = n, l }(spillAfter, maxLoaded)
	spillAfter, maxLoaded = 8*pageSize, 1 // the first page of uint64s held, the rest spilled
	m := paged[uint64]{sp: &spill{}}
	const n = 4*pageSize + 9
	for i := range n {
		m.append(uint64(i))
	}
	require.Equal(t, 1, m.from)
	require.Len(t, m.offs, 3, "the full pages after the first")
	require.NotNil(t, m.pages[0])
	require.Nil(t, m.pages[1])
	*m.at(pageSize + 3) = 7
	m.changed(pageSize + 3)
	for _, i := range []uint64{0, pageSize, 2*pageSize + 1, 3*pageSize + 2, n - 1} {
		require.Equal(t, i, *m.at(i))
		require.LessOrEqual(t, len(m.loaded), maxLoaded)
	}
	require.Equal(t, uint64(7), *m.at(pageSize + 3), "written again when dropped")
	require.Equal(t, int64(3*pageSize*8), m.sp.end)

	// A changed page that cannot be written again is held instead.
	*m.at(2*pageSize + 4) = 9
	m.changed(2*pageSize + 4)
	ro, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", m.sp.f.Fd())) // the file, for reading alone
	if err != nil {
		t.Skip("no /proc/self/fd to open the file read-only:", err)
	}
	defer ro.Close()
	m.sp.f = ro    // writes fail from here on
	m.at(pageSize) // drops page 2
	require.NotNil(t, m.pages[2], "held")
	require.Equal(t, int64(-1), m.offs[1])
	require.Equal(t, uint64(9), *m.at(2*pageSize + 4))
}
