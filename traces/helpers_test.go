package traces

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The helpers that the tests of every format share.

// An opener makes a reader of a format from the text src, as a format's
// open does (see format), or of any format, as newReader does.
type opener func(src io.Reader, name string, opts Options) (formatReader, error)

// openerOf returns the open function of the format named name.
func openerOf(t testing.TB, name string) opener {
	for _, f := range formats {
		if f.name == name {
			return f.open
		}
	}
	t.Fatalf("no format %q", name)
	return nil
}

// scanAll reads r through and checks that its events are consistent: each
// alloc has a size, and an ID and a slot that no live allocation has, the
// slot below the reader's slot count; each free ends a live allocation and
// carries its ID, size, stream, device and category; a release names no
// allocation; times do not go backwards; what
// is live at the end is what the reader says.
func scanAll(t testing.TB, r Reader) ([]Event, error) {
	t.Helper()
	var evs []Event
	live := map[int32]Event{}
	ids := map[uint64]bool{}
	c, _ := r.(formatReader)
	for r.Scan() {
		ev := r.Event()
		if c != nil && ev.Op != OpRelease {
			require.Less(t, int(ev.Slot), c.core().Slots())
		}
		if ev.Op == OpRelease {
			require.Zero(t, ev.ID)
			require.Zero(t, ev.Size)
			require.Zero(t, ev.Slot)
		} else if ev.Op == OpAlloc {
			require.Positive(t, ev.Size)
			_, taken := live[ev.Slot]
			require.False(t, taken, "slot %d of a live allocation given again", ev.Slot)
			require.False(t, ids[ev.ID], "ID %#x of a live allocation given again", ev.ID)
			live[ev.Slot], ids[ev.ID] = ev, true
		} else {
			a, ok := live[ev.Slot]
			require.True(t, ok, "free of slot %d that is not live", ev.Slot)
			require.Equal(t, a.ID, ev.ID)
			require.Equal(t, a.Size, ev.Size)
			require.Equal(t, a.Stream, ev.Stream)
			require.Equal(t, a.Device, ev.Device)
			require.Equal(t, a.Category, ev.Category)
			delete(live, ev.Slot)
			delete(ids, ev.ID)
		}
		if n := len(evs); n > 0 && ev.TimeUS != NoTime {
			require.GreaterOrEqual(t, ev.TimeUS, evs[n-1].TimeUS, "time goes backwards")
		}
		evs = append(evs, ev)
	}
	if c != nil {
		require.Equal(t, len(live), c.core().Live())
	}
	return evs, r.Err()
}

// readAll reads every event of text, a trace in the native format, named
// t.csv.
func readAll(t testing.TB, text string, opts Options) ([]Event, *csvReader, error) {
	t.Helper()
	r, err := newCSVReader(strings.NewReader(text), "t.csv", opts)
	if err != nil {
		return nil, nil, err
	}
	evs, err := scanAll(t, r)
	return evs, r, err
}

// roundTrip writes evs in the native format with the columns cols (every
// column if none) and reads them back.
func roundTrip(t testing.TB, evs []Event, cols []Column) []Event {
	t.Helper()
	var b bytes.Buffer
	w := NewWriter(&b, cols...)
	for _, ev := range evs {
		require.NoError(t, w.Write(ev))
	}
	require.NoError(t, w.Close())
	got, r, err := readAll(t, b.String(), Options{})
	require.NoError(t, err, b.String())
	if cols == nil {
		cols = allColumns
	}
	assert.Equal(t, cols, r.Columns())
	return got
}

// autoRead reads input, a trace of any format, named t.
func autoRead(t testing.TB, input string, opts Options) (FileReader, []Event, error) {
	t.Helper()
	r, err := NewReader(strings.NewReader(input), "t", opts)
	if err != nil {
		return nil, nil, err
	}
	evs, err := scanAll(t, r)
	require.NoError(t, r.Close())
	return r, evs, err
}

// openCSV reads a small file in the native format into memory and returns
// its reader.
func openCSV(path string, opts Options) (*csvReader, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return newCSVReader(bytes.NewReader(data), path, opts)
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// gz compresses text with gzip.
func gz(t testing.TB, text string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err := zw.Write([]byte(text))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// fastSlow reads data, a native trace, with the fast path and with the slow
// one only, and with Fill in batches of 3 events, and checks that they give
// the same events, errors and skips. It reports false if data is not a
// native trace.
func fastSlow(t testing.TB, name string, data []byte, opts Options) bool {
	t.Helper()
	var evs [3][]Event
	var rs [3]*csvReader
	for i := range rs {
		r, err := newCSVReader(bytes.NewReader(data), name, opts)
		if err != nil {
			return false
		}
		r.slowOnly = i == 1
		if i == 2 {
			for {
				b := r.Fill(make([]Event, 0, 3))
				evs[i] = append(evs[i], b...)
				if len(b) < 3 {
					break
				}
			}
		} else {
			for r.Scan() {
				evs[i] = append(evs[i], r.Event())
			}
		}
		rs[i] = r
	}
	for i := 1; i < len(rs); i++ {
		require.Equal(t, evs[0], evs[i], name)
		require.Equal(t, rs[0].Err(), rs[i].Err(), name)
		require.Equal(t, rs[0].Skipped(), rs[i].Skipped(), name)
		require.Equal(t, rs[0].FirstSkipped(), rs[i].FirstSkipped(), name)
	}
	return true
}

// checkBadLine reads input, whose third line is bad, strictly and
// leniently: strictly it stops there with the error msg, leniently it
// skips that line alone and yields events events.
func checkBadLine(t *testing.T, input, msg string, events int) {
	t.Helper()
	_, _, err := autoRead(t, input, Options{})
	var pe *ParseError
	require.True(t, errors.As(err, &pe), "%q: %v", input, err)
	assert.EqualError(t, err, "t:3: "+msg)
	r, evs, err := autoRead(t, input, Options{Lenient: true})
	require.NoError(t, err, input)
	assert.Len(t, evs, events, input)
	assert.Equal(t, int64(1), r.Skipped())
	assert.EqualError(t, r.FirstSkipped(), "t:3: "+msg)
}

// testdataTraces returns the test traces in the native format.
func testdataTraces(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.csv")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// fuzzSeeds adds the files that match the patterns to f.
func fuzzSeeds(f *testing.F, patterns ...string) {
	for _, p := range patterns {
		files, err := filepath.Glob(p)
		require.NoError(f, err)
		for _, file := range files {
			f.Add([]byte(mustRead(f, file)))
		}
	}
}

// checkDecode reads data with open, strictly and leniently, and checks that
// no input makes it panic, that every error is a *ParseError, that the
// events are consistent and that they read back the same from the native
// format. It returns the format that read data strictly, or "".
func checkDecode(t *testing.T, data []byte, open opener) (format string) {
	for _, lenient := range []bool{false, true} {
		r, err := open(bytes.NewReader(data), "fuzz", Options{Lenient: lenient})
		if err != nil {
			var pe *ParseError
			require.True(t, errors.As(err, &pe), "%T %v", err, err)
			continue
		}
		if !lenient {
			format = r.Format()
		}
		evs, err := scanAll(t, r)
		if err != nil {
			var pe *ParseError
			require.True(t, errors.As(err, &pe), "%T %v", err, err)
		}
		require.Equal(t, evs, roundTrip(t, evs, r.Columns()))
		require.NoError(t, r.Close())
	}
	return format
}
