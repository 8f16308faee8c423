package snapshot

// The decoder that Read used before it streamed: og-rek's generic object
// tree, then the fields, by the same rules. The tests compare the two on
// every snapshot they read, and FuzzReadOgrek on generated ones.

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/big"

	ogórek "github.com/kisielk/og-rek"
)

// Read decodes a PyTorch memory snapshot from r, read to its end, naming it
// name in errors. Every error is an [*Error]. Input that is not a pickle of
// protocol 2 to 5, or a pickle that is not a snapshot (no "segments"
// list), gives one wrapping [ErrNotSnapshot]; a snapshot with a field of
// the wrong type, or a negative size, one naming the field: "x.pickle:
// segments[3].blocks[0].size: not an integer of 64 bits: a string". Keys
// that the package does not model are ignored. Read does not check that the
// trace fits the segments: see [Snapshot.InitialState].
//
// Older files are read for what they hold: a bare list of segments
// (torch.cuda.memory_snapshot(), and PyTorch before 2.0) is a snapshot
// with no trace and no settings; a block with no "address" (PyTorch 2.0
// and 2.1) starts where the one before it ends, the first at its segment's
// address.
func readOgrek(r io.Reader, name string) (*Snapshot, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, &Error{Name: name, Msg: "read: " + err.Error(), Err: err}
	}
	if len(data) < 2 || data[0] != 0x80 || data[1] < 2 || data[1] > 5 {
		return nil, notSnapshot(name, "not a pickle of protocol 2 to 5", nil)
	}
	d := ogórek.NewDecoderWithConfig(bytes.NewReader(data), &ogórek.DecoderConfig{})
	v, err := decodeSafely(d)
	if err != nil {
		return nil, notSnapshot(name, "bad pickle: "+oneLine(err.Error()), err)
	}
	top, ok := v.(map[any]any)
	if l, isList := v.([]any); isList && isLegacy(l) {
		// torch.cuda.memory_snapshot() and PyTorch before 2.0 give the
		// bare list of segments, which PyTorch's own tools wrap as
		// {"segments": list} (torch/cuda/_memory_viz.py).
		top, ok = map[any]any{"segments": l}, true
	}
	if !ok {
		return nil, notSnapshot(name, fmt.Sprintf("the pickle holds %s, not a dict or a list of segments", pyType(v)), nil)
	}
	segs, ok := top["segments"].([]any)
	if !ok {
		return nil, notSnapshot(name, "no segments list", nil)
	}
	p := &parser{name: name}
	s := &Snapshot{}
	m := &ogModel{s, map[Frame]int32{}, map[string]StackID{}}
	for i, sv := range segs {
		seg := p.ogSegment(m, sv, fmt.Sprintf("segments[%d]", i))
		if p.err != nil {
			return nil, p.err
		}
		s.Segments = append(s.Segments, seg)
	}
	if tv, ok := top["device_traces"]; ok && !isNone(tv) {
		traces, ok := tv.([]any)
		if !ok {
			return nil, p.fail("device_traces", "not a list")
		}
		lists := make([][]TraceEntry, len(traces))
		for dev, t := range traces {
			entries, ok := t.([]any)
			if !ok {
				return nil, p.fail(fmt.Sprintf("device_traces[%d]", dev), "not a list")
			}
			lists[dev] = make([]TraceEntry, 0, len(entries))
			for i, ev := range entries {
				e := p.ogEntry(m, ev, fmt.Sprintf("device_traces[%d][%d]", dev, i))
				if p.err != nil {
					return nil, p.err
				}
				lists[dev] = append(lists[dev], e)
			}
		}
		s.SetTraces(lists...)
	}
	if as, ok := top["allocator_settings"]; ok && !isNone(as) {
		sp := &parser{name: name}
		s.AllocatorSettings = sp.settings(as, "allocator_settings")
		if sp.err != nil {
			return nil, sp.err
		}
	}
	return s, nil
}

// isLegacy reports whether l is a legacy snapshot, a bare list of
// segments: empty, or whose first item is a dict with "total_size" and
// "blocks".
func isLegacy(l []any) bool {
	if len(l) == 0 {
		return true
	}
	m, ok := l[0].(map[any]any)
	if !ok {
		return false
	}
	_, size := m["total_size"]
	_, blocks := m["blocks"]
	return size && blocks
}

