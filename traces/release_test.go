package traces

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadRelease reads release events: no id, no size, on a device; and
// writes them back as they were read.
func TestReadRelease(t *testing.T) {
	const text = "op,id,size,stream,device,time_us\nalloc,1,5,0,1,0\nfree,1,,0,1,1\nrelease,,,0,1,2\nRELEASE,9,,0,0,3\n"
	evs, r, err := readAll(t, text, Options{})
	require.NoError(t, err)
	require.Len(t, evs, 4)
	assert.Equal(t, Event{Op: OpRelease, Device: 1, TimeUS: 2}, evs[2])
	assert.Equal(t, Event{Op: OpRelease, Device: 0, TimeUS: 3}, evs[3], "an id on a release is ignored")
	assert.Equal(t, "release", OpRelease.String())
	assert.Equal(t, evs, roundTrip(t, evs, r.Columns()))
	assert.True(t, fastSlow(t, "t.csv", []byte(text), Options{}))

	var b strings.Builder
	w := NewWriter(&b, ColOp, ColID, ColSize, ColDevice)
	require.NoError(t, w.Write(Event{Op: OpRelease, Device: 2}))
	require.NoError(t, w.Close())
	assert.Equal(t, "op,id,size,device\nrelease,,,2\n", b.String()[strings.Index(b.String(), "op,"):])

	_, _, err = readAll(t, "op,id,size\nrelease,,5\n", Options{})
	assert.EqualError(t, err, "t.csv:2: size on a release (a release names no allocation)")
	_, _, err = readAll(t, "op,id,size\nalloc,,5\n", Options{})
	assert.EqualError(t, err, "t.csv:2: missing id")
}

// TestExtraColumns checks that columns the format does not know are read
// past and ignored, by the fast path and the slow one.
func TestExtraColumns(t *testing.T) {
	plain, _, err := readAll(t, "op,id,size\nalloc,1,5\nalloc,2,7\nfree,1,\n", Options{})
	require.NoError(t, err)
	for _, text := range []string{
		"op,id,size,tag\nalloc,1,5,warmup\nalloc,2,7,\nfree,1,,step 3\n",
		"tag,op,note,id,size\nx,alloc,,1,5\ny,alloc,a b,2,7\n,free,z,1,\n",
		"op,id,size,tag\nalloc,1,5,\"quoted\"\nalloc,2,7,9\nfree,1,,x\n",
	} {
		evs, r, err := readAll(t, text, Options{})
		require.NoError(t, err, text)
		assert.Equal(t, plain, evs, text)
		assert.Equal(t, []Column{ColOp, ColID, ColSize}, r.Columns(), "the extra columns are not the trace's")
		assert.True(t, fastSlow(t, "t.csv", []byte(text), Options{}))
	}
	_, _, err = readAll(t, "op,id,size,tag\nalloc,1,5\n", Options{})
	assert.EqualError(t, err, "t.csv:2: got 3 fields, want 4 (op,id,size,tag)")
}

// TestNearlyNative checks the errors for input that is nearly a native
// trace: each says what is wrong, at the header's line.
func TestNearlyNative(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"id,size\n1,5\n", "t:1: native CSV: header has no op column (known columns: op, id, size, stream, device, time_us, category); the header: id,size"},
		{"operation,id,size\nalloc,1,5\n", "t:1: native CSV: header has no op column (known columns: op, id, size, stream, device, time_us, category); the header: operation,id,size"},
		{"# x\nop;id;size\nalloc;1;5\n", "t:2: native CSV: fields separated by ';', want ','; the header: op;id;size"},
		{"op\tid\tsize\n", `t:1: native CSV: fields separated by tabs, want ','; the header: "op\tid\tsize"`},
		{"\"op\",\"id\",\"size\"\n", `t:1: native CSV: quoted names and fields are not read: write them without quotes; the header: "op","id","size"`},
		{"hello\n", "t: not a trace in any known format (native CSV, MiniMalloc CSV, PyTorch snapshot, RMM log)"},
	} {
		_, _, err := autoRead(t, tc.in, Options{})
		assert.EqualError(t, err, tc.err, "%q", tc.in)
		assert.ErrorIs(t, err, ErrNotTrace)
	}
}
