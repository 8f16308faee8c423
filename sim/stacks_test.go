package sim_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/internal/viewercheck"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// exportStacks replays the PyTorch snapshot in data, read with its stacks,
// with spec, keeping the last entries (all for 0), and returns the
// export's bytes, streamed through a spill file as simulate --snapshot
// writes it, and through Config.Snapshot; they are the same.
func exportStacks(t *testing.T, data []byte, spec string, entries int) []byte {
	t.Helper()
	open := func() traces.Reader {
		r, err := traces.NewReader(bytes.NewReader(data), "in.pickle", traces.Options{Stacks: true})
		require.NoError(t, err)
		return r
	}
	var streamed bytes.Buffer
	_, err := sim.Replay(open(), sim.Config{Params: params(t, spec), Capacity: 1 << 45, SeriesBuckets: -1,
		SnapshotEntries: entries, SnapshotTemp: t.TempDir(),
		SnapshotStream: func(x *snapshot.Stream) error { return snapshot.WriteStream(&streamed, x, snapshot.WriteOptions{}) }})
	require.NoError(t, err)
	var s *snapshot.Snapshot
	_, err = sim.Replay(open(), sim.Config{Params: params(t, spec), Capacity: 1 << 45, SeriesBuckets: -1, SnapshotEntries: entries,
		Snapshot: func(x *snapshot.Snapshot) error { s = x; return nil }})
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, snapshot.Write(&b, s, snapshot.WriteOptions{}))
	require.Equal(t, b.Bytes(), streamed.Bytes())
	require.NoError(t, viewercheck.Check(b.Bytes(), viewercheck.Options{}))
	return b.Bytes()
}

// checkStacks holds the export out to the input in: each alloc entry of a
// device has the frames of the input's alloc of the same place among the
// device's allocations (the export's allocs are the last ones of the
// input's, a window or a start state leaving out the first), its frees
// the frames of its alloc, and each live block of the segments the
// frames of the alloc that made it. It returns the allocs with frames.
func checkStacks(t *testing.T, in, out []byte) int {
	t.Helper()
	r, err := traces.NewReader(bytes.NewReader(in), "in.pickle", traces.Options{Stacks: true})
	require.NoError(t, err)
	frames, stacks := traces.StacksOf(r)
	src := &snapshot.Snapshot{Frames: frames, Stacks: stacks}
	type alloc struct {
		size   int64
		frames []snapshot.Frame
	}
	var want [][]alloc // by device
	for r.Scan() {
		ev := r.Event()
		if ev.Op != traces.OpAlloc {
			continue
		}
		for len(want) <= int(ev.Device) {
			want = append(want, nil)
		}
		want[ev.Device] = append(want[ev.Device], alloc{ev.Size, src.StackFrames(snapshot.StackID(ev.Stack))})
	}
	require.NoError(t, r.Err())

	back, err := snapshot.Read(bytes.NewReader(out), "out.pickle")
	require.NoError(t, err)
	withFrames := 0
	last := map[[2]uint64][]snapshot.Frame{} // the frames of the last alloc at device, address
	for d := range back.NumTraces() {
		tr := back.Trace(d)
		var allocs []snapshot.TraceEntry
		for i := range tr.Len() {
			if e := tr.At(i); e.Action == snapshot.Alloc {
				allocs = append(allocs, e)
			}
		}
		var w []alloc
		if d < len(want) {
			w = want[d]
		}
		require.LessOrEqual(t, len(allocs), len(w), "device %d", d)
		w = w[len(w)-len(allocs):]
		for k, e := range allocs {
			require.Equal(t, w[k].size, e.Size, "device %d, alloc %d", d, k)
			require.Equal(t, w[k].frames, back.StackFrames(e.Stack), "device %d, alloc %d", d, k)
			if len(w[k].frames) > 0 {
				withFrames++
			}
		}
		for i := range tr.Len() {
			e := tr.At(i)
			key := [2]uint64{uint64(d), e.Addr}
			switch e.Action {
			case snapshot.Alloc:
				last[key] = back.StackFrames(e.Stack)
			case snapshot.FreeRequested, snapshot.FreeCompleted:
				if f, ok := last[key]; ok {
					require.Equal(t, f, back.StackFrames(e.Stack), "device %d, entry %d", d, i)
				}
			}
		}
	}
	for _, sg := range back.Segments {
		for _, b := range sg.Blocks {
			if b.State != snapshot.ActiveAllocated {
				assert.Zero(t, b.Stack)
				continue
			}
			assert.Positive(t, b.RequestedSize)
			if f, ok := last[[2]uint64{uint64(sg.Device), b.Address}]; ok {
				require.Equal(t, f, back.StackFrames(b.Stack), "block at %#x", b.Address)
			}
		}
	}
	return withFrames
}

