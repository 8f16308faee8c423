// Package viewercheck checks that a PyTorch memory snapshot, as raw pickle
// bytes, holds to what PyTorch's memory viewer (torch/utils/viz/MemoryViz.js,
// the page behind pytorch.org/memory_viz) needs of it: the container and
// opcodes its own unpickler reads, the fields and their types, blocks that
// tile their segments, and a trace that its "Allocator State History" view
// can walk backwards from the segments without meeting an address it does
// not know. Tests run it on every snapshot the project writes.
package viewercheck

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Options say what else [Check] requires.
type Options struct {
	// Complete says that the trace starts from an empty allocator (no
	// ring-buffer window): walked back to its first entry, the state must
	// hold no segment and no block, so that the segments are exactly the
	// state after the last entry.
	Complete bool
}

// Check returns the first way in which data breaks the viewer's rules, or
// nil. Its errors name the field at fault ("segments[3].blocks[0].size:
// a str, not a number") or the trace entry ("device_traces[0][12]:
// free_requested of 0x7f40...: no block there").
func Check(data []byte, o Options) error {
	v, err := unpickle(data)
	if err != nil {
		return err
	}
	top, ok := v.(*dict)
	if !ok {
		return fmt.Errorf("the pickle holds a %s, not a dict", typeName(v))
	}
	c := &checker{}
	c.top(top)
	if c.err != nil {
		return c.err
	}
	for dev := range c.traces {
		c.walk(dev, o.Complete)
		if c.err != nil {
			return c.err
		}
	}
	return nil
}

type checker struct {
	err    error
	segs   []segment
	traces [][]entry
}

type segment struct {
	device     int64
	addr, size int64
	stream     int64
	blocks     []block
	path       string
}

type block struct {
	addr, size, requested int64
	state                 string
}

type entry struct {
	action           string
	addr, size       int64
	stream           int64
	path             string
	category         string
	hasCategory, oom bool
}

func (c *checker) fail(path, format string, args ...any) {
	if c.err == nil {
		c.err = errors.New(path + ": " + fmt.Sprintf(format, args...))
	}
}

// field returns d[key]; a missing key is an error when required.
func (c *checker) field(d *dict, key, path string, required bool) (any, bool) {
	v, ok := d.m[key]
	if !ok && required {
		c.fail(path, "no %q", key)
	}
	return v, ok
}

func (c *checker) num(d *dict, key, path string, required bool) int64 {
	v, ok := c.field(d, key, path, required)
	if !ok {
		return 0
	}
	n, isInt := v.(int64)
	if !isInt {
		c.fail(path+"."+key, "a %s, not an integer", typeName(v))
	}
	return n
}

func (c *checker) str(d *dict, key, path string, required bool) string {
	v, ok := c.field(d, key, path, required)
	if !ok {
		return ""
	}
	s, isStr := v.(string)
	if !isStr {
		c.fail(path+"."+key, "a %s, not a string", typeName(v))
	}
	return s
}

func (c *checker) list(d *dict, key, path string, required bool) []any {
	v, ok := c.field(d, key, path, required)
	if !ok {
		return nil
	}
	l, isList := v.(*list)
	if !isList || l.tuple {
		c.fail(path+"."+key, "a %s, not a list", typeName(v))
		return nil
	}
	return l.items
}

func (c *checker) dict(v any, path string) *dict {
	d, ok := v.(*dict)
	if !ok {
		c.fail(path, "a %s, not a dict", typeName(v))
	}
	return d
}

