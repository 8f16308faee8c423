package traces

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
)

// snapshotDir holds real PyTorch snapshots, outside the repository.
const snapshotDir = "../../shared/traces/pytorch"

// replaySnap replays a reader, checking that its events are consistent,
// and returns them with the peak of live requested bytes.
func replaySnap(t testing.TB, r Reader) ([]Event, int64) {
	t.Helper()
	evs, err := scanAll(t, r)
	require.NoError(t, err)
	var sum, peak int64
	for _, ev := range evs {
		if ev.Op == OpAlloc {
			sum += ev.Size
		} else {
			sum -= ev.Size
		}
		peak = max(peak, sum)
	}
	return evs, peak
}

// expectedPeak computes, from the raw decoded pickle, the number of events
// and the peak of live requested bytes: a block is live at the start if the
// first trace entry about its address is a free_completed (with that
// entry's size), or if the trace never mentions it and it is live in the
// segments; then the trace's allocs and free_completeds follow, an oom is
// an alloc of its size and its free at once, and each of the program's
// releases of the cache (see releases) is one event that frees no block.
func expectedPeak(t *testing.T, data []byte) (events, initial int, peak int64) {
	v, err := decodeRawPickle(data)
	require.NoError(t, err)
	top := v.(map[any]any)
	num := func(x any) int64 {
		switch n := x.(type) {
		case int64:
			return n
		case interface{ Int64() int64 }:
			return n.Int64()
		}
		t.Fatalf("not a number: %T", x)
		return 0
	}
	type key struct{ dev, addr int64 }
	first := map[key]string{}
	firstSize := map[key]int64{}
	var sum int64
	traces, _ := top["device_traces"].([]any)
	for dev, tr := range traces {
		events += releases(tr.([]any))
		for _, e := range tr.([]any) {
			m := e.(map[any]any)
			act := m["action"].(string)
			if act == "oom" {
				events += 2
			}
			if act != "alloc" && act != "free_completed" {
				continue
			}
			events++
			k := key{int64(dev), num(m["addr"])}
			if _, ok := first[k]; !ok {
				first[k], firstSize[k] = act, num(m["size"])
				if act == "free_completed" {
					sum += num(m["size"])
					initial++
				}
			}
		}
	}
	for _, s := range top["segments"].([]any) {
		seg := s.(map[any]any)
		for _, b := range seg["blocks"].([]any) {
			blk := b.(map[any]any)
			st := blk["state"].(string)
			if st != "active_allocated" && st != "active_pending_free" {
				continue
			}
			if _, seen := first[key{num(seg["device"]), num(blk["address"])}]; seen {
				continue
			}
			size := num(blk["size"])
			if rs, ok := blk["requested_size"]; ok {
				size = num(rs)
			}
			sum += size
			initial++
		}
	}
	peak = sum
	for _, tr := range traces {
		for _, e := range tr.([]any) {
			m := e.(map[any]any)
			switch m["action"].(string) {
			case "alloc":
				sum += num(m["size"])
			case "free_completed":
				sum -= num(m["size"])
			case "oom":
				peak = max(peak, sum+num(m["size"]))
			}
			peak = max(peak, sum)
		}
	}
	return events + initial, initial, peak
}

// releases counts the releases of the cache that a device's raw trace
// entries record: PyTorch (and torch_npu) write no entry of their own for
// empty_cache, but a segment_free (segment_unmap for an expandable
// segment) per segment it gives back. A run of such entries whose frames
// pass through empty_cache (Python's in a memory.py, or C++'s
// ::emptyCache) is one release; a run whose frames do not say so is the
// allocator's own, made to find room for a malloc, when the entry after
// it is the segment_alloc, segment_map or oom of that malloc, and is one
// release otherwise.
func releases(entries []any) int {
	action := func(i int) string { return entries[i].(map[any]any)["action"].(string) }
	released := func(i int) bool {
		a := action(i)
		return a == "segment_free" || a == "segment_unmap"
	}
	emptyCache := func(i int) bool {
		frames, _ := entries[i].(map[any]any)["frames"].([]any)
		for _, f := range frames {
			fr, _ := f.(map[any]any)
			name, _ := fr["name"].(string)
			file, _ := fr["filename"].(string)
			if name == "empty_cache" && strings.HasSuffix(file, "memory.py") || strings.Contains(name, "::emptyCache(") {
				return true
			}
		}
		return false
	}
	n := 0
	for i := 0; i < len(entries); {
		if !released(i) {
			i++
			continue
		}
		ec := emptyCache(i)
		j := i + 1
		for j < len(entries) && released(j) && emptyCache(j) == ec {
			j++
		}
		if ec || j == len(entries) {
			n++
		} else if a := action(j); a != "segment_alloc" && a != "segment_map" && a != "oom" {
			n++
		}
		i = j
	}
	return n
}

