package traces

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadExample(t *testing.T) {
	evs, r, err := readAll(t, "# gpualloc trace v1\nop,id,size,stream,time_us\nalloc,1,4096,0,0\nalloc,2,1048576,0,5\nfree,1,,0,9\n", Options{})
	require.NoError(t, err)
	assert.Equal(t, []Event{
		{Op: OpAlloc, ID: 1, Slot: 0, Size: 4096, TimeUS: 0},
		{Op: OpAlloc, ID: 2, Slot: 1, Size: 1048576, TimeUS: 5},
		{Op: OpFree, ID: 1, Slot: 0, Size: 4096, TimeUS: 9},
	}, evs)
	assert.True(t, r.HasTime())
	assert.Equal(t, []Column{ColOp, ColID, ColSize, ColStream, ColTime}, r.Columns())
	assert.Equal(t, int64(5), r.line)
	assert.Equal(t, 1, r.Live())
	assert.Equal(t, 2, r.Slots())
	assert.Equal(t, "t.csv", r.Name())
}

func TestReadFields(t *testing.T) {
	evs, r, err := readAll(t, "device,stream,size,id,op\n1,0x10,100,5,alloc\n,,,5,free\n", Options{})
	require.NoError(t, err)
	assert.False(t, r.HasTime())
	assert.Equal(t, []Event{
		{Op: OpAlloc, ID: 5, Device: 1, Size: 100, Stream: 16, TimeUS: NoTime},
		{Op: OpFree, ID: 5, Device: 1, Size: 100, Stream: 16, TimeUS: NoTime},
	}, evs)
}

