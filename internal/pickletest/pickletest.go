// Package pickletest writes small pickles the way PyTorch's Python and C++
// picklers write memory snapshots, so that tests can build the snapshots
// they read: dicts with their keys in order, lists, strings, integers,
// floats, booleans, None and pairs, with or without the memo.
package pickletest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A KV is a key and its value in a [Dict].
type KV struct {
	K string
	V any
}

// A Dict is a Python dict, its keys in order.
type Dict []KV

// Options choose how [Encode] writes.
type Options struct {
	// Proto is the pickle protocol, 2 to 5; 4 and above write one frame.
	Proto int
	// Memo memoizes strings and lists and refers to repeated strings, as
	// Python's pickler does.
	Memo bool
	// AllLong writes every integer as LONG1, as some of PyTorch's C++
	// picklers do.
	AllLong bool
}

// A Tuple is a Python tuple of any length.
type Tuple []any

// A Set is a Python set; Frozen makes it a frozenset.
type Set struct {
	Items  []any
	Frozen bool
}

// Bytes is a Python bytes value.
type Bytes []byte

// Encode returns the pickle of v, which holds Dict, []any, [2]any and
// Tuple (tuples), Set, string, Bytes, int, int64, uint64, *big.Int,
// float64, bool and nil values. It panics on a value of another type: a
// test's mistake.
func Encode(v any, o Options) []byte {
	p := &pickler{Options: o, strs: map[string]int{}}
	p.value(v)
	p.buf.WriteByte('.')
	body := p.buf.Bytes()
	out := []byte{0x80, byte(o.Proto)}
	if o.Proto >= 4 {
		out = append(out, 0x95) // FRAME
		out = binary.LittleEndian.AppendUint64(out, uint64(len(body)-1))
	}
	return append(out, body...)
}

type pickler struct {
	Options
	buf  bytes.Buffer
	strs map[string]int // memo index of strings
	n    int            // memo entries
}

func (p *pickler) memoize() {
	if !p.Memo {
		return
	}
	if p.Proto >= 4 {
		p.buf.WriteByte(0x94) // MEMOIZE
	} else {
		p.buf.WriteByte('q') // BINPUT
		p.buf.WriteByte(byte(p.n))
	}
	p.n++
}

func (p *pickler) value(v any) {
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
		if i, ok := p.strs[x]; ok && p.Memo {
			b.WriteByte('h') // BINGET
			b.WriteByte(byte(i))
			return
		}
		if len(x) < 256 && p.Proto >= 4 {
			b.WriteByte(0x8c) // SHORT_BINUNICODE
			b.WriteByte(byte(len(x)))
		} else {
			b.WriteByte('X') // BINUNICODE
			binary.Write(b, binary.LittleEndian, uint32(len(x)))
		}
		b.WriteString(x)
		if p.Memo && p.n < 256 {
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
			b.WriteByte('e') // APPENDS
		}
	case [2]any:
		p.value(x[0])
		p.value(x[1])
		b.WriteByte(0x86) // TUPLE2
	case Tuple:
		switch len(x) {
		case 0:
			b.WriteByte(')') // EMPTY_TUPLE
		case 1, 2, 3:
			for _, e := range x {
				p.value(e)
			}
			b.WriteByte(0x84 + byte(len(x))) // TUPLE1, TUPLE2, TUPLE3
		default:
			b.WriteByte('(')
			for _, e := range x {
				p.value(e)
			}
			b.WriteByte('t') // TUPLE
		}
		p.memoize()
	case Set:
		if x.Frozen {
			b.WriteByte('(')
			for _, e := range x.Items {
				p.value(e)
			}
			b.WriteByte(0x91) // FROZENSET
			p.memoize()
			return
		}
		b.WriteByte(0x8f) // EMPTY_SET
		p.memoize()
		if len(x.Items) > 0 {
			b.WriteByte('(')
			for _, e := range x.Items {
				p.value(e)
			}
			b.WriteByte(0x90) // ADDITEMS
		}
	case Bytes:
		if len(x) < 256 {
			b.WriteByte('C') // SHORT_BINBYTES
			b.WriteByte(byte(len(x)))
		} else {
			b.WriteByte('B') // BINBYTES
			binary.Write(b, binary.LittleEndian, uint32(len(x)))
		}
		b.Write(x)
		p.memoize()
	case *big.Int:
		p.long(x)
	case Dict:
		b.WriteByte('}')
		p.memoize()
		if len(x) > 0 {
			b.WriteByte('(')
			for _, e := range x {
				p.value(e.K)
				p.value(e.V)
			}
			b.WriteByte('u') // SETITEMS
		}
	default:
		panic(fmt.Sprintf("pickletest: cannot encode a %T", v))
	}
}