func TestSnapshotShared(t *testing.T) {
	pk.ForEachShared(t, snapshotDir, func(t *testing.T, name string, data []byte) {
		r, err := newSnapshotReader(bytes.NewReader(data), name, Options{})
		require.NoError(t, err)
		evs, peak := replaySnap(t, r)
		wantEvents, wantInitial, wantPeak := expectedPeak(t, data)
		require.Equal(t, wantInitial, r.Start().Initial)
		require.Len(t, evs, wantEvents)
		require.Equal(t, wantPeak, peak)
		t.Logf("%s: %d events, %d live at start, peak live requested %d bytes", name, len(evs), r.Start().Initial, peak)
		if name == "segments_only.pickle" {
			require.Equal(t, len(evs), r.Start().Initial)
			for _, ev := range evs {
				require.Equal(t, OpAlloc, ev.Op)
			}
		}

		// Converted to the native format and read back, the events are the same.
		var buf bytes.Buffer
		w := NewWriter(&buf, r.Columns()...)
		for _, ev := range evs {
			require.NoError(t, w.Write(ev))
		}
		require.NoError(t, w.Flush())
		cr, err := NewReader(&buf, "converted.csv", Options{})
		require.NoError(t, err)
		back, _ := replaySnap(t, cr)
		require.Equal(t, evs, back)
	})
}

// pkPickle encodes v with the given protocol, as one frame for 4 and above.
func pkPickle(v any, proto int, memo bool) []byte {
	return pk.Encode(v, pk.Options{Proto: proto, Memo: memo})
}

const (
	a0 = pk.A0
	a1 = pk.A1
	a2 = pk.A2
	a3 = pk.A3
)

func TestSnapshotSmall(t *testing.T) {
	id := func(a uint64) uint64 { k, _ := idKeyOf(hexAddr(a)); return k }
	// a0 and a3 are live at the start, with the time of the first entry.
	want := []Event{
		{Op: OpAlloc, ID: id(a0), Slot: 0, Device: 0, Size: 1000, Stream: 7, TimeUS: 10},
		{Op: OpAlloc, ID: id(a3), Slot: 1, Device: 1, Size: 4000, Stream: 9, TimeUS: 10},
		{Op: OpAlloc, ID: id(a1), Slot: 2, Device: 0, Size: 2000, Stream: 7, TimeUS: 10},
		{Op: OpFree, ID: id(a0), Slot: 0, Device: 0, Size: 1000, Stream: 7, TimeUS: 12},
		// The oom entry: the request PyTorch failed, given back at once.
		{Op: OpAlloc, ID: idTokenTag, Slot: 0, Device: 0, Size: 1 << 40, Stream: 7, TimeUS: 13},
		{Op: OpFree, ID: idTokenTag, Slot: 0, Device: 0, Size: 1 << 40, Stream: 7, TimeUS: 13},
		{Op: OpAlloc, ID: id(a3 + 0x1000), Slot: 0, Device: 1, Size: 500, Stream: 9, TimeUS: 15},
		{Op: OpFree, ID: id(a1), Slot: 2, Device: 0, Size: 2000, Stream: 7, TimeUS: 20},
		{Op: OpFree, ID: id(a3 + 0x1000), Slot: 0, Device: 1, Size: 500, Stream: 9, TimeUS: 25},
		{Op: OpAlloc, ID: id(a2), Slot: 0, Device: 0, Size: 3000, Stream: 5, TimeUS: 31},
		// segment_unmap, then segment_free after the snapshot entry: each
		// followed by no allocation of its own, two cache releases.
		{Op: OpRelease, Device: 0, TimeUS: 33},
		{Op: OpRelease, Device: 0, TimeUS: 35},
	}
	for _, proto := range []int{2, 4, 5} {
		for _, memo := range []bool{false, true} {
			data := pkPickle(pk.TwoDevices(true), proto, memo)
			if memo {
				require.Equal(t, 1, strings.Count(string(data), "free_completed"), "no memo reference written")
			}
			r, err := newSnapshotReader(bytes.NewReader(data), "t.pickle", Options{})
			require.NoError(t, err, "protocol %d, memo %v", proto, memo)
			evs, peak := replaySnap(t, r)
			require.Equal(t, want, evs, "protocol %d, memo %v", proto, memo)
			require.Equal(t, int64(4000+2000+1<<40), peak)
			require.Equal(t, 2, r.Start().Initial)
			require.Equal(t, int64(1), r.AllocFailures())
			// The trace does not fit the segments (a segment_alloc inside
			// one): the oom tells no memory.
			require.Zero(t, r.DeviceCapacity(0))
			require.Zero(t, r.DeviceCapacity(1))
			require.Equal(t, []Column{ColOp, ColID, ColSize, ColStream, ColDevice, ColTime}, r.Columns())
		}
	}
}