func (c *checker) top(top *dict) {
	segs := c.list(top, "segments", "snapshot", true)
	traces := c.list(top, "device_traces", "snapshot", true)
	if v, ok := top.m["allocator_settings"]; ok {
		c.dict(v, "allocator_settings")
	}
	if v, ok := top.m["external_annotations"]; ok {
		if l, isList := v.(*list); !isList || l.tuple {
			c.fail("external_annotations", "a %s, not a list", typeName(v))
		}
	}
	for i, t := range traces {
		path := fmt.Sprintf("device_traces[%d]", i)
		l, ok := t.(*list)
		if !ok || l.tuple {
			c.fail(path, "a %s, not a list", typeName(t))
			return
		}
		var es []entry
		for j, ev := range l.items {
			es = append(es, c.entry(ev, fmt.Sprintf("%s[%d]", path, j)))
		}
		c.traces = append(c.traces, es)
	}
	for i, sv := range segs {
		c.segment(sv, fmt.Sprintf("segments[%d]", i))
	}
	if c.err != nil {
		return
	}
	n := len(segs)
	categories, unknown := false, false
	for _, t := range c.traces {
		n += len(t)
		for _, e := range t {
			categories = categories || e.hasCategory
			unknown = unknown || e.category == "unknown"
		}
	}
	if n == 0 {
		c.fail("snapshot", "no segment and no trace entry: the viewer has nothing to show")
	}
	if categories && !unknown {
		c.fail("device_traces", `entries have categories but none is "unknown", and the viewer fails to load such a file`)
	}
}

var states = []string{"active_allocated", "active_pending_free", "inactive"}

func (c *checker) segment(v any, path string) {
	d := c.dict(v, path)
	if d == nil {
		return
	}
	dev, isInt := d.m["device"].(int64)
	if !isInt {
		c.fail(path+".device", "a %s, not an integer: the viewer draws no segment whose device is not a number", typeName(d.m["device"]))
		return
	}
	if dev < 0 || dev >= int64(len(c.traces)) {
		c.fail(path+".device", "%d, not an index of device_traces (%d devices)", dev, len(c.traces))
		return
	}
	s := segment{device: dev, path: path,
		addr:   c.num(d, "address", path, true),
		size:   c.num(d, "total_size", path, true),
		stream: c.num(d, "stream", path, true),
	}
	for _, k := range []string{"allocated_size", "active_size", "requested_size"} {
		c.num(d, k, path, false)
	}
	c.str(d, "segment_type", path, false)
	if v, ok := d.m["is_expandable"]; ok {
		if _, isBool := v.(bool); !isBool {
			c.fail(path+".is_expandable", "a %s, not a bool", typeName(v))
		}
	}
	c.list(d, "frames", path, false)
	at := s.addr
	for i, bv := range c.list(d, "blocks", path, true) {
		bp := fmt.Sprintf("%s.blocks[%d]", path, i)
		bd := c.dict(bv, bp)
		if bd == nil {
			return
		}
		b := block{addr: at, size: c.num(bd, "size", bp, true), state: c.str(bd, "state", bp, true)}
		_, hasFrames := bd.m["frames"]
		c.list(bd, "frames", bp, false)
		b.requested = c.num(bd, "requested_size", bp, hasFrames)
		if _, ok := bd.m["requested_size"]; !ok {
			b.requested = b.size
		}
		if a, ok := bd.m["address"]; ok && a != at {
			c.fail(bp+".address", "%v, but the blocks before it end at %#x: the viewer places a block where the one before ends", a, at)
		}
		if !slices.Contains(states, b.state) {
			c.fail(bp+".state", "%q, not one of %s", b.state, strings.Join(states, ", "))
		}
		if b.size <= 0 {
			c.fail(bp+".size", "%d, not positive", b.size)
		}
		if b.state != "inactive" && b.requested > b.size {
			c.fail(bp+".requested_size", "%d, more than the block's %d bytes", b.requested, b.size)
		}
		c.str(bd, "category", bp, false)
		at += b.size
		s.blocks = append(s.blocks, b)
	}
	if c.err == nil && at != s.addr+s.size {
		c.fail(path+".blocks", "they cover %d bytes of a segment of %d", at-s.addr, s.size)
	}
	c.segs = append(c.segs, s)
}

var actions = []string{"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
	"segment_map", "segment_unmap", "snapshot", "oom"}

