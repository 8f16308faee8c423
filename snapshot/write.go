package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/gpualloc/gpualloc/snapshot/internal/pickle"
	"io"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
)

// WriteOptions choose how [Write] encodes a snapshot.
type WriteOptions struct {
	// Protocol is the pickle protocol, 2, 3 or 4; 0 means 4, what PyTorch's
	// _dump_snapshot writes with Python 3.8 to 3.13. Protocol 5 is refused:
	// PyTorch's memory viewer cannot read it.
	Protocol int
}

// Write writes s as a PyTorch memory snapshot, the pickle that
// torch.cuda.memory._dump_snapshot writes and that PyTorch's memory viewer
// (pytorch.org/memory_viz) and [Read] open.
//
// The pickle is a dict with "segments", "device_traces" and, when s has
// them, "allocator_settings", with PyTorch's keys: each segment's "device",
// "address", "total_size", "allocated_size", "active_size",
// "requested_size", "stream", "segment_type", "is_expandable", "frames" and
// "blocks" (each block's "address", "size", "requested_size", "state",
// "frames"), each trace entry's "action", "addr" ("device_free" for an
// oom), "size", "stream", "time_us" (left out when the entry has none) and
// "frames". Frames are those of s.Stacks (empty lists for a replay, which
// has no stacks), each frame dict and each distinct stack written once and
// referred to through the memo after, as "segment_pool_id" when the
// segment is in a pool other than the default. A category is
// written, as "category", on the blocks and entries that have one.
// Settings are written as PyTorch records them when they are
// [AllocatorSettings.Effective] ("max_split_size" -1 for no limit,
// "roundup_power2_divisions" as a dict from the first MiB of each interval,
// ...), then the keys of Other in sorted order.
//
// Only the opcodes that the viewer's own unpickler reads are used: dicts,
// lists, strings (BINUNICODE, and SHORT_BINUNICODE from protocol 4), small
// integers as BININT1, BININT2 or BININT and the others as LONG1, floats as
// BINFLOAT, booleans and None; strings go through the memo, as Python's
// pickler writes them, so that the keys repeated in every entry cost two
// bytes each. The output is a function of s alone: the same snapshot gives
// the same bytes.
//
// Write streams: it holds one frame of output (64 KiB, as Python's
// pickler) and the memo of distinct strings, whatever the size of s, and
// writes in O(len(s.Segments) + blocks + entries).
func Write(w io.Writer, s *Snapshot, o WriteOptions) error {
	return WriteStream(w, &Stream{
		Segments: s.Segments,
		Devices:  s.NumTraces(),
		Entries: func(d int, yield func(*TraceEntry) bool) error {
			t := s.Trace(d)
			for i := range t.Len() {
				e := t.At(i)
				if !yield(&e) {
					break
				}
			}
			return nil
		},
		AllocatorSettings: s.AllocatorSettings,
		Frames:            s.Frames,
		Stacks:            s.Stacks,
	}, o)
}

// frameSize is the size from which a frame is written out: Python's
// _FRAME_SIZE_TARGET.
const frameSize = 64 << 10

// batchSize is the most items of one APPENDS or SETITEMS: Python's
// _BATCHSIZE.
const batchSize = 1000

// A pickler writes one pickle. Opcodes go to buf, which is written out as
// one frame (protocol 4) or as it is (2 and 3) when it reaches frameSize,
// always between two opcodes.
type pickler struct {
	w     io.Writer
	proto int
	buf   []byte
	memo  map[string]uint32 // strings written: memo index
	n     uint32            // memo entries
	err   error

	frameList []Frame   // the frames the stacks refer to
	stacks    [][]int32 // the stacks, by StackID
	frameMemo []int64   // memo index of each frame written, or -1
	stackMemo []int64   // memo index of each stack written, or -1
}

func (p *pickler) op(b byte) { p.buf = append(p.buf, b) }

// end ends an opcode: the buffer goes out once it is a frame's size.
func (p *pickler) end() {
	if len(p.buf) >= frameSize {
		p.flushFrame()
	}
}

func (p *pickler) flushFrame() {
	if p.err != nil || len(p.buf) == 0 {
		p.buf = p.buf[:0]
		return
	}
	if p.proto >= 4 {
		var h [9]byte
		h[0] = pickle.OpFrame
		binary.LittleEndian.PutUint64(h[1:], uint64(len(p.buf)))
		if _, err := p.w.Write(h[:]); err != nil {
			p.err = err
			return
		}
	}
	if _, err := p.w.Write(p.buf); err != nil {
		p.err = err
	}
	p.buf = p.buf[:0]
}

func (p *pickler) mark() { p.op(pickle.OpMark) }

func (p *pickler) emptyDict() { p.op(pickle.OpEmptyDict); p.end() }