func TestSnapshotKeepsStacksShared(t *testing.T) {
	for _, name := range []string{"small_train_step.pickle", "compile_usermeta.pickle"} {
		t.Run(name, func(t *testing.T) {
			path := pk.SharedSnapshot(t, "../../shared/traces/pytorch", name)
			in, err := os.ReadFile(path)
			require.NoError(t, err)
			for _, entries := range []int{0, 40} {
				out := exportStacks(t, in, "pytorch", entries)
				assert.Positive(t, checkStacks(t, in, out), "%d entries", entries)
			}
		})
	}
}

// genStacks returns a snapshot of n allocations and their frees, each made
// at one of a few stacks of deep frames, the last few still live, with no
// segments: a trace that starts from an empty allocator.
func genStacks(n int) []byte {
	s := &snapshot.Snapshot{Stacks: [][]int32{nil}}
	for i := range 40 {
		s.Frames = append(s.Frames, snapshot.Frame{Name: "fn" + string(rune('a'+i%26)), Filename: "model/layer.py", Line: int64(10 + i)})
	}
	for k := range 5 {
		st := make([]int32, 20+k)
		for i := range st {
			st[i] = int32((i*7 + k) % len(s.Frames))
		}
		s.Stacks = append(s.Stacks, st)
	}
	var tr []snapshot.TraceEntry
	const base = 0x7f0000000000
	for i := range n {
		addr := uint64(base + i*(1<<20))
		st := snapshot.StackID(1 + i%5)
		size := int64(512 * (1 + i%7))
		tr = append(tr, snapshot.TraceEntry{Action: snapshot.Alloc, Addr: addr, Size: size, TimeUS: int64(2 * i), Stack: st})
		if i < n-4 {
			for _, a := range []snapshot.Action{snapshot.FreeRequested, snapshot.FreeCompleted} {
				tr = append(tr, snapshot.TraceEntry{Action: a, Addr: addr, Size: size, TimeUS: int64(2*i + 1), Stack: st})
			}
		}
	}
	s.SetTraces(tr)
	var b bytes.Buffer
	if err := snapshot.Write(&b, s, snapshot.WriteOptions{}); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func TestSnapshotKeepsStacksGenerated(t *testing.T) {
	in := genStacks(2000)
	for _, spec := range []string{"pytorch", "pytorch:expandable_segments=true"} {
		out := exportStacks(t, in, spec, 0)
		require.NoError(t, viewercheck.Check(out, viewercheck.Options{Complete: true}), spec)
		assert.Equal(t, 2000, checkStacks(t, in, out), spec)
		// The frames are written once, and each entry refers to its
		// stack through the memo: a few bytes an entry, not a stack's.
		back, err := snapshot.Read(bytes.NewReader(out), "out.pickle")
		require.NoError(t, err)
		assert.Len(t, back.Stacks, 6, spec)
		assert.Less(t, len(out), 6000*40, "%s: %d bytes", spec, len(out))
	}
	// Without stacks in the reader, the export has none.
	r, err := traces.NewReader(bytes.NewReader(in), "in.pickle", traces.Options{})
	require.NoError(t, err)
	var s *snapshot.Snapshot
	_, err = sim.Replay(r, sim.Config{Params: params(t, "pytorch"), SeriesBuckets: -1, Snapshot: func(x *snapshot.Snapshot) error { s = x; return nil }})
	require.NoError(t, err)
	for _, e := range s.Trace(0).All() {
		require.Zero(t, e.Stack)
	}
}