func (c *checker) entry(v any, path string) entry {
	d := c.dict(v, path)
	if d == nil {
		return entry{}
	}
	e := entry{path: path, action: c.str(d, "action", path, true)}
	if !slices.Contains(actions, e.action) {
		c.fail(path+".action", "%q, not one of %s", e.action, strings.Join(actions, ", "))
	}
	switch e.action {
	case "oom":
		e.oom = true
		c.num(d, "device_free", path, true)
		e.size = c.num(d, "size", path, true)
	case "snapshot":
	default:
		e.addr = c.num(d, "addr", path, true)
		e.size = c.num(d, "size", path, true)
		if e.size <= 0 {
			c.fail(path+".size", "%d, not positive", e.size)
		}
	}
	if e.action != "snapshot" {
		e.stream = c.num(d, "stream", path, true)
	}
	c.num(d, "time_us", path, false)
	c.list(d, "frames", path, false)
	if _, ok := d.m["category"]; ok {
		e.hasCategory = true
		e.category = c.str(d, "category", path, true)
	}
	return e
}

// A state is what the viewer's "Allocator State History" holds at one event
// of a device: segments in address order and blocks by address.
type state struct {
	segs   []span // sorted by address
	blocks map[int64]blk
}

type span struct{ addr, size, stream int64 }

type blk struct {
	size          int64
	freeRequested bool
}

func (s *state) find(addr int64) int {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].addr+s.segs[i].size > addr })
	if i < len(s.segs) && s.segs[i].addr <= addr {
		return i
	}
	return -1
}

// overlaps reports whether a segment overlaps [addr, addr+size).
func (s *state) overlaps(addr, size int64) bool {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].addr+s.segs[i].size > addr })
	return i < len(s.segs) && s.segs[i].addr < addr+size
}

// blockIn returns a block starting in [addr, addr+size), if any.
func (s *state) blockIn(addr, size int64) (int64, bool) {
	for a := range s.blocks {
		if a >= addr && a < addr+size {
			return a, true
		}
	}
	return 0, false
}

