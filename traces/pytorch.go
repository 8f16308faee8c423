package traces

// PyTorch memory snapshots.
//
// torch.cuda.memory._dump_snapshot() pickles a dict: "segments" (the
// allocator's segments at dump time, each with its blocks), "device_traces"
// (one list per device of the allocator's recent actions: the tail of a ring
// buffer) and, in newer versions, "allocator_settings",
// "external_annotations" and more. Only dicts, lists, strings, integers,
// floats, booleans, None and tuples occur; addresses are LONG1 integers;
// lists and strings are shared through the pickle's memo.
//
// A pickle cannot be decoded in pieces, so a snapshot is read whole: the
// decoder holds the file's objects in memory, several times the file's size
// (a 1 MB snapshot takes some tens of MB while it is decoded), after which
// ReadSnapshot keeps only the segments, blocks and trace entries, about 100
// bytes per trace entry and block.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"sort"
	"strconv"

	ogórek "github.com/kisielk/og-rek"
)

// A Snapshot is a PyTorch CUDA caching allocator snapshot, as written by
// torch.cuda.memory._dump_snapshot().
type Snapshot struct {
	// Segments are the allocator's segments at dump time.
	Segments []Segment
	// Traces holds, for each device index, the allocator's recorded actions
	// in order: the tail of a ring buffer, which may start after blocks
	// were already allocated.
	Traces [][]TraceEntry
	// AllocatorSettings is the snapshot's "allocator_settings" (nil in
	// files from before PyTorch recorded them), with dicts as
	// map[string]any, lists as []any, integers as int64 (or *big.Int when
	// they do not fit), None as nil.
	AllocatorSettings map[string]any
}

// A Segment is memory the allocator holds from the device.
type Segment struct {
	Device        int
	Address       uint64
	TotalSize     int64
	AllocatedSize int64
	ActiveSize    int64
	RequestedSize int64
	Stream        uint64
	SegmentType   string // "large" or "small"
	IsExpandable  bool
	Blocks        []SegmentBlock
}

// A SegmentBlock is a block of a [Segment].
type SegmentBlock struct {
	Address uint64
	Size    int64 // bytes of the block, after rounding
	// RequestedSize is the size asked for, or Size when the file does not
	// record it.
	RequestedSize int64
	// State is "active_allocated", "active_pending_free" or "inactive".
	State string
}

// Live reports whether the block was allocated at dump time: its state is
// "active_allocated" or "active_pending_free".
func (b SegmentBlock) Live() bool {
	return b.State == "active_allocated" || b.State == "active_pending_free"
}

// A TraceEntry is one recorded action of the allocator.
type TraceEntry struct {
	// Action is one of alloc, free_requested, free_completed,
	// segment_alloc, segment_free, segment_map, segment_unmap, snapshot,
	// oom.
	Action string
	// Addr is the block's or segment's address; for oom, the device's
	// free bytes ("device_free").
	Addr uint64
	// Size is the requested (unrounded) size for alloc, free_requested and
	// free_completed; the segment's bytes for the segment actions; the
	// size that failed for oom.
	Size   int64
	Stream uint64
	// TimeUS is the entry's timestamp in microseconds, or NoTime in files
	// from before PyTorch recorded one.
	TimeUS int64
	Device int
}

// notSnapshot returns an error wrapping ErrNotTrace: the input is not a
// PyTorch snapshot, and another format may claim it.
func notSnapshot(name, why string) error {
	return &ParseError{Name: name, Msg: "not a PyTorch snapshot (" + why + ")", Err: ErrNotTrace}
}

