package snapshot

// The decoder that Read used before it streamed: og-rek's generic object
// tree, then the fields. The tests compare the two on every snapshot they
// read.

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"

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
	for i, sv := range segs {
		seg := p.ogSegment(sv, fmt.Sprintf("segments[%d]", i))
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
		s.DeviceTraces = make([][]TraceEntry, len(traces))
		for dev, t := range traces {
			entries, ok := t.([]any)
			if !ok {
				return nil, p.fail(fmt.Sprintf("device_traces[%d]", dev), "not a list")
			}
			s.DeviceTraces[dev] = make([]TraceEntry, 0, len(entries))
			for i, ev := range entries {
				e := p.ogEntry(ev, fmt.Sprintf("device_traces[%d][%d]", dev, i))
				if p.err != nil {
					return nil, p.err
				}
				s.DeviceTraces[dev] = append(s.DeviceTraces[dev], e)
			}
		}
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

// size returns the non-negative integer at key of m, like int.
func (p *parser) size(m map[any]any, key string, path string, def int64) int64 {
	n := p.int(m, key, path, def)
	if n < 0 {
		p.fail(path+"."+key, "negative: "+strconv.FormatInt(n, 10))
	}
	return n
}

// uint returns the non-negative integer at key of m, like int.
func (p *parser) uint(m map[any]any, key string, path string) uint64 {
	v, ok := m[key]
	if !ok || isNone(v) {
		return 0
	}
	switch x := v.(type) {
	case int64:
		if x >= 0 {
			return uint64(x)
		}
	case *big.Int:
		if x.Sign() >= 0 && x.IsUint64() {
			return x.Uint64()
		}
	}
	p.fail(path+"."+key, "not a non-negative integer of 64 bits: "+pyType(v))
	return 0
}

func (p *parser) ogSegment(v any, path string) Segment {
	m := p.dict(v, path)
	if m == nil {
		return Segment{}
	}
	dev := p.int(m, "device", path, 0)
	if dev < 0 || dev > math.MaxInt32 {
		p.fail(path+".device", "out of range: "+strconv.FormatInt(dev, 10))
	}
	seg := Segment{
		Device:        int(dev),
		Address:       p.uint(m, "address", path),
		TotalSize:     p.size(m, "total_size", path, 0),
		AllocatedSize: p.size(m, "allocated_size", path, 0),
		ActiveSize:    p.size(m, "active_size", path, 0),
		RequestedSize: p.size(m, "requested_size", path, 0),
		Stream:        p.uint(m, "stream", path),
		SegmentType:   p.str(m, "segment_type", path),
	}
	if b, ok := m["is_expandable"].(bool); ok {
		seg.IsExpandable = b
	}
	if bv, ok := m["blocks"]; ok && !isNone(bv) {
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
			addr := at
			if _, ok := bm["address"]; ok {
				addr = p.uint(bm, "address", bp)
			}
			blk := Block{
				Address:  addr,
				Size:     p.size(bm, "size", bp, 0),
				State:    BlockState(p.str(bm, "state", bp)),
				Category: p.str(bm, "category", bp),
			}
			blk.RequestedSize = p.size(bm, "requested_size", bp, blk.Size)
			seg.Blocks = append(seg.Blocks, blk)
			at = blk.Address + uint64(blk.Size)
		}
	}
	return seg
}

func (p *parser) ogEntry(v any, path string) TraceEntry {
	m := p.dict(v, path)
	if m == nil {
		return TraceEntry{}
	}
	e := TraceEntry{
		Action:   Action(p.str(m, "action", path)),
		Size:     p.size(m, "size", path, 0),
		Stream:   p.uint(m, "stream", path),
		TimeUS:   p.int(m, "time_us", path, NoTime),
		Category: p.str(m, "category", path),
	}
	if _, ok := m["addr"]; !ok && e.Action == OutOfMemory {
		e.Addr = p.uint(m, "device_free", path)
	} else {
		e.Addr = p.uint(m, "addr", path)
	}
	switch {
	case e.Action == "":
		p.fail(path, "no action")
	case e.TimeUS < 0 && e.TimeUS != NoTime:
		p.fail(path+".time_us", "negative: "+strconv.FormatInt(e.TimeUS, 10))
	}
	return e
}