func TestSnapshotOld(t *testing.T) {
	// No time_us, no allocator_settings, every integer as LONG1: devices
	// are concatenated in order.
	data := pk.Encode(pk.TwoDevices(false), pk.Options{Proto: 2, AllLong: true})
	r, err := newSnapshotReader(bytes.NewReader(data), "old.pickle", Options{})
	require.NoError(t, err)
	evs, peak := replaySnap(t, r)
	require.Equal(t, []Column{ColOp, ColID, ColSize, ColStream, ColDevice}, r.Columns())
	var ops []string
	for _, ev := range evs {
		require.Equal(t, NoTime, ev.TimeUS)
		ops = append(ops, ev.Op.String()+" "+formatID(ev.ID)+" "+string(rune('0'+ev.Device)))
	}
	require.Equal(t, []string{
		"alloc 0x7f3a00000000 0", "alloc 0x7f3a00600000 1", // live at the start
		"alloc 0x7f3a00200000 0", "free 0x7f3a00000000 0", "alloc t0 0", "free t0 0", "free 0x7f3a00200000 0", "alloc 0x7f3a00400000 0",
		"release 0 0", "release 0 0",
		"alloc 0x7f3a00601000 1", "free 0x7f3a00601000 1",
	}, ops)
	require.Equal(t, int64(4000+2000+1<<40), peak)
}

// snap builds a snapshot of device 0 from trace entries, with no segments.
func pkSnap(entries ...any) []byte {
	return pkPickle(pk.Snapshot(nil, [][]any{entries}, nil), 4, true)
}

func TestSnapshotErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, msg string
		notMine       bool
	}{
		{"empty", "", "not a PyTorch snapshot", true},
		{"csv", "op,id,size\nalloc,1,5\n", "not a PyTorch snapshot", true},
		{"list", string(pkPickle([]any{1, 2}, 4, false)), "the pickle holds a list, not a dict", true},
		{"dict", string(pkPickle(pk.Dict{{K: "a", V: 1}}, 4, false)), "no segments list", true},
		{"truncated", string(pkSnap(pk.Entry("alloc", a0, 5, 0, 1)))[:40], "bad pickle", true},
		{"double free", string(pkSnap(pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("free_completed", a0, 5, 0, 2), pk.Entry("free_completed", a0, 5, 0, 3))),
			"x.pickle: device_traces[0][2]: free_completed of 0x7f3a00000000 never allocated", false},
		{"double alloc", string(pkSnap(pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("alloc", a0, 5, 0, 2))),
			"x.pickle: device_traces[0][1]: alloc of 0x7f3a00000000 that is already live", false},
		{"bad size", string(pkSnap(pk.Dict{{K: "action", V: "alloc"}, {K: "addr", V: a0}, {K: "size", V: "big"}})),
			"x.pickle: device_traces[0][0].size: not an integer but a string", false},
		{"bad traces", string(pkPickle(pk.Dict{{K: "segments", V: []any{}}, {K: "device_traces", V: 3}}, 4, false)),
			"x.pickle: device_traces: not a list", false},
		{"huge address", string(pkSnap(pk.Entry("alloc", 1<<63, 5, 0, 1))),
			"x.pickle: device_traces[0][0]: address 0x8000000000000000 too large for an id", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := newSnapshotReader(strings.NewReader(tc.in), "x.pickle", Options{})
			if err == nil {
				drainSnap(r)
				err = r.Err()
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.msg)
			require.NotContains(t, err.Error(), "\n")
			require.True(t, strings.HasPrefix(err.Error(), "x.pickle: "), err.Error())
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.notMine, errors.Is(err, ErrNotTrace))
		})
	}
}

func drainSnap(r Reader) int {
	n := 0
	for r.Scan() {
		n++
	}
	return n
}

