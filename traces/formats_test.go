package traces

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gzs compresses text with gzip.
func gzs(t testing.TB, text string) string { return string(gz(t, text)) }

func TestFormatsOrder(t *testing.T) {
	names := formatNames()
	require.GreaterOrEqual(t, len(names), 3)
	assert.Equal(t, "native CSV", names[0])
	assert.Contains(t, names, "RMM log")
	assert.Contains(t, names, "MiniMalloc CSV")
	assert.Panics(t, func() {
		registerFormat(format{name: "native CSV", sniff: sniffNative, open: openerOf(t, nativeFormat)})
	})
	assert.Panics(t, func() { registerFormat(format{name: "x"}) })
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct{ input, format string }{
		{"op,id,size\nalloc,1,5\n", "native CSV"},
		{"# comment\n\nid,op,size\n1,alloc,5\n", "native CSV"},
		{"Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000001,allocate,0x10,5,0x0\n", "RMM log"},
		{"\xef\xbb\xbfthread, time, action, pointer, size, stream\r\n", "RMM log"},
		{"id,lower,upper,size\nb,0,1,5\n", "MiniMalloc CSV"},
		{"size,upper,lower,id,offset\n5,1,0,b,0\n", "MiniMalloc CSV"},
		{"# " + strings.Repeat("x", 5000) + "\nop,id,size\n", "native CSV"},
	} {
		for _, input := range []string{tc.input, gzs(t, tc.input)} {
			r, _, err := autoRead(t, input, Options{})
			require.NoError(t, err, "%q", tc.input)
			assert.Equal(t, tc.format, r.Format(), "%q", tc.input)
			assert.False(t, r.MidRun(), "%q: a whole run", tc.input)
			assert.Equal(t, "t", r.Name())
		}
	}
	known := "(" + strings.Join(formatNames(), ", ") + ")"
	for input, msg := range map[string]string{
		"":                        "t: empty input: not a trace in any known format " + known,
		"hello, world\n":          "t: not a trace in any known format " + known,
		"\x89PNG\r\n\x1a\n":       "t: not a trace in any known format " + known,
		"Thread,Time,Action\n":    "t: not a trace in any known format " + known,
		"id,lower,upper\n":        "t: not a trace in any known format " + known,
		"id,lower,upper,size,x\n": "t: not a trace in any known format " + known,
		gzs(t, "x,y\n"):           "t: not a trace in any known format " + known,
		gzs(t, "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"): "t: not a trace in any known format " + known,
	} {
		_, _, err := autoRead(t, input, Options{})
		assert.ErrorIs(t, err, ErrNotTrace, "%q", input)
		assert.EqualError(t, err, msg, "%q", input)
	}
	// A broken gzip stream says where it broke.
	z := gzs(t, "op,id,size\n"+strings.Repeat("alloc,1,5\nfree,1,\n", 1000))
	_, _, err := autoRead(t, z[:len(z)-10], Options{})
	assert.Regexp(t, `^t:\d+: truncated gzip stream \(it ends after \d+ bytes of text\)$`, err.Error())
	_, _, err = autoRead(t, "\x1f\x8b\x08", Options{})
	assert.EqualError(t, err, "t: truncated gzip stream (it ends after 0 bytes of text)")
}

func TestOpenFormats(t *testing.T) {
	for path, format := range map[string]string{
		"testdata/example.csv":          "native CSV",
		"testdata/rmm/wrap.log":         "RMM log",
		"testdata/minimalloc/basic.csv": "MiniMalloc CSV",
	} {
		r, err := Open(path, Options{})
		require.NoError(t, err, path)
		assert.Equal(t, format, r.Format())
		assert.Equal(t, path, r.Name())
		evs, err := scanAll(t, r)
		require.NoError(t, err, path)
		assert.NotEmpty(t, evs)
		require.NoError(t, r.Close())
		assert.Equal(t, evs, roundTrip(t, evs, r.Columns()), path)
	}
}

