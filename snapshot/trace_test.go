package snapshot_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// compact requires a read of data with ReadOptions.Compact, with the
// stacks and without, to hold full's traces entry for entry behind
// Snapshot.Trace, and to be full once unpacked.
func compact(t *testing.T, data []byte, name string, full *snapshot.Snapshot) {
	t.Helper()
	for _, o := range []snapshot.ReadOptions{{Compact: true}, {Compact: true, NoStacks: true}} {
		s, err := snapshot.ReadWith(bytes.NewReader(data), name, o)
		require.NoError(t, err)
		want := full
		if o.NoStacks {
			want = withoutStacks(full)
		}
		if len(want.DeviceTraces) > 0 {
			assert.Nil(t, s.DeviceTraces, "a compact read leaves DeviceTraces to Unpack")
		}
		require.Equal(t, len(want.DeviceTraces), s.NumTraces())
		for d, tr := range want.DeviceTraces {
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
		s.Unpack()
		require.Equal(t, want, s)
		s.Unpack() // a second time changes nothing
		require.Equal(t, want, s)
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
	s := &snapshot.Snapshot{DeviceTraces: [][]snapshot.TraceEntry{nil, es}}
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
	defer snapshot.MaxTrace(2)()
	_, err = snapshot.Read(bytes.NewReader(data), "long.pickle")
	require.Error(t, err)
	assert.Equal(t, "long.pickle: device_traces[0][2]: more than 2 entries in a device's trace, the most this reader takes", err.Error())
}