func TestSnapshotLenient(t *testing.T) {
	data := pkSnap(pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("free_completed", a0, 5, 0, 2),
		pk.Entry("free_completed", a0, 5, 0, 3), pk.Entry("alloc", a1, 6, 0, 4))
	r, err := newSnapshotReader(bytes.NewReader(data), "x.pickle", Options{Lenient: true})
	require.NoError(t, err)
	evs, _ := replaySnap(t, r)
	require.Len(t, evs, 3)
	require.Equal(t, int64(1), r.Skipped())
	require.ErrorContains(t, r.FirstSkipped(), "device_traces[0][2]")
}

func TestSnapshotDetected(t *testing.T) {
	r, err := NewReader(bytes.NewReader(pkPickle(pk.TwoDevices(true), 4, true)), "t.pickle", Options{})
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, "PyTorch snapshot", r.Format())
	assert.True(t, r.MidRun(), "a snapshot is a window of a running program")
	evs, _ := replaySnap(t, r)
	require.Len(t, evs, 12)
}

// TestSnapshotCacheRelease checks which runs of segment_free entries are
// cache releases (torch.cuda.empty_cache) and which belong to a malloc
// that made room for itself.
func TestSnapshotCacheRelease(t *testing.T) {
	const seg = 2 << 20
	for _, tc := range []struct {
		name    string
		entries []any
		ops     []string
	}{
		{"empty_cache", []any{pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("segment_free", a1, seg, 0, 2), pk.Entry("segment_free", a2, seg, 0, 3), pk.Entry("free_completed", a0, 5, 0, 4)},
			[]string{"alloc", "release", "free"}},
		{"at the end", []any{pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("segment_free", a1, seg, 0, 2)},
			[]string{"alloc", "release"}},
		{"then a cached block", []any{pk.Entry("segment_free", a1, seg, 0, 2), pk.Entry("alloc", a0, 5, 0, 3)},
			[]string{"release", "alloc"}},
		{"malloc's retry", []any{pk.Entry("segment_free", a1, seg, 0, 2), pk.Entry("segment_alloc", a2, seg, 0, 3), pk.Entry("alloc", a2, 5, 0, 3)},
			[]string{"alloc"}},
		{"malloc's oom", []any{pk.Entry("segment_free", a1, seg, 0, 2), pk.Entry("oom", 0, 1<<40, 0, 3)},
			[]string{"alloc", "free"}}, // the failed request
	} {
		r, err := newSnapshotReader(bytes.NewReader(pkSnap(tc.entries...)), "t.pickle", Options{})
		require.NoError(t, err, tc.name)
		evs, _ := replaySnap(t, r)
		var ops []string
		for _, ev := range evs {
			ops = append(ops, ev.Op.String())
		}
		assert.Equal(t, tc.ops, ops, tc.name)
	}
}

// FuzzSnapshot checks that no input makes the snapshot reader panic, that
// every error is a *ParseError, and that the events are consistent. It is
// seeded with the shared snapshots, when present, and the test's pickles.
// FuzzSnapshot is seeded with small snapshots built here: the real ones
// of the shared fixtures (up to 1 MB) make each mutation so slow that the
// fuzzer barely runs.
func FuzzSnapshot(f *testing.F) {
	for _, proto := range []int{2, 4, 5} {
		f.Add(pkPickle(pk.TwoDevices(true), proto, true))
		f.Add(pkPickle(pk.TwoDevices(false), proto, false))
	}
	f.Add(pkSnap(pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("free_completed", a0, 5, 0, 2), pk.Entry("free_completed", a0, 5, 0, 3)))
	f.Add(pkPickle(categorized("activation"), 4, true))
	f.Add(pkPickle(categorized("weights"), 4, true))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := newSnapshotReader(bytes.NewReader(data), "f.pickle", Options{})
		if err != nil {
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			return
		}
		live := map[uint64]int64{}
		for r.Scan() {
			ev := r.Event()
			if ev.Op == OpAlloc {
				require.NotContains(t, live, ev.ID)
				require.Positive(t, ev.Size)
				live[ev.ID] = ev.Size
			} else {
				require.Equal(t, live[ev.ID], ev.Size)
				delete(live, ev.ID)
			}
		}
		if err := r.Err(); err != nil {
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
		}
	})
}

// withCategory returns the entry or block d with a category key.
func withCategory(d any, name string) pk.Dict {
	return append(d.(pk.Dict), pk.KV{K: "category", V: name})
}

