package snapshot

import (
	"os"
	"reflect"
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
	strs := []string{"alloc", "free_completed"}
	flat := Trace{held: hold(&tr, strs)}.Entries()
	require.Len(t, flat, n)
	for i, e := range flat {
		require.Equal(t, TraceEntry{Addr: uint64(i), Action: [...]Action{Alloc, FreeCompleted}[i%2]}, e)
	}
	var none paged[entryRec]
	require.Nil(t, Trace{held: hold(&none, strs)}.Entries())
	var one paged[entryRec]
	one.append(entryRec{addr: 7, action: noStr, category: 1})
	require.Equal(t, []TraceEntry{{Addr: 7, Category: "free_completed"}}, Trace{held: hold(&one, strs)}.Entries())

	var m paged[uint64]
	for i := range 2*pageSize + 3 {
		m.append(uint64(i))
	}
	require.Equal(t, 2*pageSize+3, m.len())
	for _, i := range []uint64{0, pageSize - 1, pageSize, 2 * pageSize, 2*pageSize + 2} {
		require.Equal(t, i, *m.at(i))
	}
}

// A paged list past its spill's bound writes each page it fills and reads
// it back when asked, loading at most the spill's loaded, and a value
// changed on a page written out is written again before the page is
// dropped.
func TestPagedSpill(t *testing.T) {
	var fail error
	m := paged[uint64]{sp: newSpill(ReadOptions{MaxHeld: 8 * pageSize, maxLoaded: 1}, &fail)} // the first page of uint64s held, the rest spilled
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
		require.LessOrEqual(t, len(m.loaded), 1)
	}
	require.Equal(t, uint64(7), *m.at(pageSize + 3), "written again when dropped")
	require.Equal(t, int64(3*pageSize*8), m.sp.f.Size())
	require.NoError(t, fail)

	// A changed page that cannot be written again fails the read, with
	// the file's error, and stays; nothing is written after.
	*m.at(2*pageSize + 4) = 9
	m.changed(2*pageSize + 4)
	m.sp.f.Close()
	m.at(pageSize) // drops page 2
	require.ErrorIs(t, fail, os.ErrClosed)
	require.ErrorContains(t, fail, "gpualloc-snapshot-")
	require.NotNil(t, m.pages[2], "held")
	require.Equal(t, uint64(9), *m.at(2*pageSize + 4))
	first := fail
	for i := range 2 * pageSize {
		m.append(uint64(i))
	}
	require.Same(t, first, fail, "the first failure stays")
}

// TestPageCodec checks that the pages of each type that paged lists hold
// read back as they were written, every field of an entryRec included.
func TestPageCodec(t *testing.T) {
	recs := []entryRec{
		{addr: 1<<64 - 1, stream: 1 << 63, size: -1 << 63, time: 1<<63 - 1, action: noStr, category: 7, stack: 1<<32 - 1, emptyCache: true},
		{addr: 0x7f0000000200, stream: 3, size: 512, time: -1, action: 2, category: noStr},
	}
	require.Equal(t, 8, reflect.TypeOf(entryRec{}).NumField(), "a field added to entryRec is written by encodePage and read by decodePage")
	b := encodePage(nil, recs)
	require.Len(t, b, 2*recBytes)
	got := make([]entryRec, 2)
	decodePage(got, b)
	require.Equal(t, recs, got)

	u := []uint64{0, 1, 1<<64 - 1, 0x0102030405060708}
	b = encodePage(make([]byte, 0, 64), u)
	require.Len(t, b, 32)
	gu := make([]uint64, len(u))
	decodePage(gu, b)
	require.Equal(t, u, gu)

	by := []byte{0, isFrame, isFrame | isEC}
	gb := make([]byte, 3)
	decodePage(gb, encodePage(nil, by))
	require.Equal(t, by, gb)
}
