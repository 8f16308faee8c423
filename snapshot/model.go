package snapshot

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"slices"

	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
	ogórek "github.com/kisielk/og-rek"
)

// The kinds of the values that stand for what a container became, in the
// machine's stack and memo, beside its own.
const (
	kEntry   kind = kModel + iota // x is a trace list number << 32 | the entry's index
	kTrace                        // x is a trace list number
	kBlock                        // x is a block list number << 32 | the block's index
	kBlocks                       // x is a block list number
	kSegment                      // x is a segment list number << 32 | the segment's index
	kFrame                        // x is a frame's index in Snapshot.Frames, | frameEC if on the empty-cache path
	kStack                        // x is a StackID
)

// frameEC marks a kFrame on the empty-cache path, above its index.
const frameEC = 1 << 32

// frameVal returns the kFrame of frame id.
func (d *decoder) frameVal(id uint32) val {
	v := val{K: kFrame, X: uint64(id)}
	if d.m.frameEC[id] {
		v.X |= frameEC
	}
	return v
}

// model holds what the decoder's containers became: the lists of
// segments, blocks and trace entries, each under a number that a memo
// reference names, and the interned frames and stacks.
type model struct {
	segs   [][]Segment
	blocks [][]Block
	noAddr map[uint32][]int32 // block list: its blocks with no "address"
	traces []traceList        // each trace list as it is decoded

	frames   []Frame
	frameEC  []bool // whether each frame is on the empty-cache path
	frameIdx map[Frame]uint32
	stacks   [][]int32
	stackIdx map[string]StackID
	stackEC  []bool // whether each stack names the empty-cache path
}

// internFrame returns the index of f in the frame table.
func (m *model) internFrame(f Frame) uint32 {
	if i, ok := m.frameIdx[f]; ok {
		return i
	}
	if m.frameIdx == nil {
		m.frameIdx = map[Frame]uint32{}
	}
	i := uint32(len(m.frames))
	m.frames = append(m.frames, f)
	m.frameEC = append(m.frameEC, IsEmptyCacheFrame(f.Name, f.Filename))
	m.frameIdx[f] = i
	return i
}

// internStack returns the StackID of the frames whose indexes ids holds,
// 4 bytes each, little-endian.
func (m *model) internStack(ids []byte) StackID {
	if len(ids) == 0 {
		return 0
	}
	if id, ok := m.stackIdx[string(ids)]; ok {
		return id
	}
	if m.stackIdx == nil {
		m.stackIdx = map[string]StackID{}
		m.stacks = [][]int32{nil}
		m.stackEC = []bool{false}
	}
	st := make([]int32, len(ids)/4)
	for j := range st {
		st[j] = int32(binary.LittleEndian.Uint32(ids[4*j:]))
	}
	ec := m.emptyCache(ids)
	id := StackID(len(m.stacks))
	m.stacks = append(m.stacks, st)
	m.stackEC = append(m.stackEC, ec)
	m.stackIdx[string(ids)] = id
	return id
}

// emptyCache reports whether one of the frames whose indexes ids holds, 4
// bytes each, is on the empty-cache path.
func (m *model) emptyCache(ids []byte) bool {
	for j := 0; j+4 <= len(ids); j += 4 {
		if m.frameEC[binary.LittleEndian.Uint32(ids[j:])] {
			return true
		}
	}
	return false
}

// finish records what the value v, read through container tmp, became.
func (d *decoder) finish(v val, tmp int32, became val) {
	if v.K == kCont {
		d.used(int32(v.X), became)
	}
	if tmp >= 0 && (v.K != kCont || tmp != int32(v.X)) {
		d.release(tmp)
	}
}

// An entryRec is a trace entry as the decoder keeps it until the read
// ends: its strings as indexes into the string table, so that it holds no
// pointer and the collector never scans the millions of them, in 48 bytes
// rather than a TraceEntry's 72.
type entryRec struct {
	addr, stream     uint64
	size, time       int64
	action, category uint32 // noStr for ""
	stack            StackID
	emptyCache       bool
}