// walk walks device dev's trace backwards from the segments, as the viewer
// does to show the state at an earlier event, and fails at the first entry
// that would break that view: a free whose address no segment holds (the
// viewer cannot place the block), a free_requested or an alloc of an address
// where no block is live, a segment_alloc or segment_map of memory the
// segments do not hold or that still holds blocks, a segment_free or
// segment_unmap of memory that a segment already holds.
func (c *checker) walk(dev int, complete bool) {
	st := &state{blocks: map[int64]blk{}}
	for _, s := range c.segs {
		if s.device != int64(dev) {
			continue
		}
		st.segs = append(st.segs, span{s.addr, s.size, s.stream})
		at := s.addr
		for _, b := range s.blocks {
			if b.state != "inactive" {
				st.blocks[at] = blk{size: b.size, freeRequested: b.state == "active_pending_free"}
			}
			at += b.size
		}
	}
	sort.Slice(st.segs, func(i, j int) bool { return st.segs[i].addr < st.segs[j].addr })
	for i := 1; i < len(st.segs); i++ {
		if p := st.segs[i-1]; p.addr+p.size > st.segs[i].addr {
			c.fail("segments", "device %d: segments at %#x and %#x overlap", dev, p.addr, st.segs[i].addr)
			return
		}
	}
	es := c.traces[dev]
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		// The viewer draws a free_requested followed by its free_completed
		// as one free.
		freeBoth := e.action == "free_completed" && i > 0 && es[i-1].action == "free_requested" && es[i-1].addr == e.addr
		switch e.action {
		case "free_completed":
			if _, ok := st.blocks[e.addr]; ok {
				c.fail(e.path, "free_completed of %#x, where a block is still live after it", e.addr)
				return
			}
			if k := st.find(e.addr); k < 0 || st.segs[k].addr+st.segs[k].size < e.addr+e.size {
				c.fail(e.path, "free_completed of %#x (%d bytes), which no segment holds: the viewer cannot place the block", e.addr, e.size)
				return
			}
			st.blocks[e.addr] = blk{size: e.size, freeRequested: !freeBoth}
			if freeBoth {
				i-- // the free_requested is part of it
			}
		case "free_requested":
			b, ok := st.blocks[e.addr]
			if !ok {
				c.fail(e.path, "free_requested of %#x, where no block is live after it", e.addr)
				return
			}
			b.freeRequested = false
			st.blocks[e.addr] = b
		case "alloc":
			b, ok := st.blocks[e.addr]
			if !ok {
				c.fail(e.path, "alloc of %#x, which is not live after it (no free, no block in the segments)", e.addr)
				return
			}
			if b.freeRequested {
				c.fail(e.path, "alloc of %#x, which is pending free after it without a free_requested", e.addr)
				return
			}
			delete(st.blocks, e.addr)
		case "segment_free", "segment_unmap":
			if st.overlaps(e.addr, e.size) {
				c.fail(e.path, "%s of %#x (%d bytes), memory that a segment holds after it", e.action, e.addr, e.size)
				return
			}
			st.insert(span{e.addr, e.size, e.stream}, e.action == "segment_unmap")
		case "segment_alloc":
			k := st.find(e.addr)
			if k < 0 || st.segs[k].addr != e.addr || st.segs[k].size != e.size {
				c.fail(e.path, "segment_alloc of %#x (%d bytes), which is not a segment after it", e.addr, e.size)
				return
			}
			if a, ok := st.blockIn(e.addr, e.size); ok {
				c.fail(e.path, "segment_alloc of %#x (%d bytes), which holds the block at %#x before its alloc", e.addr, e.size, a)
				return
			}
			st.segs = slices.Delete(st.segs, k, k+1)
		case "segment_map":
			k := st.find(e.addr)
			if k < 0 || st.segs[k].addr+st.segs[k].size < e.addr+e.size {
				c.fail(e.path, "segment_map of %#x (%d bytes), which no segment holds after it", e.addr, e.size)
				return
			}
			if a, ok := st.blockIn(e.addr, e.size); ok {
				c.fail(e.path, "segment_map of %#x (%d bytes), which holds the block at %#x before its alloc", e.addr, e.size, a)
				return
			}
			st.cut(k, e.addr, e.size)
		}
	}
	if complete && (len(st.segs) > 0 || len(st.blocks) > 0) {
		c.fail(fmt.Sprintf("device_traces[%d]", dev), "the trace does not start from an empty allocator: before its first entry, %d segments and %d blocks (the first segment at %#x)",
			len(st.segs), len(st.blocks), firstAddr(st.segs))
	}
}

func firstAddr(s []span) int64 {
	if len(s) == 0 {
		return 0
	}
	return s[0].addr
}

// insert adds a segment; a mapped range merges with its neighbours of the
// same stream, as the viewer merges them.
func (s *state) insert(g span, merge bool) {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].addr > g.addr })
	s.segs = slices.Insert(s.segs, i, g)
	if !merge {
		return
	}
	if i+1 < len(s.segs) && g.addr+g.size == s.segs[i+1].addr && g.stream == s.segs[i+1].stream {
		s.segs[i].size += s.segs[i+1].size
		s.segs = slices.Delete(s.segs, i+1, i+2)
	}
	if i > 0 && s.segs[i-1].addr+s.segs[i-1].size == s.segs[i].addr && s.segs[i-1].stream == s.segs[i].stream {
		s.segs[i-1].size += s.segs[i].size
		s.segs = slices.Delete(s.segs, i, i+1)
	}
}

// cut removes [addr, addr+size) from segment k, which holds it.
func (s *state) cut(k int, addr, size int64) {
	g := s.segs[k]
	end, gend := addr+size, g.addr+g.size
	switch {
	case g.addr == addr && gend == end:
		s.segs = slices.Delete(s.segs, k, k+1)
	case g.addr == addr:
		s.segs[k].addr, s.segs[k].size = end, gend-end
	case gend == end:
		s.segs[k].size = addr - g.addr
	default:
		s.segs[k].size = addr - g.addr
		s.segs = slices.Insert(s.segs, k+1, span{end, gend - end, g.stream})
	}
}
