package traces

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scanAll reads r through and checks that its events are consistent: each
// free ends a live allocation with its ID, size and slot, and no slot of a
// live allocation is given again.
func scanAll(t testing.TB, r Reader) ([]Event, error) {
	t.Helper()
	var evs []Event
	live := map[int32]Event{}
	for r.Scan() {
		ev := r.Event()
		if ev.Op == OpAlloc {
			require.Positive(t, ev.Size)
			_, taken := live[ev.Slot]
			require.False(t, taken, "slot %d of a live allocation given again", ev.Slot)
			live[ev.Slot] = ev
		} else {
			a, ok := live[ev.Slot]
			require.True(t, ok, "free of slot %d that is not live", ev.Slot)
			require.Equal(t, a.ID, ev.ID)
			require.Equal(t, a.Size, ev.Size)
			require.Equal(t, a.Stream, ev.Stream)
			delete(live, ev.Slot)
		}
		if n := len(evs); n > 0 && ev.TimeUS != NoTime {
			require.GreaterOrEqual(t, ev.TimeUS, evs[n-1].TimeUS, "time goes backwards")
		}
		evs = append(evs, ev)
	}
	return evs, r.Err()
}

// nativeRoundTrip writes evs in the native format with the given columns
// and reads them back.
func nativeRoundTrip(t testing.TB, evs []Event, cols []Column) []Event {
	t.Helper()
	var b bytes.Buffer
	w := NewWriter(&b, cols...)
	for _, ev := range evs {
		require.NoError(t, w.Write(ev))
	}
	require.NoError(t, w.Close())
	r, err := NewReader(&b, "native", Options{})
	require.NoError(t, err)
	got, err := scanAll(t, r)
	require.NoError(t, err)
	return got
}

func autoRead(t testing.TB, input string, opts Options) (FileReader, []Event, error) {
	t.Helper()
	r, err := NewAutoReader(strings.NewReader(input), "t", opts)
	if err != nil {
		return nil, nil, err
	}
	evs, err := scanAll(t, r)
	require.NoError(t, r.Close())
	return r, evs, err
}

func gzipped(t testing.TB, s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err := zw.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.String()
}

func TestFormatsOrder(t *testing.T) {
	names := Formats()
	require.GreaterOrEqual(t, len(names), 3)
	assert.Equal(t, "native CSV", names[0])
	assert.Contains(t, names, "RMM log")
	assert.Contains(t, names, "MiniMalloc CSV")
	assert.Panics(t, func() { registerFormat(format{name: "native CSV", sniff: sniffNative, open: openNative}) })
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
		for _, input := range []string{tc.input, gzipped(t, tc.input)} {
			r, _, err := autoRead(t, input, Options{})
			require.NoError(t, err, "%q", tc.input)
			assert.Equal(t, tc.format, r.Format(), "%q", tc.input)
			assert.Equal(t, "t", r.Name())
		}
	}
	known := "(" + strings.Join(Formats(), ", ") + ")"
	for input, msg := range map[string]string{
		"":                        "t: empty input: not a trace in any known format " + known,
		"hello, world\n":          "t: not a trace in any known format " + known,
		"\x89PNG\r\n\x1a\n":       "t: not a trace in any known format " + known,
		"Thread,Time,Action\n":    "t: not a trace in any known format " + known,
		"id,lower,upper\n":        "t: not a trace in any known format " + known,
		"id,lower,upper,size,x\n": "t: not a trace in any known format " + known,
		gzipped(t, "x,y\n"):       "t: not a trace in any known format " + known,
	} {
		_, _, err := autoRead(t, input, Options{})
		assert.ErrorIs(t, err, ErrNotTrace, "%q", input)
		assert.EqualError(t, err, msg, "%q", input)
	}
	// A broken gzip stream says where it broke.
	z := gzipped(t, "op,id,size\n"+strings.Repeat("alloc,1,5\nfree,1,\n", 1000))
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
		assert.Equal(t, evs, nativeRoundTrip(t, evs, r.Columns()), path)
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
	assert.Equal(t, int64(1), r.(AllocFailureCounter).AllocFailures())
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
		{"1,1634567890,free,0x1,5,0x0", `bad time "1634567890": not in the form of the first event's`},
	} {
		input := head + "1,10:00:00,allocate,0x1,5,0x0\n" + tc.line + "\n1,10:00:01,free,0x1,5,0x0\n"
		_, _, err := autoRead(t, input, Options{})
		var pe *ParseError
		require.True(t, errors.As(err, &pe), "%q: %v", tc.line, err)
		assert.EqualError(t, err, "t:3: "+tc.msg)
		r, evs, err := autoRead(t, input, Options{Lenient: true})
		require.NoError(t, err, tc.line)
		assert.Len(t, evs, 2, tc.line)
		assert.Equal(t, int64(1), r.Skipped())
		assert.EqualError(t, r.FirstSkipped(), "t:3: "+tc.msg)
	}
	_, err = NewRMMReader(strings.NewReader("op,id\n"), "t", Options{})
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
	assert.Equal(t, evs, nativeRoundTrip(t, evs, r.Columns()))
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
		input := head + "a,0,2,7\n" + tc.line + "\nc,1,3,4\n"
		_, _, err := autoRead(t, input, Options{})
		var pe *ParseError
		require.True(t, errors.As(err, &pe), "%q: %v", tc.line, err)
		assert.EqualError(t, err, "t:3: "+tc.msg)
		r, evs, err := autoRead(t, input, Options{Lenient: true})
		require.NoError(t, err, tc.line)
		assert.Len(t, evs, 4, tc.line)
		assert.Equal(t, int64(1), r.Skipped())
		assert.EqualError(t, r.FirstSkipped(), "t:3: "+tc.msg)
	}
	_, _, err = autoRead(t, "id,lower,upper,size,gaps\nb,0,9,5,2-3\n", Options{})
	assert.EqualError(t, err, `t:2: gaps are not supported (buffer "b")`)
	_, _, err = autoRead(t, "id,lower,upper,size,begin\n", Options{})
	assert.EqualError(t, err, `t:1: column "begin" appears twice in header`)
	_, err = NewMiniMallocReader(strings.NewReader("op,id\n"), "t", Options{})
	assert.ErrorIs(t, err, ErrNotTrace)
}

