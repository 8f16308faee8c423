package snapshot_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// held requires a read of data, with the stacks and without, to hold
// full's traces entry for entry behind Snapshot.Trace, as the entries
// given to a snapshot show them, and both to rebuild the same start
// state.
func held(t *testing.T, data []byte, name string, full *snapshot.Snapshot) {
	t.Helper()
	for _, o := range []snapshot.ReadOptions{{}, {NoStacks: true}} {
		s, err := snapshot.ReadWith(bytes.NewReader(data), name, o)
		require.NoError(t, err)
		want := snapshot.Flat(full)
		if o.NoStacks {
			want = withoutStacks(full)
		}
		require.Equal(t, want.NumTraces(), s.NumTraces())
		for d, tr := range snapshot.Traces(want) {
			got := s.Trace(d)
			require.Equal(t, len(tr), got.Len(), "device %d", d)
			for i := range tr {
				require.Equal(t, tr[i], got.At(i), "device_traces[%d][%d]", d, i)
				require.Equal(t, tr[i].Action, got.Action(i), "device_traces[%d][%d]", d, i)
			}
			for _, a := range allActions {
				walk := slices.ContainsFunc(tr, func(e snapshot.TraceEntry) bool { return e.Action == a })
				require.Equal(t, walk, got.Has(a), "device %d: %q", d, a)
				require.Equal(t, walk, snapshot.TraceOf(tr).Has(a), "device %d: %q", d, a)
			}
			timed := !slices.ContainsFunc(tr, func(e snapshot.TraceEntry) bool { return e.TimeUS == snapshot.NoTime })
			cats := slices.ContainsFunc(tr, func(e snapshot.TraceEntry) bool { return e.Category != "" })
			require.Equal(t, timed, got.Timed(), "device %d", d)
			require.Equal(t, cats, got.Categorized(), "device %d", d)
			require.Equal(t, timed, snapshot.TraceOf(tr).Timed(), "device %d", d)
			require.Equal(t, cats, snapshot.TraceOf(tr).Categorized(), "device %d", d)
		}
		assert.Equal(t, want.Devices(), s.Devices())
		for _, dev := range want.Devices() {
			wst, werr := want.InitialState(dev)
			gst, gerr := s.InitialState(dev)
			require.Equal(t, werr, gerr)
			require.Equal(t, wst, gst, "device %d", dev)
		}
		require.Equal(t, want, snapshot.Flat(s))
	}
}

// allActions are the actions that Trace.Has is asked about: PyTorch's,
// none, and one it does not write.
var allActions = []snapshot.Action{snapshot.Alloc, snapshot.FreeRequested, snapshot.FreeCompleted, snapshot.SegmentAlloc,
	snapshot.SegmentFree, snapshot.SegmentMap, snapshot.SegmentUnmap, snapshot.TakeSnapshot, snapshot.OutOfMemory, "", "workspace"}

func TestTraceOf(t *testing.T) {
	es := []snapshot.TraceEntry{{Action: snapshot.Alloc, Addr: 1, Size: 2}, {Action: snapshot.FreeCompleted, Addr: 1, Size: 2}}
	tr := snapshot.TraceOf(es)
	require.Equal(t, 2, tr.Len())
	assert.Equal(t, es[1], tr.At(1))
	assert.Equal(t, snapshot.FreeCompleted, tr.Action(1))
	got := tr.Entries()
	assert.Equal(t, es, got)
	got[0].Addr = 9
	assert.Equal(t, uint64(1), es[0].Addr, "Entries copies")
	var all []snapshot.TraceEntry
	for i, e := range tr.All() {
		require.Equal(t, len(all), i)
		all = append(all, e)
		if i == 0 {
			break
		}
	}
	assert.Equal(t, es[:1], all, "All stops when told")
	var zero snapshot.Trace
	assert.Zero(t, zero.Len())
	assert.Empty(t, zero.Entries())
	s := snapshot.New(nil, nil, es)
	assert.Equal(t, 2, s.NumTraces())
	assert.Equal(t, es, s.Trace(1).Entries())
	assert.Zero(t, s.Trace(2).Len())
	assert.Zero(t, s.Trace(-1).Len())
}

