package snapshot

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
)

// TestPaged checks a trace's records across their pages, as hold leaves
// them for a Trace.
func TestPaged(t *testing.T) {
	const n = 3*pages.Size + 17
	var tr pages.List[entryRec]
	for i := range n {
		tr.Append(entryRec{addr: uint64(i), action: uint32(i % 2), category: noStr})
	}
	require.Equal(t, n, tr.Len())
	for _, i := range []uint64{0, pages.Size - 1, pages.Size, 2*pages.Size + 5, n - 1} {
		require.Equal(t, uint64(i), tr.At(i).addr)
	}
	strs := []string{"alloc", "free_completed"}
	flat := Trace{held: hold(&tr, traceNotes{acts: []uint32{0, 1}}, strs)}.Entries()
	require.Len(t, flat, n)
	for i, e := range flat {
		require.Equal(t, TraceEntry{Addr: uint64(i), Action: [...]Action{Alloc, FreeCompleted}[i%2]}, e)
	}
	var none pages.List[entryRec]
	require.Nil(t, Trace{held: hold(&none, traceNotes{}, strs)}.Entries())
	var one pages.List[entryRec]
	one.Append(entryRec{addr: 7, action: noStr, category: 1})
	require.Equal(t, []TraceEntry{{Addr: 7, Category: "free_completed"}}, Trace{held: hold(&one, traceNotes{acts: []uint32{noStr}, categorized: true}, strs)}.Entries())
}

// TestPageCodec checks that a page of a trace's records reads back as it
// was written, every field of an entryRec included.
func TestPageCodec(t *testing.T) {
	recs := []entryRec{
		{addr: 1<<64 - 1, stream: 1 << 63, size: -1 << 63, time: 1<<63 - 1, action: noStr, category: 7, stack: 1<<32 - 1, emptyCache: true},
		{addr: 0x7f0000000200, stream: 3, size: 512, time: -1, action: 2, category: noStr},
	}
	require.Equal(t, 8, reflect.TypeOf(entryRec{}).NumField(), "a field added to entryRec is written by recCodec")
	b := make([]byte, 2*recBytes)
	recCodec.Encode(b, recs)
	got := make([]entryRec, 2)
	recCodec.Decode(got, b)
	require.Equal(t, recs, got)
}