const (
	hdr  = "op,id,size,time_us\n"
	hdrS = "op,id,size,stream,device\n"
)

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{hdr + "alloc,1,100,0\nallocate,2,5,1\n", `t.csv:3: unknown op "allocate" (want alloc, free or release)`},
		{hdr + ",1,100,0\n", `t.csv:2: missing op`},
		{hdr + "alloc,,100,0\n", `t.csv:2: missing id`},
		{hdr + "alloc,1,,0\n", `t.csv:2: missing size on alloc of id 1`},
		{hdr + "alloc,x y,,0\n", `t.csv:2: missing size on alloc of id "x y"`},
		{"op,id\nalloc,1\n", `t.csv:2: missing size on alloc of id 1`},
		{hdr + "alloc,1,0,0\n", `t.csv:2: bad size "0": must be > 0`},
		{hdr + "alloc,1,000,0\n", `t.csv:2: bad size "000": must be > 0`},
		{hdr + "alloc,1,-5,0\n", `t.csv:2: bad size "-5": must be > 0`},
		{hdr + "alloc,1,abc,0\n", `t.csv:2: bad size "abc": not a number`},
		{hdr + "alloc,1,1.5,0\n", `t.csv:2: bad size "1.5": not a whole number`},
		{hdr + "alloc,1,+5,0\n", `t.csv:2: bad size "+5": not a number`},
		{hdr + "alloc,1,9223372036854775808,0\n", `t.csv:2: bad size "9223372036854775808": larger than 9223372036854775807`},
		{hdr + "alloc,1,99999999999999999999,0\n", `t.csv:2: bad size "99999999999999999999": larger than 9223372036854775807`},
		{hdr + "alloc,1,100,0\nfree,1,200,1\n", `t.csv:3: free of id 1 with size 200, allocated with size 100`},
		{hdr + "alloc,1,100,0\nfree,1,0,1\n", `t.csv:3: bad size "0": must be > 0`},
		{hdr + "free,1,,0\n", `t.csv:2: free of unknown id 1`},
		{hdr + "free,0x1f,,0\n", `t.csv:2: free of unknown id 0x1f`},
		{hdr + "free,buf,,0\n", `t.csv:2: free of unknown id "buf"`},
		{hdr + "alloc,1,100,0\nfree,1,,1\nfree,1,,2\n", `t.csv:4: free of unknown id 1`},
		{hdr + "alloc,1,100,0\nalloc,1,100,1\n", `t.csv:3: alloc of id 1 that is already live`},
		{hdr + "alloc,a,100,0\nalloc,a,100,1\n", `t.csv:3: alloc of id "a" that is already live`},
		{hdr + "alloc,1,100,5\nalloc,2,100,4\n", `t.csv:3: time_us 4 is before the previous event's 5`},
		{hdr + "alloc,1,100,x\n", `t.csv:2: bad time_us "x": not a number`},
		{hdr + "alloc,1,100,\n", `t.csv:2: missing time_us`},
		{hdr + "alloc,1,100,-1\n", `t.csv:2: bad time_us "-1": must be >= 0`},
		{hdr + "alloc,1,100\n", `t.csv:2: got 3 fields, want 4 (op,id,size,time_us)`},
		{hdr + "alloc,1,100,0,5\n", `t.csv:2: got 5 fields, want 4 (op,id,size,time_us)`},
		{hdr + "alloc\n", `t.csv:2: got 1 fields, want 4 (op,id,size,time_us)`},
		{hdrS + "alloc,1,10,x,0\n", `t.csv:2: bad stream "x": not a number`},
		{hdrS + "alloc,1,10,0x,0\n", `t.csv:2: bad stream "0x": not a number`},
		{hdrS + "alloc,1,10,18446744073709551616,0\n", `t.csv:2: bad stream "18446744073709551616": larger than 18446744073709551615`},
		{hdrS + "alloc,1,10,0,x\n", `t.csv:2: bad device "x": not a number`},
		{hdrS + "alloc,1,10,0,-1\n", `t.csv:2: bad device "-1": must be >= 0`},
		{hdrS + "alloc,1,10,0,2147483648\n", `t.csv:2: bad device "2147483648": larger than 2147483647`},
		{hdrS + "alloc,1,10,3,0\nfree,1,,4,\n", `t.csv:3: free of id 1 on stream 4, allocated on stream 3`},
		{hdrS + "alloc,1,10,3,1\nfree,1,,,0\n", `t.csv:3: free of id 1 on device 0, allocated on device 1`},
		{hdr + " # not a comment\n", `t.csv:2: got 1 fields, want 4 (op,id,size,time_us)`},
		{"op,id,foo\n", `t.csv:1: header has no size column (not known, and ignored: foo; known: op, id, size, stream, device, time_us, category)`},
		{"# c\n\nop,id,bytes\n", `t.csv:3: header has no size column (not known, and ignored: bytes; known: op, id, size, stream, device, time_us, category)`},
		{"op,size,tag\n", `t.csv:1: header has no id column (not known, and ignored: tag; known: op, id, size, stream, device, time_us, category)`},
		{"op,id,ID\n", `t.csv:1: column "ID" appears twice in header`},
		{"op,size\n", `t.csv:1: header has no id column`},
		{"op,,id\n", `t.csv:1: empty column name in header (column 2)`},
		{"op,id,,size\n", `t.csv:1: empty column name in header (column 3)`},
		{"op,id,size\nalloc,1,4096.5\n", `t.csv:2: bad size "4096.5": not a whole number`},
		{"op,id,size\nalloc,1,-4096.0\n", `t.csv:2: bad size "-4096.0": must be > 0`},
		{"op,id,size\nalloc,1,0.0\n", `t.csv:2: bad size "0.0": must be > 0`},
		{"op,id,size\nalloc,1,.5\n", `t.csv:2: bad size ".5": not a number`},
		{"op,id,size\nalloc,1,1e3\n", `t.csv:2: bad size "1e3": not a number`},
		{"op,id,size,time_us\nalloc,1,1,0.25\n", `t.csv:2: bad time_us "0.25": not a whole number`},
		{"op,id,size\nalloc," + strings.Repeat("x", maxLineBytes) + ",1\n", `t.csv:2: line too long (more than 65536 bytes)`},
		{"op,id,size\nalloc,1,1\n# " + strings.Repeat("x", maxLineBytes) + "\n", `t.csv:3: line too long (more than 65536 bytes)`},
	} {
		_, _, err := readAll(t, tc.in, Options{})
		if assert.Error(t, err, tc.in) {
			assert.Equal(t, tc.err, err.Error(), "%q", tc.in)
			var pe *ParseError
			assert.True(t, errors.As(err, &pe))
			assert.False(t, errors.Is(err, ErrNotTrace))
		}
	}
}