// A device's trace longer than the replays can index is refused, naming
// the first entry past the limit.
func TestReadRefusesTraceTooLong(t *testing.T) {
	data := snap(pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("free_completed", a0, 5, 0, 2), pk.Entry("alloc", a0, 5, 0, 3))
	_, err := snapshot.Read(bytes.NewReader(data), "long.pickle")
	require.NoError(t, err)
	_, err = snapshot.ReadWith(bytes.NewReader(data), "long.pickle", snapshot.MaxTrace(snapshot.ReadOptions{}, 2))
	require.Error(t, err)
	assert.Equal(t, "long.pickle: device_traces[0][2]: more than 2 entries in a device's trace, the most this reader takes", err.Error())
}

// A trace that the file lists twice, through the memo, has the actions of
// its entries in both places.
func TestTraceHasRepeated(t *testing.T) {
	str := func(s string) []byte { return append([]byte{'X', byte(len(s)), 0, 0, 0}, s...) }
	b := []byte{0x80, 2, '}', '('}
	b = append(append(b, str("segments")...), ']')
	b = append(append(b, str("device_traces")...), ']', '(', ']', 'q', 0, '(', '}', '(')
	b = append(append(append(b, str("action")...), str("oom")...), str("size")...)
	b = append(append(b, 'K', 5), str("device_free")...)
	b = append(b, 'K', 7, 'u', 'e', 'h', 0, 'e', 'u', '.')
	s, err := snapshot.Read(bytes.NewReader(b), "twice.pickle")
	require.NoError(t, err)
	require.Equal(t, 2, s.NumTraces())
	for d := range 2 {
		require.Equal(t, 1, s.Trace(d).Len())
		assert.True(t, s.Trace(d).Has(snapshot.OutOfMemory), "device %d", d)
		assert.False(t, s.Trace(d).Has(snapshot.Alloc), "device %d", d)
	}
}

// A trace of more actions than a read notes is walked.
func TestTraceHasMany(t *testing.T) {
	var es []any
	for i := range 20 {
		es = append(es, pk.Entry(fmt.Sprintf("x%d", i), a0, 5, 0, int64(i)))
	}
	es = append(es, pk.Entry("alloc", a0, 5, 0, 20))
	s, err := snapshot.Read(bytes.NewReader(snap(es...)), "many.pickle")
	require.NoError(t, err)
	tr := s.Trace(0)
	assert.True(t, tr.Has(snapshot.Alloc))
	assert.True(t, tr.Has("x3"))
	assert.False(t, tr.Has("x20"))
	assert.False(t, tr.Has(snapshot.OutOfMemory))
}

// A read notes whether each trace's entries all have a time and whether
// one records a category, entry by entry: one without either is enough.
func TestTraceTimedCategorized(t *testing.T) {
	cat := append(pk.Entry("alloc", a0, 5, 0, 3), pk.KV{K: "category", V: "activation"})
	empty := append(pk.Entry("alloc", a0, 5, 0, 3), pk.KV{K: "category", V: ""})
	for _, tc := range []struct {
		name        string
		entries     []any
		timed, cats bool
	}{
		{"timed", []any{pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("free_completed", a0, 5, 0, 2)}, true, false},
		{"one untimed", []any{pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("free_completed", a0, 5, 0, -1), pk.Entry("alloc", a0, 5, 0, 3)}, false, false},
		{"one category", []any{pk.Entry("alloc", a0, 5, 0, 1), cat, pk.Entry("free_completed", a0, 5, 0, 4)}, true, true},
		{"empty category", []any{empty}, true, false},
		{"none", nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := snapshot.Read(bytes.NewReader(snap(tc.entries...)), "t.pickle")
			require.NoError(t, err)
			assert.Equal(t, tc.timed, s.Trace(0).Timed())
			assert.Equal(t, tc.cats, s.Trace(0).Categorized())
			es := s.Trace(0).Entries()
			assert.Equal(t, tc.timed, snapshot.TraceOf(es).Timed())
			assert.Equal(t, tc.cats, snapshot.TraceOf(es).Categorized())
		})
	}
}