// ReadSnapshot decodes a PyTorch memory snapshot from r, read to its end,
// naming it name in errors. Input that is not a pickle, or a pickle that is
// not a snapshot (no "segments" list), gives a [*ParseError] wrapping
// [ErrNotTrace]; a snapshot with a field of the wrong type gives a
// *ParseError naming the field: "x.pickle: segments[3].blocks[0].size: not
// an integer". Unknown keys are ignored.
func ReadSnapshot(r io.Reader, name string) (*Snapshot, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, &ParseError{Name: name, Msg: "read: " + err.Error(), Err: err}
	}
	if len(data) < 2 || data[0] != 0x80 || data[1] < 2 || data[1] > 5 {
		return nil, notSnapshot(name, "not a pickle of protocol 2 to 5")
	}
	d := ogórek.NewDecoderWithConfig(bytes.NewReader(data), &ogórek.DecoderConfig{})
	v, err := decodeSafely(d)
	if err != nil {
		return nil, &ParseError{Name: name, Msg: "not a PyTorch snapshot (bad pickle: " + err.Error() + ")", Err: errors.Join(ErrNotTrace, err)}
	}
	top, ok := v.(map[any]any)
	if !ok {
		return nil, notSnapshot(name, fmt.Sprintf("the pickle holds %s, not a dict", pyType(v)))
	}
	segs, ok := top["segments"].([]any)
	if !ok {
		return nil, notSnapshot(name, "no segments list")
	}
	p := &snapParser{name: name}
	s := &Snapshot{}
	for i, sv := range segs {
		seg := p.segment(sv, fmt.Sprintf("segments[%d]", i))
		if p.err != nil {
			return nil, p.err
		}
		s.Segments = append(s.Segments, seg)
	}
	if tv, ok := top["device_traces"]; ok && tv != nil {
		traces, ok := tv.([]any)
		if !ok {
			return nil, p.fail("device_traces", "not a list")
		}
		s.Traces = make([][]TraceEntry, len(traces))
		for dev, t := range traces {
			entries, ok := t.([]any)
			if !ok {
				return nil, p.fail(fmt.Sprintf("device_traces[%d]", dev), "not a list")
			}
			s.Traces[dev] = make([]TraceEntry, 0, len(entries))
			for i, ev := range entries {
				e := p.entry(ev, dev, fmt.Sprintf("device_traces[%d][%d]", dev, i))
				if p.err != nil {
					return nil, p.err
				}
				s.Traces[dev] = append(s.Traces[dev], e)
			}
		}
	}
	if as, ok := top["allocator_settings"].(map[any]any); ok {
		s.AllocatorSettings = plain(as).(map[string]any)
	}
	return s, nil
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

// snapParser converts decoded pickle values into a Snapshot's fields,
// keeping the first error.
type snapParser struct {
	name string
	err  error
}

func (p *snapParser) fail(path, msg string) error {
	if p.err == nil {
		p.err = &ParseError{Name: p.name, Msg: path + ": " + msg}
	}
	return p.err
}

func (p *snapParser) dict(v any, path string) map[any]any {
	m, ok := v.(map[any]any)
	if !ok {
		p.fail(path, "not a dict but "+pyType(v))
	}
	return m
}

// int returns the integer at key of m; absent (or None) gives def.
func (p *snapParser) int(m map[any]any, key string, path string, def int64) int64 {
	v, ok := m[key]
	if !ok || v == nil || v == (ogórek.None{}) {
		return def
	}
	switch x := v.(type) {
	case int64:
		return x
	case bool:
		if x {
			return 1
		}
		return 0
	case *big.Int:
		if x.IsInt64() {
			return x.Int64()
		}
	}
	p.fail(path+"."+key, "not an integer of 64 bits: "+pyType(v))
	return def
}