// noStr is the string index of "".
const noStr = ^uint32(0)

// strAt returns string i of the table strs, "" for noStr.
func strAt(strs []string, i uint32) string {
	if i == noStr {
		return ""
	}
	return strs[i]
}

// strAt returns string i of the decoder's table, "" for noStr.
func (d *decoder) strAt(i uint32) string { return strAt(d.Strs, i) }

// entry returns the TraceEntry that r is, its strings indexes into strs.
func (r *entryRec) entry(strs []string) TraceEntry {
	return TraceEntry{Action: Action(strAt(strs, r.action)), Addr: r.addr, Size: r.size, Stream: r.stream, TimeUS: r.time,
		Category: strAt(strs, r.category), Stack: r.stack, EmptyCache: r.emptyCache}
}

func (d *decoder) entryOf(v val, at itemAt) (entryRec, bool) {
	if dv := d.doneOf(v); dv.K == kEntry {
		return *d.m.traces[dv.X>>32].recs.At(uint64(uint32(dv.X))), d.repeat(1, at)
	}
	f, tmp, ok := d.dictFields(v, rEntry, at)
	if !ok {
		return entryRec{}, false
	}
	e := entryRec{
		action:   d.fstrIndex(f, keyAction, at),
		size:     d.fsize(f, keySize, at, 0),
		stream:   d.fuint(f, keyStream, at, false),
		time:     d.ftime(f, keyTimeUS, at),
		category: d.fstrIndex(f, keyCategory, at),
		stack:    d.fstack(f),
	}
	action := Action(d.strAt(e.action))
	if _, ok := f.get(keyAddr); !ok && action == OutOfMemory {
		e.addr = d.fuint(f, keyDeviceFree, at, false)
	} else {
		e.addr = d.fuint(f, keyAddr, at, addressed(action))
	}
	_, sized := f.get(keySize)
	switch {
	case action == "":
		d.failAt(d.pathOf(at), "no action")
	case action == OutOfMemory && !sized:
		d.failAt(d.fieldPath(at, keySize), "missing: an oom entry records the size that failed")
	}
	if action == SegmentFree || action == SegmentUnmap {
		e.emptyCache = d.fempty(f)
	}
	num := d.conts[at.list].num
	d.finish(v, tmp, val{K: kEntry, X: uint64(num)<<32 | uint64(at.index)})
	return e, d.Err == nil
}

// traceOf returns the number of a device's trace list.
func (d *decoder) traceOf(v val, at itemAt) (uint32, bool) {
	if dv := d.doneOf(v); dv.K == kTrace {
		t := &d.m.traces[dv.X]
		if !d.repeat(t.recs.Len(), at) {
			return 0, false
		}
		c := traceList{recs: pages.New(d.sp, recCodec), notes: t.notes}
		c.notes.acts = slices.Clone(c.notes.acts)
		for i := range t.recs.Len() {
			c.recs.Append(*t.recs.At(uint64(i)))
		}
		d.m.traces = append(d.m.traces, c)
		return uint32(len(d.m.traces) - 1), true
	}
	if v.K == kSkip {
		d.skippedHere(d.pathOf(at), v)
		return 0, false
	}
	if v.K != kCont || d.conts[v.X].typ != ctList {
		d.failAt(d.pathOf(at), "not a list")
		return 0, false
	}
	i := int32(v.X)
	if c := &d.conts[i]; c.role != rTrace {
		items := c.items
		i = d.alloc(ctList, rTrace, at.list, at.index, -1)
		for _, it := range items {
			if d.add(i, it); d.Err != nil {
				return 0, false
			}
		}
	}
	num := d.conts[i].num
	d.finish(v, i, val{K: kTrace, X: uint64(num)})
	return num, true
}