// What pandas' DataFrame.to_csv writes: its index first, in a column
// without a name, and the integers of a column with empty cells as floats;
// and a header ended by a comma.
func TestReadPandas(t *testing.T) {
	want := []Event{
		{Op: OpAlloc, ID: 1, Size: 4096, TimeUS: 0},
		{Op: OpAlloc, ID: 2, Size: 1 << 20, TimeUS: 5, Slot: 1},
		{Op: OpFree, ID: 1, Size: 4096, TimeUS: 9},
	}
	for _, in := range []string{
		",op,id,size,time_us\n0,alloc,1,4096.0,0\n1,alloc,2,1048576.0,5\n2,free,1,,9\n",
		"op,id,size,time_us,\nalloc,1,4096,0,\nalloc,2,1048576,5,\nfree,1,,9,\n",
		",op,id,size,time_us\n0,alloc,1,4096.000,0.0\n1,alloc,2,1048576.,5\n2,free,1,4096.0,9\n",
	} {
		evs, _, err := readAll(t, in, Options{})
		require.NoError(t, err, "%q", in)
		assert.Equal(t, want, evs, "%q", in)
	}
}

func TestReadValid(t *testing.T) {
	for _, in := range []string{
		"op,id\n",                                   // no events
		"op,id,size\n# a comment\n\n   \n\t\n",      // comments and blank lines
		hdrS + "alloc,1,10,0x1F,0\nfree,1,,31,0\n",  // hexadecimal stream
		hdrS + "alloc,1,10,0X1f,0\nfree,1,10,31,\n", // a free may repeat what it knows
		"OP,Id,SIZE\nALLOC,1,5\nFree,1,\n",          // names without regard to case
		"\xef\xbb\xbfop,id,size\nalloc,1,5\n",       // byte order mark
		hdr + "alloc,4611686018427387903,5,0\nfree,4611686018427387903,,0\n",
		hdr + "alloc,4611686018427387904,5,0\nfree,4611686018427387904,,0\n",
		hdr + "alloc,1,9223372036854775807,0\nfree,1,,9223372036854775807\n",
		hdr + "alloc,\xff\xfe,5,0\nfree,\xff\xfe,,0\n", // ids are bytes: invalid UTF-8 passes
	} {
		_, _, err := readAll(t, in, Options{})
		assert.NoError(t, err, "%q", in)
	}
}

func TestNotTrace(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10")
	noNewline := make([]byte, 3*maxLineBytes)
	for i := range noNewline {
		noNewline[i] = byte('a' + i%26)
	}
	for _, tc := range []struct{ in, why string }{
		{"", "empty input"},
		{"\n\n", "no header line"},
		{"# gpualloc trace v1\n# nothing else\n", "no header line"},
		{string(png), "first line is not a header naming an op column"},
		{"hello world\nfoo\n", "first line is not a header naming an op column"},
		{"Thread,Time,Action,Pointer,Size,Stream\n1,0.5,allocate,0x7f00,100,0x0\n", "first line is not a header naming an op column"},
		{"id,lower,upper,size\n0,0,10,4096\n", "first line is not a header naming an op column"},
		{"x", "first line is not a header naming an op column"},
		{string(noNewline), "a line longer than 65536 bytes before any header"},
		{strings.Repeat("z", maxLineBytes) + "\nop,id\n", "a line longer than 65536 bytes before any header"},
	} {
		_, err := newCSVReader(strings.NewReader(tc.in), "t.csv", Options{})
		if assert.Error(t, err, "%q", tc.in) {
			assert.True(t, errors.Is(err, ErrNotTrace), "%q: %v", tc.in, err)
			assert.Equal(t, "t.csv: not a gpualloc trace ("+tc.why+")", err.Error())
		}
	}
}