// decodeSafely decodes one pickle, turning a panic of the decoder on
// malformed input into an error.
func decodeSafely(d *ogórek.Decoder) (v any, err error) {
	defer func() {
		if e := recover(); e != nil {
			v, err = nil, fmt.Errorf("malformed pickle: %v", e)
		}
	}()
	return d.Decode()
}

// The conversion of og-rek's tree into the model, by the rules of the
// package doc, written apart from the decoder's, as the fuzz oracle
// (FuzzReadOgrek) compares the two.

// ogNatural returns v as an integer from 0 to most, or why not.
func ogNatural(v any, most uint64, mostText string) (uint64, string) {
	var b *big.Int
	switch x := v.(type) {
	case int64:
		b = big.NewInt(x)
	case *big.Int:
		b = x
	default:
		return 0, "not an integer but " + pyType(v)
	}
	switch {
	case b.Sign() < 0:
		return 0, "negative: " + b.String()
	case b.IsUint64() && b.Uint64() <= most:
		return b.Uint64(), ""
	}
	return 0, b.String() + " is more than " + mostText
}

// field returns the value at key of m, false when absent or None.
func field(m map[any]any, key string) (any, bool) {
	v, ok := m[key]
	return v, ok && !isNone(v)
}

// size returns the size at key of m, from 0 to 2^63-1; def when absent.
func (p *parser) size(m map[any]any, key string, path string, def int64) int64 {
	v, ok := field(m, key)
	if !ok {
		return def
	}
	n, msg := ogNatural(v, math.MaxInt64, mostSize)
	if msg != "" {
		p.fail(path+"."+key, msg)
	}
	return int64(n)
}

// uint returns the address or stream at key of m; 0 when absent, or an
// error when need is set.
func (p *parser) uint(m map[any]any, key string, path string, need bool) uint64 {
	v, ok := field(m, key)
	if !ok {
		if need {
			p.fail(path+"."+key, "missing")
		}
		return 0
	}
	n, msg := ogNatural(v, math.MaxUint64, mostUint)
	if msg != "" {
		p.fail(path+"."+key, msg)
	}
	return n
}

// An ogModel is the snapshot that readOgrek makes, with the indexes of
// its frames and stacks.
type ogModel struct {
	*Snapshot
	frameIdx map[Frame]int32
	stackIdx map[string]StackID
}

// frames returns the stack at "frames" of m, interned in s, and whether
// it is on the empty-cache path.
func (p *parser) frames(s *ogModel, m map[any]any, path string) (StackID, bool) {
	v, ok := field(m, "frames")
	if !ok {
		return 0, false
	}
	l, ok := v.([]any)
	if !ok {
		p.fail(path+".frames", "not a list but "+pyType(v))
		return 0, false
	}
	var ids []int32
	ec := false
	for i, fv := range l {
		fm, ok := fv.(map[any]any)
		if !ok {
			p.fail(fmt.Sprintf("%s.frames[%d]", path, i), "not a dict but "+pyType(fv))
			return 0, false
		}
		anyStr := func(k string) string {
			s, _ := toString(fm[k])
			return s
		}
		f := Frame{Name: anyStr("name"), Filename: anyStr("filename")}
		switch x := fm["line"].(type) {
		case int64:
			f.Line = x
		case *big.Int:
			if x.IsInt64() {
				f.Line = x.Int64()
			} else if x.Sign() > 0 && x.IsUint64() {
				f.Line = int64(x.Uint64())
			}
		}
		ec = ec || IsEmptyCacheFrame(f.Name, f.Filename)
		k, ok := s.frameIdx[f]
		if !ok {
			k = int32(len(s.Frames))
			s.Frames = append(s.Frames, f)
			s.frameIdx[f] = k
		}
		ids = append(ids, k)
	}
	if len(ids) == 0 {
		return 0, ec
	}
	if s.Stacks == nil {
		s.Stacks = [][]int32{nil}
	}
	key := fmt.Sprint(ids)
	if id, ok := s.stackIdx[key]; ok {
		return id, ec
	}
	s.Stacks = append(s.Stacks, ids)
	s.stackIdx[key] = StackID(len(s.Stacks) - 1)
	return StackID(len(s.Stacks) - 1), ec
}