// list writes a list of n items, item(i) writing the i-th, in batches of
// APPENDS as Python's pickler does.
func (p *pickler) list(n int, item func(i int)) {
	p.op(pickle.OpEmptyList)
	for i := 0; i < n; i += batchSize {
		p.mark()
		for j := i; j < min(n, i+batchSize); j++ {
			item(j)
		}
		p.op(pickle.OpAppends)
		p.end()
	}
	p.end()
}

// dict writes a dict: kv writes the keys and values, at most batchSize
// pairs (the dicts of a snapshot are small).
func (p *pickler) dict(kv func()) {
	p.op(pickle.OpEmptyDict)
	p.mark()
	kv()
	p.op(pickle.OpSetItems)
	p.end()
}

// str writes a string through the memo.
func (p *pickler) str(s string) {
	if i, ok := p.memo[s]; ok {
		p.get(int64(i))
		return
	}
	if len(s) < 256 && p.proto >= 4 {
		p.buf = append(p.buf, pickle.OpShortBinUnicode, byte(len(s)))
	} else {
		p.buf = append(p.buf, pickle.OpBinUnicode)
		p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(len(s)))
	}
	p.buf = append(p.buf, s...)
	p.memo[s] = p.put()
	p.end()
}

// put memoizes the value just written and returns its memo index.
func (p *pickler) put() uint32 {
	i := p.n
	p.n++
	switch {
	case p.proto >= 4:
		p.op(pickle.OpMemoize)
	case i < 256:
		p.buf = append(p.buf, pickle.OpBinPut, byte(i))
	default:
		p.buf = append(p.buf, pickle.OpLongBinPut)
		p.buf = binary.LittleEndian.AppendUint32(p.buf, i)
	}
	return i
}

// get refers to memo entry i.
func (p *pickler) get(i int64) {
	if i < 256 {
		p.buf = append(p.buf, pickle.OpBinGet, byte(i))
	} else {
		p.buf = append(p.buf, pickle.OpLongBinGet)
		p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(i))
	}
	p.end()
}

// int writes an integer in the fewest bytes: BININT1, BININT2 or BININT
// where it fits 32 bits, else LONG1 (two's complement, little-endian).
func (p *pickler) int(x int64) {
	switch {
	case x >= 0 && x < 1<<8:
		p.buf = append(p.buf, pickle.OpBinInt1, byte(x))
	case x >= 0 && x < 1<<16:
		p.buf = append(p.buf, pickle.OpBinInt2, byte(x), byte(x>>8))
	case x >= math.MinInt32 && x <= math.MaxInt32:
		p.buf = append(p.buf, pickle.OpBinInt)
		p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(x))
	default:
		p.long1(x, false)
	}
	p.end()
}

// uint writes a non-negative integer, as int does.
func (p *pickler) uint(x uint64) {
	if x <= math.MaxInt64 {
		p.int(int64(x))
		return
	}
	p.long1(int64(x), true)
	p.end()
}

// long1 writes x as LONG1; unsigned says that x is a uint64 above
// math.MaxInt64, which takes a ninth byte for its sign.
func (p *pickler) long1(x int64, unsigned bool) {
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:], uint64(x))
	n := 8
	if unsigned {
		n = 9 // b[8] is 0: the sign byte
	} else {
		// Drop the bytes that only repeat the sign.
		for n > 1 && ((b[n-1] == 0 && b[n-2]&0x80 == 0) || (b[n-1] == 0xff && b[n-2]&0x80 != 0)) {
			n--
		}
	}
	p.buf = append(p.buf, pickle.OpLong1, byte(n))
	p.buf = append(p.buf, b[:n]...)
}

func (p *pickler) float(f float64) {
	p.buf = append(p.buf, pickle.OpBinFloat)
	p.buf = binary.BigEndian.AppendUint64(p.buf, math.Float64bits(f))
	p.end()
}

func (p *pickler) bool(b bool) {
	if b {
		p.op(pickle.OpNewTrue)
	} else {
		p.op(pickle.OpNewFalse)
	}
	p.end()
}

// intItem, uintItem, strItem and boolItem write a key of a dict and its
// value.
func (p *pickler) intItem(k string, v int64)   { p.str(k); p.int(v) }
func (p *pickler) uintItem(k string, v uint64) { p.str(k); p.uint(v) }
func (p *pickler) strItem(k, v string)         { p.str(k); p.str(v) }
func (p *pickler) boolItem(k string, v bool)   { p.str(k); p.bool(v) }

// frames writes the "frames" of a stack: each distinct stack once, then
// through the memo, as each frame dict.
func (p *pickler) frames(id StackID) {
	p.str("frames")
	if id == 0 || int(id) >= len(p.stacks) {
		p.op(pickle.OpEmptyList)
		p.end()
		return
	}
	if m := p.stackMemo[id]; m >= 0 {
		p.get(m)
		return
	}
	st := p.stacks[id]
	p.op(pickle.OpEmptyList)
	p.stackMemo[id] = int64(p.put())
	for i := 0; i < len(st); i += batchSize {
		p.mark()
		for _, f := range st[i:min(len(st), i+batchSize)] {
			p.frame(f)
		}
		p.op(pickle.OpAppends)
		p.end()
	}
}