func TestRMM(t *testing.T) {
	r, err := Open("testdata/rmm/wrap.log", Options{})
	require.NoError(t, err)
	evs, err := scanAll(t, r)
	require.NoError(t, err)
	p := uint64(0x7f8a40000000) | idHexTag
	q := uint64(0x7f8a40100000) | idHexTag
	const s = 0x55d0c3a1b2c0
	assert.Equal(t, []Event{
		{Op: OpAlloc, ID: p, Size: 1048576, TimeUS: 0},
		{Op: OpAlloc, ID: q, Slot: 1, Size: 4096, TimeUS: 500},
		{Op: OpFree, ID: p, Size: 1048576, TimeUS: 1250},             // past midnight
		{Op: OpAlloc, ID: p, Size: 2097152, Stream: s, TimeUS: 2000}, // the pointer again: a new allocation
		{Op: OpFree, ID: q, Slot: 1, Size: 4096, TimeUS: 3000},       // freed on another stream than its own
		{Op: OpFree, ID: p, Size: 2097152, Stream: s, TimeUS: 5000},
	}, evs)
	assert.Equal(t, int64(1), r.AllocFailures())
	assert.Equal(t, int64(0), r.Skipped())
	require.NoError(t, r.Close())

	const head = "Thread,Time,Action,Pointer,Size,Stream\n"
	// Lines slightly out of time order keep times non-decreasing; a second
	// midnight is a second day.
	_, evs, err = autoRead(t, head+
		"1,23:00:00.5,allocate,0x10,5,0x0\n"+
		"1,22:59:59.9,allocate,0x20,5,7\n"+
		"1,01:00:00,free,0x10,5,0x0\n"+
		"1,23:00:00,free,0x20,5,0x0\n"+
		"1,00:00:00.000001,allocate,0x10,5,0x0\n", Options{})
	require.NoError(t, err)
	var times []int64
	for _, ev := range evs {
		times = append(times, ev.TimeUS)
	}
	assert.Equal(t, []int64{0, 0, 7199.5e6, 86399.5e6, 90000.000001e6 - 0.5e6}, times)
	assert.Equal(t, uint64(7), evs[3].Stream)

	// Seconds instead of clock times.
	_, evs, err = autoRead(t, head+"1,1634567890.1,allocate,0x10,5,0x0\n1,1634567890.25,deallocate,0x10,5,0x0\n", Options{})
	require.NoError(t, err)
	assert.Equal(t, int64(150000), evs[1].TimeUS)

	for _, tc := range []struct{ line, msg string }{
		{"1,10:00:00,allocate,0x10,5", "got 5 fields, want 6 (Thread,Time,Action,Pointer,Size,Stream)"},
		{"1,10:00,allocate,0x10,5,0x0", `bad time "10:00": want a clock time HH:MM:SS.ffffff`},
		{"1,25:00:00,allocate,0x10,5,0x0", `bad time "25:00:00": want a clock time HH:MM:SS.ffffff`},
		{"1,10:00:00,alloc,0x10,5,0x0", `unknown action "alloc" (want allocate, allocate failure or free)`},
		{"1,10:00:00,allocate,16,5,0x0", `bad pointer "16": not a hexadecimal address such as 0x7f3a00000000`},
		{"1,10:00:00,allocate,(nil),5,0x0", "allocate of a null pointer"},
		{"1,10:00:00,allocate,0x10,0,0x0", `bad size "0": must be > 0`},
		{"1,10:00:00,allocate,0x10,-5,0x0", `bad size "-5": must be > 0`},
		{"1,10:00:00,allocate,0x10,x,0x0", `bad size "x": not a number`},
		{"1,10:00:00,allocate,0x10,5,s", `bad stream "s": not a hexadecimal or decimal number`},
		{"1,10:00:00,allocate,0x1,5,0x0", "allocate of pointer 0x1 that is already live"},
		{"1,10:00:00,free,0x2,5,0x0", "free of unknown pointer 0x2 (freed twice, or allocated before the log began: reading leniently skips such frees)"},
		{"1,10:00:00,free,0x1,6,0x0", "free of pointer 0x1 with size 6, allocated with size 5"},
		{"1,1634567890,free,0x1,5,0x0", `bad time "1634567890": the first event's time is a clock time HH:MM:SS.ffffff, and every time must be`},
	} {
		checkBadLine(t, head+"1,10:00:00,allocate,0x1,5,0x0\n"+tc.line+"\n1,10:00:01,free,0x1,5,0x0\n", tc.msg, 2)
	}
	// A log in seconds says so of a bad time.
	for _, tc := range []struct{ line, msg string }{
		{"1,1634567890.x,free,0x1,5,0x0", `bad time "1634567890.x": want seconds such as 1634567890.234567`},
		{"1,-5,free,0x1,5,0x0", `bad time "-5": want seconds such as 1634567890.234567`},
		{"1,10:00:01,free,0x1,5,0x0", `bad time "10:00:01": the first event's time is in seconds (1634567890.234567), and every time must be`},
	} {
		checkBadLine(t, head+"1,1634567890.1,allocate,0x1,5,0x0\n"+tc.line+"\n1,1634567891,free,0x1,5,0x0\n", tc.msg, 2)
	}
	_, err = newRMMReader(strings.NewReader("op,id\n"), "t", Options{})
	assert.ErrorIs(t, err, ErrNotTrace)
}