func (p *parser) ogSegment(s *ogModel, v any, path string) Segment {
	m := p.dict(v, path)
	if m == nil {
		return Segment{}
	}
	var seg Segment
	if dv, ok := field(m, "device"); ok {
		n, msg := ogNatural(dv, math.MaxInt32, mostInt32)
		if msg != "" {
			if pyType(dv) == "an integer" {
				msg = "out of range: " + fmt.Sprint(plain(dv))
			}
			p.fail(path+".device", msg)
		}
		seg.Device = int(n)
	}
	seg.Address = p.uint(m, "address", path, false)
	seg.TotalSize = p.size(m, "total_size", path, 0)
	seg.AllocatedSize = p.size(m, "allocated_size", path, 0)
	seg.ActiveSize = p.size(m, "active_size", path, 0)
	seg.RequestedSize = p.size(m, "requested_size", path, 0)
	seg.Stream = p.uint(m, "stream", path, false)
	seg.SegmentType = p.str(m, "segment_type", path)
	if x, ok := field(m, "is_expandable"); ok {
		switch x := x.(type) {
		case bool:
			seg.IsExpandable = x
		case int64:
			seg.IsExpandable = x != 0
		case *big.Int:
			seg.IsExpandable = x.Sign() != 0
		default:
			p.fail(path+".is_expandable", "not a bool but "+pyType(x))
		}
	}
	seg.Stack, _ = p.frames(s, m, path)
	if x, ok := field(m, "segment_pool_id"); ok {
		var items []any
		switch t := x.(type) {
		case ogórek.Tuple:
			items = t
		case []any:
			items = t
		}
		good := len(items) == 2
		for i := 0; good && i < 2; i++ {
			n, msg := ogNatural(items[i], math.MaxUint64, mostUint)
			_, isBool := items[i].(bool)
			good = msg == "" && !isBool
			seg.Pool[i] = n
		}
		if !good {
			p.fail(path+".segment_pool_id", "not a pair of non-negative integers but "+pyType(x))
		}
	}
	if bv, ok := field(m, "blocks"); ok {
		blocks, ok := bv.([]any)
		if !ok {
			p.fail(path+".blocks", "not a list but "+pyType(bv))
			return seg
		}
		seg.Blocks = make([]Block, 0, len(blocks))
		at := seg.Address // where the block starts if it does not say
		for i, b := range blocks {
			bp := fmt.Sprintf("%s.blocks[%d]", path, i)
			bm := p.dict(b, bp)
			if bm == nil {
				return seg
			}
			blk := Block{
				Size:     p.size(bm, "size", bp, 0),
				State:    BlockState(p.str(bm, "state", bp)),
				Category: p.str(bm, "category", bp),
			}
			blk.Stack, _ = p.frames(s, bm, bp)
			blk.Address = at
			if _, ok := field(bm, "address"); ok {
				blk.Address = p.uint(bm, "address", bp, true)
			}
			blk.RequestedSize = p.size(bm, "requested_size", bp, blk.Size)
			seg.Blocks = append(seg.Blocks, blk)
			at = blk.Address + uint64(blk.Size)
		}
	}
	if _, ok := field(m, "address"); !ok {
		p.fail(path+".address", "missing")
	}
	return seg
}

func (p *parser) ogEntry(s *ogModel, v any, path string) TraceEntry {
	m := p.dict(v, path)
	if m == nil {
		return TraceEntry{}
	}
	e := TraceEntry{
		Action:   Action(p.str(m, "action", path)),
		Size:     p.size(m, "size", path, 0),
		Stream:   p.uint(m, "stream", path, false),
		TimeUS:   NoTime,
		Category: p.str(m, "category", path),
	}
	if tv, ok := field(m, "time_us"); ok {
		n, msg := ogNatural(tv, math.MaxInt64, mostTime)
		if msg != "" {
			p.fail(path+".time_us", msg)
		}
		e.TimeUS = int64(n)
	}
	var ec bool
	e.Stack, ec = p.frames(s, m, path)
	if e.Action == SegmentFree || e.Action == SegmentUnmap {
		e.EmptyCache = ec
	}
	if _, ok := field(m, "addr"); !ok && e.Action == OutOfMemory {
		e.Addr = p.uint(m, "device_free", path, false)
	} else {
		e.Addr = p.uint(m, "addr", path, addressed(e.Action))
	}
	_, sized := field(m, "size")
	switch {
	case e.Action == "":
		p.fail(path, "no action")
	case e.Action == OutOfMemory && !sized:
		p.fail(path+".size", "missing: an oom entry records the size that failed")
	}
	return e
}