func (p *pickler) frame(f int32) {
	if int(f) >= len(p.frameList) || f < 0 {
		p.op(pickle.OpNone)
		p.fail("frames", "a frame index out of range")
		return
	}
	if m := p.frameMemo[f]; m >= 0 {
		p.get(m)
		return
	}
	fr := &p.frameList[f]
	p.op(pickle.OpEmptyDict)
	p.frameMemo[f] = int64(p.put())
	p.mark()
	p.strItem("name", fr.Name)
	p.strItem("filename", fr.Filename)
	p.intItem("line", fr.Line)
	p.op(pickle.OpSetItems)
	p.end()
}

func (p *pickler) segment(s *Segment) {
	p.dict(func() {
		p.intItem("device", int64(s.Device))
		p.uintItem("address", s.Address)
		p.intItem("total_size", s.TotalSize)
		p.intItem("allocated_size", s.AllocatedSize)
		p.intItem("active_size", s.ActiveSize)
		p.intItem("requested_size", s.RequestedSize)
		p.uintItem("stream", s.Stream)
		if s.SegmentType != "" {
			p.strItem("segment_type", s.SegmentType)
		}
		if s.Pool != (PoolID{}) {
			p.str("segment_pool_id")
			p.uint(s.Pool[0])
			p.uint(s.Pool[1])
			p.op(pickle.OpTuple2)
			p.end()
		}
		p.boolItem("is_expandable", s.IsExpandable)
		p.frames(s.Stack)
		p.str("blocks")
		p.list(len(s.Blocks), func(i int) { p.block(&s.Blocks[i]) })
	})
}

func (p *pickler) block(b *Block) {
	p.dict(func() {
		p.uintItem("address", b.Address)
		p.intItem("size", b.Size)
		p.intItem("requested_size", b.RequestedSize)
		p.strItem("state", string(b.State))
		p.frames(b.Stack)
		if b.Category != "" {
			p.strItem("category", b.Category)
		}
	})
}

func (p *pickler) entry(e *TraceEntry) {
	p.dict(func() {
		p.strItem("action", string(e.Action))
		if e.Action == OutOfMemory {
			p.str("device_free")
		} else {
			p.str("addr")
		}
		p.uint(e.Addr)
		p.intItem("size", e.Size)
		p.uintItem("stream", e.Stream)
		if e.TimeUS != NoTime {
			p.intItem("time_us", e.TimeUS)
		}
		p.frames(e.Stack)
		if e.Category != "" {
			p.strItem("category", e.Category)
		}
	})
}

// settings writes allocator_settings.
func (p *pickler) settings(s *AllocatorSettings) {
	p.dict(func() {
		if s.Conf != "" || s.Effective {
			p.strItem("PYTORCH_CUDA_ALLOC_CONF", s.Conf)
		}
		if s.Effective {
			p.intItem("max_split_size", s.MaxSplitSize)
			p.str("garbage_collection_threshold")
			p.float(s.GarbageCollectionThreshold)
			p.boolItem("expandable_segments", s.ExpandableSegments)
			p.str("roundup_power2_divisions")
			p.dict(func() {
				for i, d := range s.RoundupPower2Divisions {
					p.intItem(strconv.Itoa(1<<i), d)
				}
			})
		}
		for _, k := range slices.Sorted(maps.Keys(s.Other)) {
			p.str(k)
			p.value(s.Other[k], k)
		}
	})
}

// value writes a plain value of AllocatorSettings.Other.
func (p *pickler) value(v any, path string) {
	switch x := v.(type) {
	case nil:
		p.op(pickle.OpNone)
		p.end()
	case bool:
		p.bool(x)
	case int:
		p.int(int64(x))
	case int64:
		p.int(x)
	case uint64:
		p.uint(x)
	case float64:
		p.float(x)
	case string:
		p.str(x)
	case *big.Int:
		if !x.IsInt64() {
			p.fail("allocator_settings."+path, "an integer beyond 64 bits")
			return
		}
		p.int(x.Int64())
	case []any:
		p.list(len(x), func(i int) { p.value(x[i], path) })
	case map[string]any:
		p.dict(func() {
			for _, k := range slices.Sorted(maps.Keys(x)) {
				p.str(k)
				p.value(x[k], path+"."+k)
			}
		})
	default:
		p.fail("allocator_settings."+path, fmt.Sprintf("a %T", v))
	}
}

func (p *pickler) fail(path, what string) {
	if p.err == nil {
		p.err = errors.New("snapshot: write: " + path + ": cannot write " + what)
	}
}

// SettingsReporter is an optional interface of an allocator that can say
// its settings as a snapshot's allocator_settings, as the pytorch strategy
// does; a snapshot of a replay records them.
type SettingsReporter interface {
	AllocatorSettings() AllocatorSettings
}