// uint returns the non-negative integer at key of m, like int.
func (p *snapParser) uint(m map[any]any, key string, path string) uint64 {
	v, ok := m[key]
	if !ok || v == nil || v == (ogórek.None{}) {
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

func (p *snapParser) str(m map[any]any, key string, path string) string {
	v, ok := m[key]
	if !ok || v == nil || v == (ogórek.None{}) {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case ogórek.ByteString:
		return string(x)
	case ogórek.Bytes:
		return string(x)
	}
	p.fail(path+"."+key, "not a string but "+pyType(v))
	return ""
}

func (p *snapParser) segment(v any, path string) Segment {
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
		TotalSize:     p.int(m, "total_size", path, 0),
		AllocatedSize: p.int(m, "allocated_size", path, 0),
		ActiveSize:    p.int(m, "active_size", path, 0),
		RequestedSize: p.int(m, "requested_size", path, 0),
		Stream:        p.uint(m, "stream", path),
		SegmentType:   p.str(m, "segment_type", path),
	}
	if b, ok := m["is_expandable"].(bool); ok {
		seg.IsExpandable = b
	}
	if bv, ok := m["blocks"]; ok {
		blocks, ok := bv.([]any)
		if !ok {
			p.fail(path+".blocks", "not a list but "+pyType(bv))
			return seg
		}
		seg.Blocks = make([]SegmentBlock, 0, len(blocks))
		for i, b := range blocks {
			bp := fmt.Sprintf("%s.blocks[%d]", path, i)
			bm := p.dict(b, bp)
			if bm == nil {
				return seg
			}
			blk := SegmentBlock{
				Address: p.uint(bm, "address", bp),
				Size:    p.int(bm, "size", bp, 0),
				State:   p.str(bm, "state", bp),
			}
			blk.RequestedSize = p.int(bm, "requested_size", bp, blk.Size)
			if blk.Size < 0 || blk.RequestedSize < 0 {
				p.fail(bp, "negative size")
			}
			seg.Blocks = append(seg.Blocks, blk)
		}
	}
	return seg
}

func (p *snapParser) entry(v any, dev int, path string) TraceEntry {
	m := p.dict(v, path)
	if m == nil {
		return TraceEntry{}
	}
	e := TraceEntry{
		Action: p.str(m, "action", path),
		Size:   p.int(m, "size", path, 0),
		Stream: p.uint(m, "stream", path),
		TimeUS: p.int(m, "time_us", path, NoTime),
		Device: dev,
	}
	if e.Action == "oom" {
		if _, ok := m["addr"]; !ok {
			e.Addr = p.uint(m, "device_free", path)
		} else {
			e.Addr = p.uint(m, "addr", path)
		}
	} else {
		e.Addr = p.uint(m, "addr", path)
	}
	switch {
	case e.Action == "":
		p.fail(path, "no action")
	case e.Size < 0:
		p.fail(path+".size", "negative: "+strconv.FormatInt(e.Size, 10))
	case e.TimeUS < 0 && e.TimeUS != NoTime:
		p.fail(path+".time_us", "negative: "+strconv.FormatInt(e.TimeUS, 10))
	}
	return e
}

// plain converts a decoded pickle value into plain Go values: dicts with
// string keys become map[string]any (other keys are written with %v),
// tuples and lists []any, None nil, integers int64 where they fit.
func plain(v any) any {
	switch x := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				ks = fmt.Sprint(plain(k))
			}
			m[ks] = plain(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = plain(e)
		}
		return l
	case ogórek.Tuple:
		return plain([]any(x))
	case ogórek.None:
		return nil
	case ogórek.ByteString:
		return string(x)
	case ogórek.Bytes:
		return string(x)
	case *big.Int:
		if x.IsInt64() {
			return x.Int64()
		}
	}
	return v
}

// pyType names the Python type of a decoded value, for messages.
func pyType(v any) string {
	switch v.(type) {
	case nil, ogórek.None:
		return "None"
	case map[any]any:
		return "a dict"
	case []any:
		return "a list"
	case ogórek.Tuple:
		return "a tuple"
	case string, ogórek.ByteString:
		return "a string"
	case ogórek.Bytes:
		return "bytes"
	case int64, *big.Int:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a bool"
	}
	return fmt.Sprintf("%T", v)
}

// sortedDevices returns the device indices of the snapshot's segments and
// traces, in order.
func (s *Snapshot) devices() []int {
	seen := map[int]bool{}
	for d := range s.Traces {
		seen[d] = true
	}
	for _, seg := range s.Segments {
		seen[seg.Device] = true
	}
	devs := make([]int, 0, len(seen))
	for d := range seen {
		devs = append(devs, d)
	}
	sort.Ints(devs)
	return devs
}
