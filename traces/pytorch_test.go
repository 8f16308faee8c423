package traces

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ogórek "github.com/kisielk/og-rek"
	"github.com/stretchr/testify/require"
)

// snapshotDir holds real PyTorch snapshots, outside the repository.
const snapshotDir = "../../shared/traces/pytorch"

func sharedSnapshots(t testing.TB) []string {
	files, _ := filepath.Glob(filepath.Join(snapshotDir, "*.pickle"))
	if len(files) == 0 {
		t.Skipf("no PyTorch snapshots in %s (they are development fixtures, not part of the repository)", snapshotDir)
	}
	return files
}

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
// segments; then the trace's allocs and free_completeds follow.
func expectedPeak(t *testing.T, data []byte) (events, initial int, peak int64) {
	v, err := ogórek.NewDecoder(bytes.NewReader(data)).Decode()
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
		for _, e := range tr.([]any) {
			m := e.(map[any]any)
			act := m["action"].(string)
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
			}
			peak = max(peak, sum)
		}
	}
	return events + initial, initial, peak
}

func TestSnapshotShared(t *testing.T) {
	for _, file := range sharedSnapshots(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			r, err := newSnapshotReader(bytes.NewReader(data), filepath.Base(file), Options{})
			require.NoError(t, err)
			evs, peak := replaySnap(t, r)
			wantEvents, wantInitial, wantPeak := expectedPeak(t, data)
			require.Equal(t, wantInitial, r.Initial())
			require.Len(t, evs, wantEvents)
			require.Equal(t, wantPeak, peak)
			t.Logf("%s: %d events, %d live at start, peak live requested %d bytes", filepath.Base(file), len(evs), r.Initial(), peak)
			if filepath.Base(file) == "segments_only.pickle" {
				require.Equal(t, len(evs), r.Initial())
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
}

// A tiny pickle encoder, enough to write snapshots the way PyTorch's
// Python and C++ picklers do.

type pkKV struct {
	k string
	v any
}

type pkDict []pkKV // a pkDict, keys in order

type pkPickler struct {
	proto   int
	memo    bool // memoize strings and lists, and refer to repeats
	allLong bool // write every integer as LONG1
	buf     bytes.Buffer
	strs    map[string]int // memo index of strings
	n       int            // memo entries
}

func (p *pkPickler) memoize() {
	if !p.memo {
		return
	}
	if p.proto >= 4 {
		p.buf.WriteByte(0x94) // MEMOIZE
	} else {
		p.buf.WriteByte('q') // BINPUT
		p.buf.WriteByte(byte(p.n))
	}
	p.n++
}

func (p *pkPickler) value(v any) {
	b := &p.buf
	switch x := v.(type) {
	case nil:
		b.WriteByte('N')
	case bool:
		if x {
			b.WriteByte(0x88)
		} else {
			b.WriteByte(0x89)
		}
	case int:
		p.int(int64(x))
	case int64:
		p.int(x)
	case uint64:
		p.long1(x, false)
	case float64:
		b.WriteByte('G')
		binary.Write(b, binary.BigEndian, x)
	case string:
		if i, ok := p.strs[x]; ok && p.memo {
			b.WriteByte('h') // BINGET
			b.WriteByte(byte(i))
			return
		}
		if len(x) < 256 && p.proto >= 4 {
			b.WriteByte(0x8c)
			b.WriteByte(byte(len(x)))
		} else {
			b.WriteByte('X')
			binary.Write(b, binary.LittleEndian, uint32(len(x)))
		}
		b.WriteString(x)
		if p.memo && p.n < 256 {
			p.strs[x] = p.n
		}
		p.memoize()
	case []any:
		b.WriteByte(']')
		p.memoize()
		if len(x) > 0 {
			b.WriteByte('(')
			for _, e := range x {
				p.value(e)
			}
			b.WriteByte('e')
		}
	case [2]any:
		p.value(x[0])
		p.value(x[1])
		b.WriteByte(0x86) // TUPLE2
	case pkDict:
		b.WriteByte('}')
		p.memoize()
		if len(x) > 0 {
			b.WriteByte('(')
			for _, e := range x {
				p.value(e.k)
				p.value(e.v)
			}
			b.WriteByte('u')
		}
	default:
		panic("pkPickler: cannot encode a value of this type")
	}
}

func (p *pkPickler) int(x int64) {
	switch {
	case p.allLong || x < math.MinInt32 || x > math.MaxInt32:
		p.long1(uint64(x), x < 0)
	case x >= 0 && x < 256:
		p.buf.WriteByte('K')
		p.buf.WriteByte(byte(x))
	default:
		p.buf.WriteByte('J')
		binary.Write(&p.buf, binary.LittleEndian, int32(x))
	}
}

// long1 writes x (two's complement, negative if neg) as LONG1 with the
// fewest bytes, as Python does.
func (p *pkPickler) long1(x uint64, neg bool) {
	var bs []byte
	for v := x; ; v >>= 8 {
		bs = append(bs, byte(v))
		if neg && v>>8 == math.MaxUint64>>8 && bs[len(bs)-1]&0x80 != 0 {
			break
		}
		if !neg && v>>8 == 0 && bs[len(bs)-1]&0x80 == 0 {
			break
		}
		if len(bs) == 8 {
			if !neg && x>>63 != 0 {
				bs = append(bs, 0)
			}
			break
		}
	}
	p.buf.WriteByte(0x8a)
	p.buf.WriteByte(byte(len(bs)))
	p.buf.Write(bs)
}

// pickle encodes v with the given protocol, as one frame for 4 and above.
func pkPickle(v any, proto int, memo bool) []byte {
	p := &pkPickler{proto: proto, memo: memo, strs: map[string]int{}}
	p.value(v)
	p.buf.WriteByte('.')
	body := p.buf.Bytes()
	out := []byte{0x80, byte(proto)}
	if proto >= 4 {
		out = append(out, 0x95)
		out = binary.LittleEndian.AppendUint64(out, uint64(len(body)-1))
	}
	return append(out, body...)
}

func pkEntry(action string, addr uint64, size int64, stream int64, time int64) pkDict {
	d := pkDict{{"action", action}, {"addr", addr}, {"size", size}, {"stream", stream}}
	if time >= 0 {
		d = append(d, pkKV{"time_us", time})
	}
	return append(d, pkKV{"frames", []any{pkDict{{"filename", "x.py"}, {"line", 1}, {"name", "f"}}}})
}

func pkBlock(addr uint64, size, requested int64, state string) pkDict {
	return pkDict{{"address", addr}, {"size", size}, {"requested_size", requested}, {"state", state}, {"frames", []any{}}}
}

func pkSegment(dev int, addr uint64, stream int64, blocks ...any) pkDict {
	var total int64
	for _, b := range blocks {
		total += b.(pkDict)[1].v.(int64)
	}
	return pkDict{{"device", dev}, {"address", addr}, {"total_size", total}, {"allocated_size", int64(0)},
		{"active_size", int64(0)}, {"requested_size", int64(0)}, {"stream", stream}, {"segment_type", "large"},
		{"segment_pool_id", [2]any{0, 0}}, {"is_expandable", false}, {"frames", []any{}}, {"blocks", blocks}}
}

const (
	a0 uint64 = 0x7f3a00000000
	a1 uint64 = 0x7f3a00200000
	a2 uint64 = 0x7f3a00400000
	a3 uint64 = 0x7f3a00600000
)

// testSnapshot is a snapshot of two devices: on device 0 block a0 is live
// before the trace and freed in it, a1 is allocated and freed, a2 allocated
// in the trace and live at the end; device 1 has a block a3 live throughout.
func testSnapshot(withTime bool) pkDict {
	tm := func(t int64) int64 {
		if withTime {
			return t
		}
		return -1
	}
	seg0 := pkSegment(0, a0, 7, pkBlock(a0, int64(2<<20), 1000, "inactive"), pkBlock(a1, int64(2<<20), 2000, "inactive"),
		pkBlock(a2, int64(2<<20), 3000, "active_allocated"))
	seg1 := pkSegment(1, a3, 9, pkBlock(a3, int64(2<<20), 4000, "active_pending_free"))
	dev0 := []any{
		pkEntry("alloc", a1, 2000, 7, tm(10)),
		pkEntry("free_requested", a0, 1000, 7, tm(11)),
		pkEntry("free_completed", a0, 1000, 7, tm(12)),
		pkEntry("oom", 0, 1<<40, 7, tm(13)),
		pkEntry("free_completed", a1, 2000, 7, tm(20)),
		pkEntry("segment_alloc", a2, 2<<20, 5, tm(30)),
		pkEntry("alloc", a2, 3000, 5, tm(31)),
	}
	dev0[3].(pkDict)[1] = pkKV{"device_free", int64(123456)}
	dev1 := []any{
		pkEntry("alloc", a3+0x1000, 500, 9, tm(15)),
		pkEntry("free_completed", a3+0x1000, 500, 9, tm(25)),
	}
	d := pkDict{{"segments", []any{seg0, seg1}}, {"device_traces", []any{dev0, dev1}}}
	if withTime {
		d = append(d, pkKV{"allocator_settings", pkDict{{"PYTORCH_CUDA_ALLOC_CONF", ""}, {"max_split_size", int64(-1)}}},
			pkKV{"external_annotations", []any{}}, pkKV{"user_metadata", ""}, pkKV{"compile_context", pkDict{}})
	}
	return d
}

func TestSnapshotSmall(t *testing.T) {
	id := func(a uint64) uint64 { k, _ := idKeyOf(hexAddr(a)); return k }
	// a0 and a3 are live at the start, with the time of the first entry.
	want := []Event{
		{Op: OpAlloc, ID: id(a0), Slot: 0, Device: 0, Size: 1000, Stream: 7, TimeUS: 10},
		{Op: OpAlloc, ID: id(a3), Slot: 1, Device: 1, Size: 4000, Stream: 9, TimeUS: 10},
		{Op: OpAlloc, ID: id(a1), Slot: 2, Device: 0, Size: 2000, Stream: 7, TimeUS: 10},
		{Op: OpFree, ID: id(a0), Slot: 0, Device: 0, Size: 1000, Stream: 7, TimeUS: 12},
		{Op: OpAlloc, ID: id(a3 + 0x1000), Slot: 0, Device: 1, Size: 500, Stream: 9, TimeUS: 15},
		{Op: OpFree, ID: id(a1), Slot: 2, Device: 0, Size: 2000, Stream: 7, TimeUS: 20},
		{Op: OpFree, ID: id(a3 + 0x1000), Slot: 0, Device: 1, Size: 500, Stream: 9, TimeUS: 25},
		{Op: OpAlloc, ID: id(a2), Slot: 0, Device: 0, Size: 3000, Stream: 5, TimeUS: 31},
	}
	for _, proto := range []int{2, 4, 5} {
		for _, memo := range []bool{false, true} {
			data := pkPickle(testSnapshot(true), proto, memo)
			if memo {
				require.Equal(t, 1, strings.Count(string(data), "free_completed"), "no memo reference written")
			}
			r, err := newSnapshotReader(bytes.NewReader(data), "t.pickle", Options{})
			require.NoError(t, err, "protocol %d, memo %v", proto, memo)
			evs, peak := replaySnap(t, r)
			require.Equal(t, want, evs, "protocol %d, memo %v", proto, memo)
			require.Equal(t, int64(1000+4000+2000), peak)
			require.Equal(t, 2, r.Initial())
			require.Equal(t, []Column{ColOp, ColID, ColSize, ColStream, ColDevice, ColTime}, r.Columns())

			s := r.Snapshot()
			require.Len(t, s.Traces, 2)
			oom := s.Traces[0][3]
			require.Equal(t, TraceEntry{Action: "oom", Addr: 123456, Size: 1 << 40, Stream: 7, TimeUS: 13}, oom)
			require.Equal(t, TraceEntry{Action: "segment_alloc", Addr: a2, Size: 2 << 20, Stream: 5, TimeUS: 30}, s.Traces[0][5])
			require.Equal(t, map[string]any{"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": int64(-1)}, s.AllocatorSettings)
			require.Equal(t, SegmentBlock{Address: a3, Size: 2 << 20, RequestedSize: 4000, State: "active_pending_free"}, s.Segments[1].Blocks[0])
			require.Equal(t, uint64(9), s.Segments[1].Stream)
			require.Equal(t, 1, s.Segments[1].Device)
		}
	}
}

func TestSnapshotOld(t *testing.T) {
	// No time_us, no allocator_settings, every integer as LONG1: devices
	// are concatenated in order.
	p := &pkPickler{proto: 2, allLong: true, strs: map[string]int{}}
	p.value(testSnapshot(false))
	p.buf.WriteByte('.')
	data := append([]byte{0x80, 2}, p.buf.Bytes()...)
	r, err := newSnapshotReader(bytes.NewReader(data), "old.pickle", Options{})
	require.NoError(t, err)
	evs, peak := replaySnap(t, r)
	require.Nil(t, r.Snapshot().AllocatorSettings)
	require.Equal(t, []Column{ColOp, ColID, ColSize, ColStream, ColDevice}, r.Columns())
	var ops []string
	for _, ev := range evs {
		require.Equal(t, NoTime, ev.TimeUS)
		ops = append(ops, ev.Op.String()+" "+formatID(ev.ID)+" "+string(rune('0'+ev.Device)))
	}
	require.Equal(t, []string{
		"alloc 0x7f3a00000000 0", "alloc 0x7f3a00600000 1", // live at the start
		"alloc 0x7f3a00200000 0", "free 0x7f3a00000000 0", "free 0x7f3a00200000 0", "alloc 0x7f3a00400000 0",
		"alloc 0x7f3a00601000 1", "free 0x7f3a00601000 1",
	}, ops)
	require.Equal(t, int64(4000+2000+3000-2000+500), peak)
}

// snap builds a snapshot of device 0 from trace entries, with no segments.
func pkSnap(entries ...any) []byte {
	return pkPickle(pkDict{{"segments", []any{}}, {"device_traces", []any{entries}}}, 4, true)
}

func TestSnapshotErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, msg string
		notMine       bool
	}{
		{"empty", "", "not a PyTorch snapshot", true},
		{"csv", "op,id,size\nalloc,1,5\n", "not a PyTorch snapshot", true},
		{"list", string(pkPickle([]any{1, 2}, 4, false)), "the pickle holds a list, not a dict", true},
		{"dict", string(pkPickle(pkDict{{"a", 1}}, 4, false)), "no segments list", true},
		{"truncated", string(pkSnap(pkEntry("alloc", a0, 5, 0, 1)))[:40], "bad pickle", true},
		{"double free", string(pkSnap(pkEntry("alloc", a0, 5, 0, 1), pkEntry("free_completed", a0, 5, 0, 2), pkEntry("free_completed", a0, 5, 0, 3))),
			"x.pickle: device_traces[0][2]: free_completed of 0x7f3a00000000 never allocated", false},
		{"double alloc", string(pkSnap(pkEntry("alloc", a0, 5, 0, 1), pkEntry("alloc", a0, 5, 0, 2))),
			"x.pickle: device_traces[0][1]: alloc of 0x7f3a00000000 that is already live", false},
		{"bad size", string(pkSnap(pkDict{{"action", "alloc"}, {"addr", a0}, {"size", "big"}})),
			"x.pickle: device_traces[0][0].size: not an integer of 64 bits: a string", false},
		{"bad traces", string(pkPickle(pkDict{{"segments", []any{}}, {"device_traces", 3}}, 4, false)),
			"x.pickle: device_traces: not a list", false},
		{"huge address", string(pkSnap(pkEntry("alloc", 1<<63, 5, 0, 1))),
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
	data := pkSnap(pkEntry("alloc", a0, 5, 0, 1), pkEntry("free_completed", a0, 5, 0, 2),
		pkEntry("free_completed", a0, 5, 0, 3), pkEntry("alloc", a1, 6, 0, 4))
	r, err := newSnapshotReader(bytes.NewReader(data), "x.pickle", Options{Lenient: true})
	require.NoError(t, err)
	evs, _ := replaySnap(t, r)
	require.Len(t, evs, 3)
	require.Equal(t, int64(1), r.Skipped())
	require.ErrorContains(t, r.FirstSkipped(), "device_traces[0][2]")
}

func TestSnapshotDetected(t *testing.T) {
	r, err := NewReader(bytes.NewReader(pkPickle(testSnapshot(true), 4, true)), "t.pickle", Options{})
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, "PyTorch snapshot", r.Format())
	evs, _ := replaySnap(t, r)
	require.Len(t, evs, 8)
}

// FuzzSnapshot checks that no input makes the snapshot reader panic, that
// every error is a *ParseError, and that the events are consistent. It is
// seeded with the shared snapshots, when present, and the test's pickles.
func FuzzSnapshot(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(snapshotDir, "*.pickle"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(data)
	}
	for _, proto := range []int{2, 4, 5} {
		f.Add(pkPickle(testSnapshot(true), proto, true))
		f.Add(pkPickle(testSnapshot(false), proto, false))
	}
	f.Add(pkSnap(pkEntry("alloc", a0, 5, 0, 1), pkEntry("free_completed", a0, 5, 0, 2), pkEntry("free_completed", a0, 5, 0, 3)))
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