func (p *pickler) int(x int64) {
	switch {
	case p.AllLong || x < math.MinInt32 || x > math.MaxInt32:
		p.long1(uint64(x), x < 0)
	case x >= 0 && x < 256:
		p.buf.WriteByte('K') // BININT1
		p.buf.WriteByte(byte(x))
	default:
		p.buf.WriteByte('J') // BININT
		binary.Write(&p.buf, binary.LittleEndian, int32(x))
	}
}

// long1 writes x (two's complement, negative if neg) as LONG1 with the
// fewest bytes, as Python does.
func (p *pickler) long1(x uint64, neg bool) {
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

// long writes x as LONG1, or LONG4 past 255 bytes: two's complement,
// little-endian, in the fewest bytes, as Python does.
func (p *pickler) long(x *big.Int) {
	n := x.BitLen()/8 + 1 // room for the sign bit
	v := new(big.Int).Set(x)
	if x.Sign() < 0 {
		v.Add(v, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	be := v.FillBytes(make([]byte, n))
	le := make([]byte, n)
	for i := range be {
		le[n-1-i] = be[i]
	}
	if x.Sign() == 0 {
		le = nil
	}
	if len(le) < 256 {
		p.buf.WriteByte(0x8a)
		p.buf.WriteByte(byte(len(le)))
	} else {
		p.buf.WriteByte(0x8b)
		binary.Write(&p.buf, binary.LittleEndian, uint32(len(le)))
	}
	p.buf.Write(le)
}

// IntText returns an integer value of Encode (int, int64, uint64 or
// *big.Int) in decimal, as Python prints it.
func IntText(v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case *big.Int:
		return x.String()
	}
	panic(fmt.Sprintf("pickletest: %T is not an integer", v))
}

// Entry is a trace entry of a snapshot, with a frame; time < 0 leaves out
// its time_us, as files from before PyTorch 2.2 do.
func Entry(action string, addr uint64, size, stream, time int64) Dict {
	d := Dict{{"action", action}, {"addr", addr}, {"size", size}, {"stream", stream}}
	if time >= 0 {
		d = append(d, KV{"time_us", time})
	}
	return append(d, KV{"frames", []any{Dict{{"filename", "x.py"}, {"line", 1}, {"name", "f"}}}})
}

// Block is a block of a snapshot's segment.
func Block(addr uint64, size, requested int64, state string) Dict {
	return Dict{{"address", addr}, {"size", size}, {"requested_size", requested}, {"state", state}, {"frames", []any{}}}
}

// Segment is a segment of a snapshot on device dev, of the given
// segment_type ("small" or "large"), its size the sum of its blocks'.
func Segment(dev int, addr uint64, stream int64, kind string, blocks ...Dict) Dict {
	var total int64
	list := make([]any, len(blocks))
	for i, b := range blocks {
		total += b[1].V.(int64)
		list[i] = b
	}
	return Dict{{"device", dev}, {"address", addr}, {"total_size", total}, {"allocated_size", int64(0)},
		{"active_size", int64(0)}, {"requested_size", int64(0)}, {"stream", stream}, {"segment_type", kind},
		{"segment_pool_id", [2]any{0, 0}}, {"is_expandable", false}, {"frames", []any{}}, {"blocks", list}}
}

// Snapshot is a snapshot of the given segments (Segment's dicts), device
// traces (lists of Entry's dicts) and allocator_settings (left out when
// nil).
func Snapshot(segments []any, traces [][]any, settings Dict) Dict {
	dt := make([]any, len(traces))
	for i, t := range traces {
		if t == nil {
			t = []any{}
		}
		dt[i] = t
	}
	if segments == nil {
		segments = []any{}
	}
	d := Dict{{"segments", segments}, {"device_traces", dt}}
	if settings != nil {
		d = append(d, KV{"allocator_settings", settings})
	}
	return d
}

// Addresses of the blocks of TwoDevices.
const (
	A0 uint64 = 0x7f3a00000000
	A1 uint64 = 0x7f3a00200000
	A2 uint64 = 0x7f3a00400000
	A3 uint64 = 0x7f3a00600000
)

// TwoDevices is a snapshot of two devices: on device 0, a segment of three
// blocks A0, A1, A2, of which A0 is live before the trace and freed in it,
// A1 allocated and freed in it, A2 allocated in it and live at the end; on
// device 1, a segment of one block A3, live throughout. Their traces hold
// every kind of entry; withTime gives the entries times and the snapshot
// allocator_settings (max_split_size 64 MiB, garbage_collection_threshold
// 0.5, roundup_power2_divisions 4 for [2, 4) MiB).
func TwoDevices(withTime bool) Dict {
	tm := func(t int64) int64 {
		if withTime {
			return t
		}
		return -1
	}
	seg0 := Segment(0, A0, 7, "large", Block(A0, 2<<20, 1000, "inactive"), Block(A1, 2<<20, 2000, "inactive"),
		Block(A2, 2<<20, 3000, "active_allocated"))
	seg1 := Segment(1, A3, 9, "large", Block(A3, 2<<20, 4000, "active_pending_free"))
	dev0 := []any{
		Entry("alloc", A1, 2000, 7, tm(10)),
		Entry("free_requested", A0, 1000, 7, tm(11)),
		Entry("free_completed", A0, 1000, 7, tm(12)),
		Entry("oom", 0, 1<<40, 7, tm(13)),
		Entry("free_completed", A1, 2000, 7, tm(20)),
		Entry("segment_alloc", A2, 2<<20, 5, tm(30)),
		Entry("alloc", A2, 3000, 5, tm(31)),
		Entry("segment_map", A2, 2<<20, 5, tm(32)),
		Entry("segment_unmap", A2, 2<<20, 5, tm(33)),
		Entry("snapshot", 0, 0, 0, tm(34)),
		Entry("segment_free", A2+4<<20, 2<<20, 5, tm(35)),
	}
	dev0[3].(Dict)[1] = KV{K: "device_free", V: int64(123456)}
	dev1 := []any{
		Entry("alloc", A3+0x1000, 500, 9, tm(15)),
		Entry("free_completed", A3+0x1000, 500, 9, tm(25)),
	}
	var settings Dict
	if withTime {
		settings = Dict{{K: "PYTORCH_CUDA_ALLOC_CONF", V: "max_split_size_mb:64"}, {K: "max_split_size", V: int64(64 << 20)},
			{K: "garbage_collection_threshold", V: 0.5}, {K: "expandable_segments", V: false},
			{K: "roundup_power2_divisions", V: Dict{{K: "1", V: 0}, {K: "2", V: 4}, {K: "4", V: 0}}},
			{K: "pinned_num_register_threads", V: 1}, {K: "release_lock_on_cudamalloc", V: false}}
	}
	d := Snapshot([]any{seg0, seg1}, [][]any{dev0, dev1}, settings)
	if withTime {
		d = append(d, KV{K: "external_annotations", V: []any{}}, KV{K: "compile_context", V: Dict{}})
	}
	return d
}

// SharedSnapshots returns the real PyTorch snapshots (*.pickle) of dir,
// the project's shared development fixtures found beside the repository
// by a relative path, or skips the test when there are none (as in a fresh
// clone).
func SharedSnapshots(t testing.TB, dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.pickle"))
	if len(files) == 0 {
		t.Skipf("no PyTorch snapshots in %s (they are development fixtures, not part of the repository)", dir)
	}
	return files
}

// SharedSnapshot returns the path of the real PyTorch snapshot name of dir
// (see [SharedSnapshots]), or skips the test when it is absent.
func SharedSnapshot(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s: the shared snapshots are absent (they are development fixtures, not part of the repository)", path)
	}
	return path
}

// ForEachShared runs f as a subtest for each of the real PyTorch snapshots
// of dir (see [SharedSnapshots]), named after the file, with the file's
// base name and contents.
func ForEachShared(t *testing.T, dir string, f func(t *testing.T, name string, data []byte)) {
	for _, file := range SharedSnapshots(t, dir) {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			f(t, name, data)
		})
	}
}