func (d *decoder) frameOf(v val, at itemAt) (uint32, bool) {
	if dv := d.doneOf(v); dv.K == kFrame {
		return uint32(dv.X), true
	}
	f, tmp, ok := d.dictFields(v, rFrame, at)
	if !ok {
		return 0, false
	}
	fr := Frame{Name: d.anyStr(f, keyName), Filename: d.anyStr(f, keyFilename), Line: d.anyLine(f, keyLine)}
	id := d.m.internFrame(fr)
	d.finish(v, tmp, d.frameVal(id))
	return id, d.Err == nil
}

func (d *decoder) blockOf(v val, at itemAt) (Block, bool) {
	num := d.conts[at.list].num
	if dv := d.doneOf(v); dv.K == kBlock {
		b := d.m.blocks[dv.X>>32][uint32(dv.X)]
		return b, d.repeat(1, at)
	}
	f, tmp, ok := d.dictFields(v, rBlock, at)
	if !ok {
		return Block{}, false
	}
	b := Block{
		Size:     d.fsize(f, keySize, at, 0),
		State:    BlockState(d.fstr(f, keyState, at)),
		Category: d.fstr(f, keyCategory, at),
		Stack:    d.fstack(f),
	}
	if _, ok := f.get(keyAddress); ok {
		b.Address = d.fuint(f, keyAddress, at, true)
	} else {
		if d.m.noAddr == nil {
			d.m.noAddr = map[uint32][]int32{}
		}
		d.m.noAddr[num] = append(d.m.noAddr[num], at.index)
	}
	b.RequestedSize = d.fsize(f, keyRequestedSize, at, b.Size)
	d.finish(v, tmp, val{K: kBlock, X: uint64(num)<<32 | uint64(at.index)})
	return b, d.Err == nil
}

// looksLikeSegment reports whether the first item of a top-level list is
// a segment: a dict with "total_size" and "blocks".
func (d *decoder) looksLikeSegment(v val) bool {
	if dv := d.doneOf(v); dv.K == kSegment {
		return true
	}
	if v.K != kCont || d.conts[v.X].typ != ctDict {
		return false
	}
	c := &d.conts[v.X]
	if c.role == rSegment {
		f := &d.fields[c.fi]
		return f.present(keyTotalSize) && f.present(keyBlocks)
	}
	var size, blocks bool
	for j := 0; j+1 < len(c.items); j += 2 {
		if k := c.items[j]; k.K == kStr {
			size = size || d.Strs[k.X] == "total_size"
			blocks = blocks || d.Strs[k.X] == "blocks"
		}
	}
	return size && blocks
}

func (d *decoder) segmentOf(v val, at itemAt) (Segment, bool) {
	num := d.conts[at.list].num
	if dv := d.doneOf(v); dv.K == kSegment {
		s := d.m.segs[dv.X>>32][uint32(dv.X)]
		if !d.repeat(1+len(s.Blocks), at) {
			return Segment{}, false
		}
		s.Blocks = append([]Block(nil), s.Blocks...)
		return s, true
	}
	f, tmp, ok := d.dictFields(v, rSegment, at)
	if !ok {
		return Segment{}, false
	}
	seg := Segment{
		Device:        d.fdevice(f, keyDevice, at),
		Address:       d.fuint(f, keyAddress, at, false),
		TotalSize:     d.fsize(f, keyTotalSize, at, 0),
		AllocatedSize: d.fsize(f, keyAllocatedSize, at, 0),
		ActiveSize:    d.fsize(f, keyActiveSize, at, 0),
		RequestedSize: d.fsize(f, keyRequestedSize, at, 0),
		Stream:        d.fuint(f, keyStream, at, false),
		SegmentType:   d.fstr(f, keySegmentType, at),
		IsExpandable:  d.fbool(f, keyIsExpandable, at),
		Stack:         d.fstack(f),
	}
	if x, ok := f.get(keySegmentPoolID); ok {
		seg.Pool = d.pool(x, at)
	}
	if bv, ok := f.get(keyBlocks); ok {
		var num uint32
		seg.Blocks, num = d.segmentBlocks(bv, at)
		at := seg.Address
		fix := d.m.noAddr[num]
		for i := range seg.Blocks {
			if len(fix) > 0 && fix[0] == int32(i) {
				seg.Blocks[i].Address = at
				fix = fix[1:]
			}
			at = seg.Blocks[i].Address + uint64(seg.Blocks[i].Size)
		}
	}
	if _, ok := f.get(keyAddress); !ok {
		d.failAt(d.fieldPath(at, keyAddress), "missing")
	}
	d.finish(v, tmp, val{K: kSegment, X: uint64(num)<<32 | uint64(at.index)})
	return seg, d.Err == nil
}