// categorized returns TwoDevices with categories on some entries and
// blocks: A0, live before the trace, has one on its free_completed; A3, live
// throughout, on its block; A1 and device 1's block on their entries; A2
// none.
func categorized(freeA1 string) pk.Dict {
	d := pk.TwoDevices(true)
	segs := d[0].V.([]any)
	seg1 := segs[1].(pk.Dict)
	for i, kv := range seg1 {
		if kv.K == "blocks" {
			blocks := kv.V.([]any)
			blocks[0] = withCategory(blocks[0], "optimizer_state")
			seg1[i].V = blocks
		}
	}
	dt := d[1].V.([]any)
	dev0, dev1 := dt[0].([]any), dt[1].([]any)
	dev0[0] = withCategory(dev0[0], "activation") // alloc A1
	dev0[2] = withCategory(dev0[2], "parameter")  // free_completed A0
	if freeA1 != "" {
		dev0[4] = withCategory(dev0[4], freeA1) // free_completed A1
	}
	dev1[0] = withCategory(dev1[0], "temporary")
	return d
}

func TestSnapshotCategories(t *testing.T) {
	r, err := newSnapshotReader(bytes.NewReader(pkPickle(categorized("activation"), 4, true)), "t.pickle", Options{})
	require.NoError(t, err)
	evs, _ := replaySnap(t, r)
	require.Equal(t, []Column{ColOp, ColID, ColSize, ColStream, ColDevice, ColTime, ColCategory}, r.Columns())
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Op.String()+" "+formatID(ev.ID)+" "+ev.Category.String())
	}
	require.Equal(t, []string{
		"alloc 0x7f3a00000000 parameter", "alloc 0x7f3a00600000 optimizer_state", // live at the start
		"alloc 0x7f3a00200000 activation", "free 0x7f3a00000000 parameter", "alloc t0 unknown", "free t0 unknown",
		"alloc 0x7f3a00601000 temporary", "free 0x7f3a00200000 activation", "free 0x7f3a00601000 temporary",
		"alloc 0x7f3a00400000 unknown", "release 0 unknown", "release 0 unknown",
	}, got)

	for _, tc := range []struct{ freeA1, msg string }{
		{"weights", `t.pickle: device_traces[0][4]: unknown category "weights" (known: parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail, unknown)`},
		{"gradient", `t.pickle: device_traces[0][4]: free_completed of 0x7f3a00200000 with category gradient, allocated with category activation`},
	} {
		r, err := newSnapshotReader(bytes.NewReader(pkPickle(categorized(tc.freeA1), 4, true)), "t.pickle", Options{})
		require.NoError(t, err)
		_, err = scanAll(t, r)
		require.EqualError(t, err, tc.msg)
	}
}

// oomSnapshot is a snapshot of one device whose trace records an oom: with
// a 2 MiB segment held, 1 MiB was free and 3 MiB were asked for.
func oomSnapshot() []byte {
	return pkPickle(pk.Snapshot([]any{pk.Segment(0, a0, 0, "small", pk.Block(a0, 512, 500, "active_allocated"), pk.Block(a0+512, 2<<20-512, 0, "inactive"))},
		[][]any{{pk.Entry("segment_alloc", a0, 2<<20, 0, 1), pk.Entry("alloc", a0, 500, 0, 1),
			pk.Dict{{K: "action", V: "oom"}, {K: "device_free", V: 1 << 20}, {K: "size", V: 3 << 20}, {K: "stream", V: 0}, {K: "time_us", V: 2}}}}, nil), 4, true)
}

func TestSnapshotOOM(t *testing.T) {
	r, err := newSnapshotReader(bytes.NewReader(oomSnapshot()), "oom.pickle", Options{})
	require.NoError(t, err)
	evs, peak := replaySnap(t, r)
	require.Equal(t, []Event{
		{Op: OpAlloc, ID: idHexTag | a0, Slot: 0, Size: 500, TimeUS: 1},
		{Op: OpAlloc, ID: idTokenTag, Slot: 1, Size: 3 << 20, TimeUS: 2},
		{Op: OpFree, ID: idTokenTag, Slot: 1, Size: 3 << 20, TimeUS: 2},
	}, evs)
	require.Equal(t, int64(500+3<<20), peak)
	require.Equal(t, int64(1), r.AllocFailures())
	require.Equal(t, int64(3<<20), r.DeviceCapacity(0), "1 MiB free and the 2 MiB segment")
}