func TestCommentsAndLineEndings(t *testing.T) {
	want := []Event{
		{Op: OpAlloc, ID: 1, Size: 10, TimeUS: NoTime},
		{Op: OpFree, ID: 1, Size: 10, TimeUS: NoTime},
		{Op: OpAlloc, ID: 2, Size: 20, TimeUS: NoTime},
	}
	for _, in := range []string{
		"op,id,size\nalloc,1,10\nfree,1,\nalloc,2,20\n",
		"op,id,size\nalloc,1,10\nfree,1,\nalloc,2,20",
		"op,id,size\r\nalloc,1,10\r\nfree,1,\r\nalloc,2,20\r\n",
		"op,id,size\r\nalloc,1,10\r\nfree,1,\r\nalloc,2,20\r",
		"# c\r\n#\n\r\nop , id , size \r\n# c\n\n alloc , 1 , 10 \n\tfree,1,\t\n# c\nalloc,2,20\n# end",
	} {
		evs, r, err := readAll(t, in, Options{})
		require.NoError(t, err, "%q", in)
		assert.Equal(t, want, evs, "%q", in)
		assert.Equal(t, []Column{ColOp, ColID, ColSize}, r.Columns())
	}
	// Line numbers count comments and blank lines.
	_, _, err := readAll(t, "# c\r\n\r\nop,id,size\r\n# c\r\nalloc,1,10\r\n\r\nfree,2,\r\n", Options{})
	assert.EqualError(t, err, "t.csv:7: free of unknown id 2")
}

func TestIDKey(t *testing.T) {
	for _, tc := range []struct {
		tok string
		key uint64
		ok  bool
	}{
		{"0", 0, true},
		{"7", 7, true},
		{"4611686018427387903", 1<<62 - 1, true},
		{"4611686018427387904", 0, false},
		{"99999999999999999999", 0, false},
		{"007", 0, false},
		{"0x0", 1 << 62, true},
		{"0xa", 1<<62 | 10, true},
		{"0x7f3a00000000", 1<<62 | 0x7f3a00000000, true},
		{"0x3fffffffffffffff", 1<<62 | (1<<62 - 1), true},
		{"0x4000000000000000", 0, false},
		{"0x", 0, false},
		{"0x0a", 0, false},
		{"0xA", 0, false},
		{"0X7f", 0, false},
		{"-1", 0, false},
		{"", 0, false},
		{"buf", 0, false},
	} {
		key, ok := idKeyOf(tc.tok)
		assert.Equal(t, tc.ok, ok, tc.tok)
		if tc.ok {
			assert.Equal(t, tc.key, key, tc.tok)
			assert.Equal(t, tc.tok, formatID(key), "formatID(IDKey(%q))", tc.tok)
		}
	}
	assert.Equal(t, "t5", formatID(1<<63|5))
	assert.Equal(t, "t4611686018427387909", formatID(3<<62|5))
}

// TestIDsAreText checks that ids pair by their text: numbers written
// differently are different ids.
func TestIDsAreText(t *testing.T) {
	f, err := openCSV("testdata/tokens.csv", Options{})
	require.NoError(t, err)
	defer f.Close()
	var evs []Event
	for f.Scan() {
		evs = append(evs, f.Event())
		if f.Event().Op == OpAlloc {
			assert.Equal(t, len(f.tokens), f.Live()-liveNumbers(f), "an interned id for each live token")
		}
	}
	require.NoError(t, f.Err())
	sizes := func(evs []Event) (out []int64) {
		for _, ev := range evs {
			out = append(out, ev.Size)
		}
		return out
	}
	assert.Equal(t, []int64{100, 200, 300, 400, 500, 200, 100, 600, 300, 400, 500, 600}, sizes(evs))
	assert.Equal(t, uint64(idTokenTag), evs[0].ID)
	assert.Equal(t, uint64(idTokenTag|1), evs[1].ID) // "007" is a token
	assert.Equal(t, uint64(7), evs[2].ID)
	assert.Equal(t, uint64(idTokenTag|3), evs[7].ID, "a token allocated again gets a new ID")
	assert.Empty(t, f.tokens, "interned ids go with their frees")
}