func TestMiniMalloc(t *testing.T) {
	r, err := Open("testdata/minimalloc/aliases.csv", Options{})
	require.NoError(t, err)
	evs, err := scanAll(t, r)
	require.NoError(t, err)
	tok := uint64(idTokenTag)
	assert.Equal(t, []Event{
		{Op: OpAlloc, ID: 7, Size: 100, TimeUS: 0},
		{Op: OpAlloc, ID: tok, Slot: 1, Size: 50, TimeUS: 1}, // end is inclusive: [1, 2)
		{Op: OpFree, ID: tok, Slot: 1, Size: 50, TimeUS: 2},
		{Op: OpAlloc, ID: tok | 1, Slot: 1, Size: 25, TimeUS: 2}, // frees first at equal times
		{Op: OpFree, ID: 7, Size: 100, TimeUS: 3},
		{Op: OpFree, ID: tok | 1, Slot: 1, Size: 25, TimeUS: 5},
	}, evs)
	assert.Equal(t, evs, roundTrip(t, evs, r.Columns()))
	require.NoError(t, r.Close())

	const head = "id,lower,upper,size\n"
	for _, tc := range []struct{ line, msg string }{
		{"b,0,1", "got 3 fields, want 4"},
		{",0,1,5", "missing id"},
		{"b,x,1,5", `bad lower "x": not a number`},
		{"b,0,99999999999999999999,5", `bad upper "99999999999999999999": out of range`},
		{"b,-1,1,5", "bad lower -1: must be >= 0"},
		{"b,2,1,5", "empty lifetime [2, 1): upper must be > lower"},
		{"b,1,1,5", "empty lifetime [1, 1): upper must be > lower"},
		{"b,0,1,0", "bad size 0: must be > 0"},
		{"a,0,1,5", `buffer id "a" appears twice (first on line 2)`},
	} {
		checkBadLine(t, head+"a,0,2,7\n"+tc.line+"\nc,1,3,4\n", tc.msg, 4)
	}
	_, _, err = autoRead(t, "id,lower,upper,size,gaps\nb,0,9,5,2-3\n", Options{})
	assert.EqualError(t, err, `t:2: gaps are not supported (buffer "b")`)
	_, _, err = autoRead(t, "id,lower,upper,size,begin\n", Options{})
	assert.EqualError(t, err, `t:1: column "begin" appears twice in header`)
	_, err = newMiniMallocReader(strings.NewReader("op,id\n"), "t", Options{})
	assert.ErrorIs(t, err, ErrNotTrace)
}
