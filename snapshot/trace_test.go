package snapshot_test

import (
	"bytes"
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