func liveNumbers(r *csvReader) int {
	n := 0
	for _, e := range r.live.e {
		if e.key != emptyKey && e.key&idTokenTag == 0 {
			n++
		}
	}
	return n
}

func TestSlots(t *testing.T) {
	evs, r, err := readAll(t, "op,id,size\nalloc,1,1\nalloc,2,1\nalloc,3,1\nfree,1,\nfree,3,\nalloc,4,1\nalloc,5,1\nalloc,6,1\n", Options{})
	require.NoError(t, err)
	var slots []int32
	for _, ev := range evs {
		slots = append(slots, ev.Slot)
	}
	assert.Equal(t, []int32{0, 1, 2, 0, 2, 2, 0, 3}, slots, "released slots are reused last in, first out")
	assert.Equal(t, 4, r.Slots())
}

// TestSlotsRandom checks on a random trace that live allocations have
// distinct slots below the peak live count, and that frees carry their
// allocation's slot and size.
func TestSlotsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString("op,id,size\n")
	var live []int
	next := 0
	for range 20000 {
		if len(live) == 0 || rng.IntN(3) > 0 && len(live) < 500 {
			next++
			live = append(live, next)
			b.WriteString("alloc," + formatID(uint64(next)) + "," + formatID(uint64(next%1000+1)) + "\n")
		} else {
			i := rng.IntN(len(live))
			b.WriteString("free," + formatID(uint64(live[i])) + ",\n")
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	// readAll checks that live allocations have distinct slots, below the
	// reader's count, and that frees carry their allocation's.
	evs, r, err := readAll(t, b.String(), Options{})
	require.NoError(t, err)
	n, peak := 0, 0
	for _, ev := range evs {
		if ev.Op == OpAlloc {
			n++
		} else {
			n--
		}
		peak = max(peak, n)
		require.Less(t, int(ev.Slot), peak)
	}
	assert.Equal(t, peak, r.Slots())
	assert.Equal(t, len(live), r.Live())
}

func TestLenient(t *testing.T) {
	f, err := Open("testdata/lenient.csv", Options{Lenient: true})
	require.NoError(t, err)
	defer f.Close()
	evs, err := scanAll(t, f)
	require.NoError(t, err)
	assert.Equal(t, []Event{
		{Op: OpAlloc, ID: 1, Size: 100, TimeUS: 0},
		{Op: OpAlloc, ID: 3, Slot: 1, Size: 50, TimeUS: 1}, // time 1 follows time 0: skipped events do not count
		{Op: OpFree, ID: 1, Size: 100, TimeUS: 5},
	}, evs)
	assert.Equal(t, int64(5), f.Skipped())
	assert.EqualError(t, f.FirstSkipped(), "testdata/lenient.csv:3: free of unknown id 9")

	// The same trace read strictly stops at the first bad event.
	_, err = Open("testdata/lenient.csv", Options{})
	require.NoError(t, err)
	_, _, err = readAll(t, mustRead(t, "testdata/lenient.csv"), Options{})
	assert.EqualError(t, err, "t.csv:3: free of unknown id 9")

	// Structural errors still end the trace.
	_, err = NewReader(strings.NewReader("op,id,foo\n"), "t.csv", Options{Lenient: true})
	assert.EqualError(t, err, `t.csv:1: header has no size column (not known, and ignored: foo; known: op, id, size, stream, device, time_us, category)`)
	evs, r, err := readAll(t, "op,id,size\nalloc,1,1\nalloc,"+strings.Repeat("x", maxLineBytes)+",1\nfree,1,\n", Options{Lenient: true})
	assert.EqualError(t, err, "t.csv:3: line too long (more than 65536 bytes)")
	assert.Len(t, evs, 1)
	assert.Zero(t, r.Skipped())
}

func TestGzip(t *testing.T) {
	var text strings.Builder
	text.WriteString("# gpualloc trace v1\nop,id,size\n")
	for i := range 50000 {
		text.WriteString("alloc," + formatID(uint64(i)) + ",100\nfree," + formatID(uint64(i)) + ",\n")
	}
	plain, _, err := readAll(t, text.String(), Options{})
	require.NoError(t, err)
	require.Len(t, plain, 100000)

	compressed := gz(t, text.String())
	for _, name := range []string{"t.csv.gz", "t.csv"} { // found by content, not by name
		r, err := NewReader(bytes.NewReader(compressed), name, Options{})
		require.NoError(t, err)
		evs, err := scanAll(t, r)
		require.NoError(t, err)
		assert.Equal(t, plain, evs)
		require.NoError(t, r.Close())
	}

	// Two gzip members in a row read as one text.
	two := append(gz(t, "op,id,size\nalloc,1,5\n"), gz(t, "free,1,\n")...)
	r, err := NewReader(bytes.NewReader(two), "t.csv.gz", Options{})
	require.NoError(t, err)
	n := 0
	for r.Scan() {
		n++
	}
	require.NoError(t, r.Err())
	assert.Equal(t, 2, n)

	// A truncated file.
	for _, cut := range []int{len(compressed) / 2, len(compressed) - 4, len(compressed) - 1} {
		r, err := NewReader(bytes.NewReader(compressed[:cut]), "t.csv.gz", Options{Lenient: true})
		require.NoError(t, err)
		n := 0
		for r.Scan() {
			n++
		}
		err = r.Err()
		require.Error(t, err, "cut at %d", cut)
		assert.True(t, errors.Is(err, io.ErrUnexpectedEOF), "%v", err)
		assert.Regexp(t, `^t\.csv\.gz:\d+: truncated gzip stream \(it ends after \d+ bytes of text\)$`, err.Error())
		var pe *ParseError
		require.True(t, errors.As(err, &pe))
		assert.Equal(t, int64(n+3), pe.Line, "the line after the last event")
	}
	_, err = NewReader(bytes.NewReader(compressed[:5]), "t.csv.gz", Options{})
	assert.EqualError(t, err, "t.csv.gz: truncated gzip stream (it ends after 0 bytes of text)")

	// A corrupt one.
	bad := bytes.Clone(compressed)
	bad[len(bad)-6] ^= 0xff // in the CRC-32
	r, err = NewReader(bytes.NewReader(bad), "t.csv.gz", Options{})
	require.NoError(t, err)
	for r.Scan() {
	}
	assert.ErrorIs(t, r.Err(), gzip.ErrChecksum)
	assert.Regexp(t, `^t\.csv\.gz:100003: corrupt gzip stream after \d+ bytes of text: gzip: invalid checksum$`, r.Err().Error())
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	r, err := newCSVReader(io.MultiReader(strings.NewReader("op,id,size\nalloc,1,5\nfree,1"), errReader{boom}), "t.csv", Options{})
	require.NoError(t, err)
	require.True(t, r.Scan())
	assert.False(t, r.Scan())
	assert.ErrorIs(t, r.Err(), boom)
	assert.EqualError(t, r.Err(), "t.csv:3: read: boom")
	assert.False(t, r.Scan(), "the error stays")

	_, err = NewReader(errReader{boom}, "t.csv", Options{})
	assert.ErrorIs(t, err, boom)
	assert.EqualError(t, err, "t.csv: read: boom")
}

// oneByte reads one byte at a time, to exercise the buffer's refills.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

func TestSmallReads(t *testing.T) {
	text := mustRead(t, "testdata/addresses.csv")
	want, _, err := readAll(t, text, Options{})
	require.NoError(t, err)
	r, err := NewReader(oneByte{strings.NewReader(text)}, "t.csv", Options{})
	require.NoError(t, err)
	evs, err := scanAll(t, r)
	require.NoError(t, err)
	assert.Equal(t, want, evs)
	assert.Len(t, evs, 8)
	assert.Equal(t, int32(1), evs[2].Device)
	assert.Equal(t, uint64(7), evs[5].Stream, "a free carries its allocation's stream")
}

func TestLongLines(t *testing.T) {
	// Lines that straddle buffer refills, up to the longest allowed.
	id := strings.Repeat("i", maxLineBytes-len("alloc,,1\n"))
	text := "op,id,size\n" + strings.Repeat("alloc,"+id+",1\nfree,"+id+",\n", 5)
	evs, _, err := readAll(t, text, Options{})
	require.NoError(t, err)
	assert.Len(t, evs, 10)
	_, _, err = readAll(t, "op,id,size\nalloc,"+id+"x,1\n", Options{})
	assert.EqualError(t, err, "t.csv:2: line too long (more than 65536 bytes)")
}

// TestNoAllocs checks that reading events with numeric ids allocates
// nothing, whether they take the fast path or the slow one.
func TestNoAllocs(t *testing.T) {
	for _, spaced := range []bool{false, true} {
		var b strings.Builder
		b.WriteString("op,id,size,stream,device,time_us\n")
		sp := ""
		if spaced {
			sp = " "
		}
		for i := range 20000 {
			id := formatID(uint64(i))
			hex := formatID(uint64(i) | idHexTag)
			b.WriteString("alloc," + id + ",4096,1,0," + id + "\nalloc," + hex + sp + ",512,0,0," + id + "\n")
			b.WriteString("free," + id + sp + ",,1,0," + id + "\nfree," + hex + ",512,0,0," + id + "\n")
		}
		r, err := NewReader(strings.NewReader(b.String()), "t.csv", Options{})
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(50, func() {
			for range 1000 {
				if !r.Scan() {
					t.Fatal("trace too short", r.Err())
				}
			}
		})
		assert.Zero(t, allocs, "spaced %v", spaced)
	}
}

// TestTokenAllocs checks the cost of ids that are not numbers: the copy
// kept while they are live.
func TestTokenAllocs(t *testing.T) {
	var b strings.Builder
	b.WriteString("op,id,size\n")
	for i := range 20000 {
		id := "buf" + formatID(uint64(i%7))
		b.WriteString("alloc," + id + ",4096\nfree," + id + ",\n")
	}
	r, err := NewReader(strings.NewReader(b.String()), "t.csv", Options{})
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(50, func() {
		for range 1000 {
			r.Scan()
		}
	})
	assert.LessOrEqual(t, allocs, 500.0, "one allocation per alloc of a token, at most")
}

// TestDigits compares the word-at-a-time number parsing with a plain loop.
func TestDigits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("0123456789/:,\n\r \x00\x7f\x80\xb0\xff0123456789")
	buf := make([]byte, 40)
	for range 200000 {
		run := rng.IntN(20)
		for i := range buf {
			if i < run {
				buf[i] = '0' + byte(rng.IntN(10))
			} else {
				buf[i] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		var want uint64
		n := 0
		for n < len(buf) && buf[n] >= '0' && buf[n] <= '9' {
			want = want*10 + uint64(buf[n]-'0')
			n++
		}
		v, m := digits8(binary.LittleEndian.Uint64(buf))
		if m == 8 {
			v, m = digitsMore(buf, 0, v)
		}
		if n > 16 {
			require.Equal(t, 17, m, "%q", buf)
			continue
		}
		require.Equal(t, n, m, "%q", buf)
		require.Equal(t, want, v, "%q", buf)
	}
}

// TestFastSlow checks that the fast path and the slow path read the test
// traces alike.
func TestFastSlow(t *testing.T) {
	for _, f := range testdataTraces(t) {
		assert.True(t, fastSlow(t, f, []byte(mustRead(t, f)), Options{Lenient: true}), f)
	}
}
