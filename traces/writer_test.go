package traces

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	require.NoError(t, w.Comment("made by a test\n\nsecond line"))
	for _, ev := range []Event{
		{Op: OpAlloc, ID: 1, Size: 4096, TimeUS: 0},
		{Op: OpAlloc, ID: 1<<62 | 0x7f00, Size: 512, Stream: 7, Device: 1, TimeUS: 5},
		{Op: OpAlloc, ID: 1<<63 | 3, Size: 10, TimeUS: 6},
		{Op: OpFree, ID: 1, Size: 4096, TimeUS: 9},
		{Op: OpFree, ID: 1<<62 | 0x7f00, Size: 512, Stream: 7, Device: 1, TimeUS: 9},
	} {
		require.NoError(t, w.Write(ev))
	}
	require.NoError(t, w.Comment("the end"))
	require.NoError(t, w.Close())
	assert.Equal(t, `# gpualloc trace v1
# made by a test
#
# second line
op,id,size,stream,device,time_us
alloc,1,4096,0,0,0
alloc,0x7f00,512,7,1,5
alloc,t3,10,0,0,6
free,1,,0,0,9
free,0x7f00,,7,1,9
# the end
`, b.String())
	assert.Equal(t, []Column{ColOp, ColID, ColSize, ColStream, ColDevice, ColTime}, w.Columns())
}

func TestWriterColumns(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, ColTime, ColID, ColOp, ColSize)
	require.NoError(t, w.Write(Event{Op: OpAlloc, ID: 1, Size: 4096, Stream: 3, TimeUS: 7}))
	require.NoError(t, w.Flush())
	assert.Equal(t, "# gpualloc trace v1\ntime_us,id,op,size\n7,1,alloc,4096\n", b.String())

	// An empty trace still has its header.
	b.Reset()
	w = NewWriter(&b, ColOp, ColID)
	require.NoError(t, w.Flush())
	assert.Equal(t, "# gpualloc trace v1\nop,id\n", b.String())
	_, _, err := readAll(t, b.String(), Options{})
	assert.NoError(t, err)
	// Without a time column, events need no time.
	require.NoError(t, w.Write(Event{Op: OpAlloc, ID: 1, Size: 1, TimeUS: NoTime}))

	for _, cols := range [][]Column{
		{ColOp, ColOp, ColID},
		{ColOp},
		{ColID, ColSize},
		{ColOp, ColID, 0},
		{ColOp, ColID, ColCategory + 1},
	} {
		w := NewWriter(&b, cols...)
		assert.Error(t, w.Write(Event{Op: OpAlloc, ID: 1, Size: 1}), "%v", cols)
		assert.Error(t, w.Flush(), "%v", cols)
		assert.Error(t, w.Close(), "%v", cols)
	}
}

func TestWriterBadEvents(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, tc := range []struct {
		ev  Event
		err string
	}{
		{Event{Op: 0, ID: 1, Size: 1}, "traces: write of an event with bad op 0"},
		{Event{Op: OpAlloc, ID: 1, Size: 0}, "traces: write of an alloc of id 1 with size 0: size must be > 0"},
		{Event{Op: OpAlloc, ID: 1, Size: 1, Device: -1}, "traces: write of an event of id 1 with device -1: device must be >= 0"},
		{Event{Op: OpFree, ID: 1, Size: 1, TimeUS: NoTime}, "traces: write of an event of id 1 without a time to a trace with a time_us column"},
	} {
		assert.EqualError(t, w.Write(tc.ev), tc.err)
	}
	// A bad event leaves the writer usable.
	require.NoError(t, w.Write(Event{Op: OpAlloc, ID: 1, Size: 1}))
	require.NoError(t, w.Flush())
	assert.Equal(t, "# gpualloc trace v1\nop,id,size,stream,device,time_us\nalloc,1,1,0,0,0\n", b.String())
}

type failWriter struct{ n int }

var errDiskFull = errors.New("disk full")

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n -= len(p); f.n < 0 {
		return 0, errDiskFull
	}
	return len(p), nil
}

func TestWriterOutputError(t *testing.T) {
	w := NewWriter(&failWriter{n: 100 << 10})
	var err error
	for i := 0; err == nil && i < 1e6; i++ {
		err = w.Write(Event{Op: OpAlloc, ID: uint64(i), Size: 1 << 20})
	}
	assert.ErrorIs(t, err, errDiskFull)
	assert.ErrorIs(t, w.Write(Event{Op: OpAlloc, ID: 1, Size: 1}), errDiskFull, "sticky")
	assert.ErrorIs(t, w.Comment("x"), errDiskFull)
	assert.ErrorIs(t, w.Close(), errDiskFull)
}

func TestRoundTrip(t *testing.T) {
	for _, f := range testdataTraces(t) {
		r, err := openCSV(f, Options{Lenient: true})
		require.NoError(t, err, f)
		evs, err := scanAll(t, r)
		require.NoError(t, err, f)
		require.NoError(t, r.Close())
		assert.Equal(t, evs, roundTrip(t, evs, r.Columns()), f)
		if r.HasTime() {
			// The default columns have no category.
			plain := slices.Clone(evs)
			for i := range plain {
				plain[i].Category = 0
			}
			assert.Equal(t, plain, roundTrip(t, evs, nil), f)
		}
	}
}

func TestLiveTable(t *testing.T) {
	var lt liveTable
	lt.init(1)
	ref := map[uint64]int64{}
	keys := []uint64{}
	for i := range 200000 {
		// Keys in a small range, so that inserts collide with live keys.
		k := uint64(i*7919%5000) | uint64(i%3)<<62
		if j := lt.find(k); j >= 0 {
			require.Equal(t, ref[k], lt.e[j].size)
			lt.removeAt(j)
			delete(ref, k)
		} else {
			_, ok := ref[k]
			require.False(t, ok)
			require.True(t, lt.insert(liveInfo{key: k, size: int64(i)}))
			require.False(t, lt.insert(liveInfo{key: k, size: -1}))
			ref[k] = int64(i)
			keys = append(keys, k)
		}
		require.Equal(t, len(ref), lt.n)
	}
	for _, k := range keys {
		j := lt.find(k)
		if v, ok := ref[k]; ok {
			require.GreaterOrEqual(t, j, 0)
			require.Equal(t, v, lt.e[j].size)
		} else {
			require.Equal(t, -1, j)
		}
	}
	assert.LessOrEqual(t, 2*lt.n, len(lt.e))
}