// segmentBlocks returns the blocks of a segment's "blocks" value, and the
// number of their block list: a block list's own on its first use, a copy
// on later ones. The number is taken before the list is used, which may
// free its container for reuse.
func (d *decoder) segmentBlocks(bv val, at itemAt) ([]Block, uint32) {
	if bv.K == kCont {
		c := &d.conts[bv.X]
		if c.role == rBlocks && c.done.K == kMark {
			num := c.num
			d.used(int32(bv.X), val{K: kBlocks, X: uint64(num)})
			return d.m.blocks[num], num
		}
	}
	if dv := d.doneOf(bv); dv.K == kBlocks {
		b := d.m.blocks[dv.X]
		if !d.repeat(len(b), at) {
			return nil, 0
		}
		return append(make([]Block, 0, len(b)), b...), uint32(dv.X)
	}
	d.failAt(d.fieldPath(at, keyBlocks), "not a list but "+d.typeName(bv))
	return nil, 0
}

// pool returns a segment_pool_id: a pair of non-negative integers.
func (d *decoder) pool(v val, at itemAt) PoolID {
	var p PoolID
	if v.K == kCont {
		c := &d.conts[v.X]
		if (c.typ == ctTuple || c.typ == ctList) && len(c.items) == 2 {
			ok := true
			for i, it := range c.items {
				switch {
				case it.K == kInt && int64(it.X) >= 0, it.K == kUint:
					p[i] = it.X
				default:
					ok = false
				}
			}
			if ok {
				return p
			}
		}
	}
	d.failAt(d.fieldPath(at, keySegmentPoolID), "not a pair of non-negative integers but "+d.typeName(v))
	return p
}

// snapshotOf returns the snapshot that the pickle's value v is.
func (d *decoder) snapshotOf(v val, name string) (*Snapshot, error) {
	if v.K != kCont || (d.conts[v.X].typ != ctDict && d.conts[v.X].typ != ctList) {
		return nil, errNotSnapshot("the pickle holds " + d.typeName(v) + ", not a dict or a list of segments")
	}
	top := int32(v.X)
	c := &d.conts[top]
	switch {
	case c.typ == ctList && c.role != rLegacy:
		items := c.items
		top = d.alloc(ctList, rLegacy, -1, 0, -1)
		for _, it := range items {
			if d.add(top, it); d.Err != nil {
				return nil, d.Err
			}
		}
	case c.typ == ctDict && c.role != rTop:
		items := c.items
		top = d.alloc(ctDict, rTop, -1, 0, -1)
		for j := 0; j+1 < len(items); j += 2 {
			if d.set(top, items[j], items[j+1]); d.Err != nil {
				return nil, d.Err
			}
		}
	}
	c = &d.conts[top]
	s := &Snapshot{}
	if !d.noStacks {
		s.Frames, s.Stacks = d.m.frames, d.m.stacks
	}
	if c.role == rLegacy {
		s.Segments = d.m.segs[c.num]
		return s, nil
	}
	f := &d.fields[c.fi]
	sv, ok := f.get(keySegments)
	if !ok || sv.K != kCont || d.conts[sv.X].role != rSegments {
		return nil, errNotSnapshot("no segments list")
	}
	s.Segments = d.m.segs[d.conts[sv.X].num]
	if tv, ok := f.get(keyDeviceTraces); ok {
		if tv.K != kCont || d.conts[tv.X].role != rTraces {
			return nil, &fieldError{"device_traces: not a list"}
		}
		lists := d.conts[tv.X].lists
		s.traces = make([]Trace, len(lists))
		for dev, n := range lists {
			s.traces[dev] = Trace{held: hold(&d.m.traces[n].recs, d.m.traces[n].notes, d.Strs)}
		}
	}
	if av, ok := f.get(keyAllocatorSettings); ok {
		x, err := d.settingsValue(av)
		if err != nil {
			return nil, err
		}
		p := &parser{name: name}
		s.AllocatorSettings = p.settings(x, "allocator_settings")
		if p.err != nil {
			return nil, p.err
		}
	}
	return s, nil
}