// fuzzSeeds adds the files of the testdata directories to f.
func fuzzSeeds(f *testing.F, patterns ...string) {
	for _, p := range patterns {
		files, err := filepath.Glob(p)
		require.NoError(f, err)
		for _, file := range files {
			data, err := os.ReadFile(file)
			require.NoError(f, err)
			f.Add(data)
		}
	}
}

// checkDecode reads data with newReader, strictly and leniently, and checks
// that no input makes it panic, that every error is a *ParseError, that the
// events are consistent and that they read back the same from the native
// format.
func checkDecode(t *testing.T, data []byte, newReader func(src []byte, opts Options) (FileReader, error)) {
	for _, lenient := range []bool{false, true} {
		r, err := newReader(data, Options{Lenient: lenient})
		if err != nil {
			var pe *ParseError
			require.True(t, errors.As(err, &pe), "%T %v", err, err)
			continue
		}
		evs, err := scanAll(t, r)
		if err != nil {
			var pe *ParseError
			require.True(t, errors.As(err, &pe), "%T %v", err, err)
		}
		require.Equal(t, evs, nativeRoundTrip(t, evs, r.Columns()))
		require.NoError(t, r.Close())
	}
}

func FuzzRMMReader(f *testing.F) {
	fuzzSeeds(f, "testdata/rmm/*.log")
	f.Add([]byte("Thread,Time,Action,Pointer,Size,Stream\n1,23:59:59.9,allocate,0x10,5,0x0\n1,00:00:00,free,0x10,5,7\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data, func(src []byte, opts Options) (FileReader, error) {
			return NewRMMReader(bytes.NewReader(src), "fuzz", opts)
		})
	})
}

func FuzzMiniMallocReader(f *testing.F) {
	fuzzSeeds(f, "testdata/minimalloc/*.csv")
	f.Add([]byte("size,end,start,buffer\n5,3,0,x\n5,0,0,y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data, func(src []byte, opts Options) (FileReader, error) {
			return NewMiniMallocReader(bytes.NewReader(src), "fuzz", opts)
		})
	})
}

// FuzzDetect checks detection: any input gives a reader, an error wrapping
// ErrNotTrace or a *ParseError, never a panic; plain and gzip input give the
// same format.
func FuzzDetect(f *testing.F) {
	fuzzSeeds(f, "testdata/*.csv", "testdata/rmm/*.log", "testdata/minimalloc/*.csv")
	f.Add([]byte(""))
	f.Add([]byte("\x1f\x8b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var format string
		for i, input := range [][]byte{data, []byte(gzipped(t, string(data)))} {
			checkDecode(t, input, func(src []byte, opts Options) (FileReader, error) {
				r, err := NewAutoReader(bytes.NewReader(src), "fuzz", opts)
				if err == nil && !opts.Lenient {
					if i == 0 {
						format = r.Format()
					} else if format != "" {
						require.Equal(t, format, r.Format())
					}
				}
				return r, err
			})
		}
	})
}