// settingsValue returns the value of allocator_settings as plain values,
// naming the key whose value is too large to convert.
func (d *decoder) settingsValue(v val) (any, error) {
	items := 0
	if v.K == kCont && d.conts[v.X].typ == ctDict && d.conts[v.X].role == rGeneric {
		c := &d.conts[v.X]
		m := make(map[any]any, len(c.items)/2)
		for j := 0; j+1 < len(c.items); j += 2 {
			k, ok := d.plain(c.items[j], 1, &items)
			if !ok || !hashable(k) {
				return nil, &fieldError{"allocator_settings: a key is not a string"}
			}
			x, ok := d.plain(c.items[j+1], 1, &items)
			if !ok {
				return nil, &fieldError{"allocator_settings." + fmt.Sprint(k) + ": nested too deeply, too large, or holding itself"}
			}
			m[k] = x
		}
		return m, nil
	}
	x, ok := d.plain(v, 0, &items)
	if !ok {
		return nil, &fieldError{"allocator_settings: nested too deeply, too large, or holding itself"}
	}
	return x, nil
}

// plain returns a generic value as the decoded values that settings.go
// reads (og-rek's types), within the limits of depth.go.
func (d *decoder) plain(v val, depth int, items *int) (any, bool) {
	*items++
	if depth > maxPlainDepth || *items > maxPlainItems {
		return nil, false
	}
	switch v.K {
	case kNone:
		return ogórek.None{}, true
	case kBool:
		return v.X != 0, true
	case kInt:
		return int64(v.X), true
	case kUint:
		return new(big.Int).SetUint64(v.X), true
	case kBig:
		return d.Bigs[v.X], true
	case kFloat:
		return v.Float(), true
	case kStr:
		return d.Strs[v.X], true
	case kBytes:
		return ogórek.Bytes(d.Strs[v.X]), true
	case kCont:
	default:
		return nil, false
	}
	c := &d.conts[v.X]
	if c.role != rGeneric {
		return nil, false
	}
	switch c.typ {
	case ctDict:
		m := make(map[any]any, len(c.items)/2)
		for j := 0; j+1 < len(c.items); j += 2 {
			k, ok1 := d.plain(c.items[j], depth+1, items)
			x, ok2 := d.plain(c.items[j+1], depth+1, items)
			if !ok1 || !ok2 || !hashable(k) {
				return nil, false
			}
			m[k] = x
		}
		return m, true
	default:
		l := make([]any, len(c.items))
		for j, it := range c.items {
			x, ok := d.plain(it, depth+1, items)
			if !ok {
				return nil, false
			}
			l[j] = x
		}
		if c.typ == ctTuple {
			return ogórek.Tuple(l), true
		}
		return l, true
	}
}

// hashable reports whether a plain value can be a key of a Go map.
func hashable(k any) bool {
	switch k.(type) {
	case map[any]any, []any, ogórek.Tuple:
		return false
	}
	return true
}
