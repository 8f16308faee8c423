package snapshot

import (
	"encoding/binary"
	"slices"
	"strconv"

	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
)

// A cont is a container being built or kept.
type cont struct {
	typ    ctype
	role   role
	shared bool  // referenced more than once: kept after its first use
	memo   int64 // the memo slot that holds it, or -1
	parent int32 // the container it goes into, or -1
	idx    int32 // its index in a parent list
	key    int64 // its key's string in a parent dict, or -1
	count  int32 // items added
	num    uint32
	done   val      // what it became once used; kMark before
	items  []val    // a generic container's items, or a dict's keys and values
	ids    []byte   // a stack's frame indexes, 4 bytes each
	ec     bool     // a stack's frames include one on the empty-cache path
	lists  []uint32 // device_traces: the trace list of each device
	fi     int32    // a modelled dict's fields in decoder.fields, or -1
}

// newCont creates a container of type t, its role told by its place, or
// returns a kSkip where the model does not read it.
func (d *decoder) newCont(t ctype) val {
	parent, idx, key := d.place(t)
	r := rGeneric
	switch {
	case parent == sink:
		return val{K: kSkip, X: uint64(t)}
	case parent >= 0:
		fk := noKey
		if key >= 0 {
			fk = d.keyOf(uint64(key))
		}
		pr := d.conts[parent].role
		if skipChild(pr, fk) {
			return val{K: kSkip, X: uint64(t)}
		}
		r = childRole(pr, fk, t)
	case len(d.Stack) == 0 && t == ctDict:
		r = rTop
	case len(d.Stack) == 0 && t == ctList:
		r = rLegacy
	}
	return val{K: kCont, X: uint64(d.alloc(t, r, parent, idx, key))}
}

// skippedHere records that the kSkip v stands where the model reads a
// value, at path: a memo reference to a container first written where
// the model does not read it.
func (d *decoder) skippedHere(path string, v val) {
	d.failAt(path, "refers through the memo to "+d.typeName(v)+" first written under a key that the reader skips, "+
		"which it does not keep")
}

// appendFrames adds to the stack c the frames of a batch of items that
// memoRun absorbed, then those at the start of items, and returns the
// items after them, for add: the hot path of a snapshot with frames, whose
// batches are memo references to frame dicts already read.
func (d *decoder) appendFrames(c *cont, items []val) []val {
	d.commitAbsorbed(c)
	n := 0
	ec := uint64(0)
	for n < len(items) && items[n].K == kFrame {
		ec |= items[n].X
		n++
	}
	c.ec = c.ec || ec&frameEC != 0
	at := len(c.ids)
	c.ids = slices.Grow(c.ids, 4*n)[:at+4*n]
	for j, it := range items[:n] {
		binary.LittleEndian.PutUint32(c.ids[at+4*j:], uint32(it.X))
	}
	c.count += int32(n)
	return items[n:]
}

// contAt returns container p, nil for sink.
func (d *decoder) contAt(p int32) *cont {
	if p < 0 {
		return nil
	}
	return &d.conts[p]
}

// alloc returns a fresh container.
func (d *decoder) alloc(t ctype, r role, parent, idx int32, key int64) int32 {
	var i int32
	if r != rGeneric && len(d.free) > 0 {
		i = d.free[len(d.free)-1]
		d.free = d.free[:len(d.free)-1]
	} else {
		d.conts = append(d.conts, cont{fi: -1})
		i = int32(len(d.conts) - 1)
	}
	c := &d.conts[i]
	fi := c.fi
	switch {
	case r == rGeneric || t != ctDict:
		// A list keeps the fields it had, for when it is reused as a
		// dict.
	case fi < 0:
		d.fields = append(d.fields, fields{})
		fi = int32(len(d.fields) - 1)
	default:
		d.fields[fi].has = 0 // the values of keys not had are never read
	}
	// Field by field, keeping the stack's buffer: the slices are written
	// only when they hold something, for fewer write barriers.
	c.typ, c.role, c.shared, c.memo, c.parent, c.idx, c.key = t, r, false, -1, parent, idx, key
	c.count, c.num, c.done, c.fi, c.ec = 0, 0, val{K: kMark}, fi, false
	c.ids = c.ids[:0]
	if c.items != nil {
		c.items = nil
	}
	if c.lists != nil {
		c.lists = nil
	}
	switch r {
	case rSegments, rLegacy:
		c.num = uint32(len(d.m.segs))
		d.m.segs = append(d.m.segs, nil)
	case rBlocks:
		c.num = uint32(len(d.m.blocks))
		d.m.blocks = append(d.m.blocks, []Block{})
	case rTrace:
		c.num = uint32(len(d.m.traces))
		d.m.traces = append(d.m.traces, traceList{recs: pages.New(d.sp, recCodec)})
	}
	return i
}

// release frees a container that was used and is referenced from nowhere
// else; one in the memo or shared stays, as what it became.
func (d *decoder) release(i int32) {
	c := &d.conts[i]
	if c.done.K != kMark && c.memo >= 0 {
		d.Memo.Set(uint64(c.memo), c.done, memoTag(c.done))
		c.memo = -1
	}
	if c.shared || c.memo >= 0 || c.role == rGeneric {
		return
	}
	c.done = val{K: kMark}
	c.typ = ctTuple // no target of an APPEND or SETITEM
	d.free = append(d.free, i)
}

// place returns where a container about to be pushed goes: the container
// (or -1), its index there, and its key's string (or -1).
func (d *decoder) place(t ctype) (int32, int32, int64) {
	n := len(d.Stack)
	lastMark, owner := -1, int32(-1)
	if len(d.Marks) > 0 {
		m := d.Marks[len(d.Marks)-1]
		lastMark, owner = m.Pos, m.Owner
	}
	// Right above an open list: its one item (APPEND), or the next item of
	// what holds the list when the list is empty and takes other items.
	if n > 0 && lastMark < n-1 && d.Stack[n-1].K == kSkip && ctype(d.Stack[n-1].X) != ctDict {
		return sink, 0, -1 // an item of a skipped list or set
	}
	// Above a tuple's first items.
	if owner < 0 || d.conts[owner].typ != ctDict {
		if p, ok := d.tuplePlace(n, lastMark); ok {
			return p, 0, -1
		}
	}
	if n > 1 && lastMark < n-2 && d.Stack[n-1].K == kStr && d.Stack[n-2].K == kSkip && ctype(d.Stack[n-2].X) == ctDict {
		// A value for a key of a skipped dict (SETITEM), unless the dict
		// may be a value of the MARK's dict, done, and the key one of
		// that dict's, whose value the model reads: then a container of
		// no place, which that dict's field converts, as it would one
		// read before its place.
		if owner >= 0 && !skipChild(d.conts[owner].role, d.keyOf(d.Stack[n-1].X)) {
			return -1, 0, -1
		}
		return sink, 0, -1
	}
	if n > 0 && lastMark < n-1 && d.Stack[n-1].K == kCont {
		c := &d.conts[d.Stack[n-1].X]
		if c.typ == ctList && c.done.K == kMark {
			if it, ok := itemType(c.role); !ok || it == t {
				return int32(d.Stack[n-1].X), c.count, -1
			}
		}
	}
	// A value for a key (SETITEM).
	if n > 1 && lastMark < n-2 && d.Stack[n-1].K == kStr && d.Stack[n-2].K == kCont && d.conts[d.Stack[n-2].X].typ == ctDict {
		return int32(d.Stack[n-2].X), 0, int64(d.Stack[n-1].X)
	}
	if owner < 0 {
		return owner, 0, -1 // none, or sink
	}
	c := &d.conts[owner]
	k := n - lastMark - 1
	switch c.typ {
	case ctList, ctSet:
		return owner, c.count + int32(k), -1
	case ctDict:
		if k%2 == 1 && d.Stack[n-1].K == kStr {
			return owner, 0, int64(d.Stack[n-1].X)
		}
	}
	return -1, 0, -1
}

// tuplePlace tells the place of a container pushed above the first items
// of a tuple (TUPLE1 to TUPLE3 take up to three values pushed with no
// MARK): part of the tuple that goes into a list below them, or into a
// dict below them at the key above it. It is sink where that list, or
// that dict's key, is skipped, and -1 (a place unknown, which the field
// that takes it converts) otherwise; ok is false where the stack holds
// no such tuple items. Only where the MARK below is not a dict's, whose
// next keys and values such items could be.
func (d *decoder) tuplePlace(n, lastMark int) (int32, bool) {
	for i := n - 1; i > lastMark && i >= n-4; i-- {
		v := d.Stack[i]
		if v.K != kCont && v.K != kSkip {
			continue
		}
		t := ctype(v.X)
		if v.K == kCont {
			t = d.conts[v.X].typ
		}
		switch {
		case t != ctDict && i < n-1:
			if v.K == kSkip {
				return sink, true
			}
			return -1, true
		case t == ctDict && i < n-2 && d.Stack[i+1].K == kStr:
			if v.K == kSkip || skipChild(d.conts[v.X].role, d.keyOf(d.Stack[i+1].X)) {
				return sink, true
			}
			return -1, true
		}
		return 0, false
	}
	return 0, false
}

// generic returns a new generic container of the given items, or a
// kSkip where the model does not read it.
func (d *decoder) generic(t ctype, items []val) val {
	if parent, _, key := d.place(t); parent == sink || parent >= 0 && key >= 0 && skipChild(d.conts[parent].role, d.keyOf(uint64(key))) {
		for _, v := range items {
			d.drop(v)
		}
		return val{K: kSkip, X: uint64(t)}
	}
	i := d.alloc(t, rGeneric, -1, 0, -1)
	c := &d.conts[i]
	c.items = append([]val(nil), items...)
	c.count = int32(len(items))
	if t == ctDict {
		c.count /= 2
	}
	return val{K: kCont, X: uint64(i)}
}

// path returns the path of container i in the snapshot, as messages name
// it: "segments[3].blocks[0]".
func (d *decoder) path(i int32) string {
	if i < 0 {
		return ""
	}
	c := &d.conts[i]
	if c.role == rLegacy {
		return "segments"
	}
	if c.parent < 0 {
		return ""
	}
	pp := d.path(c.parent)
	if c.key >= 0 {
		return join(pp, d.Strs[c.key])
	}
	return pp + "[" + strconv.Itoa(int(c.idx)) + "]"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// A fieldError is a modelled field of the wrong type or value.
type fieldError struct{ msg string }

func (e *fieldError) Error() string { return e.msg }

// failAt records that the field at path is wrong.
func (d *decoder) failAt(path, msg string) {
	if d.Err == nil {
		d.Err = &fieldError{path + ": " + msg}
	}
}

// typeName names the Python type of a value, for messages.
func (d *decoder) typeName(v val) string {
	switch v.K {
	case kNone:
		return "None"
	case kBool:
		return "a bool"
	case kInt, kUint, kBig:
		return "an integer"
	case kFloat:
		return "a float"
	case kStr:
		return "a string"
	case kBytes:
		return "bytes"
	case kCont:
		return d.conts[v.X].typ.PyName()
	case kSkip:
		return ctype(v.X).PyName()
	case kEntry, kBlock, kSegment, kFrame:
		return "a dict"
	}
	return "a list"
}

// add appends v to the list (or set) p.
func (d *decoder) add(p int32, v val) {
	if p == sink {
		d.drop(v)
		return
	}
	c := &d.conts[p]
	at := itemAt{p, c.count}
	switch c.role {
	case rLegacy, rSegments:
		if c.role == rLegacy && c.count == 0 && !d.looksLikeSegment(v) {
			d.Err = errNotSnapshot("the pickle holds a list, not a dict or a list of segments")
			return
		}
		if seg, ok := d.segmentOf(v, at); ok {
			num := d.conts[p].num
			d.m.segs[num] = append(d.m.segs[num], seg)
		}
	case rBlocks:
		if b, ok := d.blockOf(v, at); ok {
			num := d.conts[p].num
			d.m.blocks[num] = append(d.m.blocks[num], b)
		}
	case rTraces:
		if n, ok := d.traceOf(v, at); ok {
			d.conts[p].lists = append(d.conts[p].lists, n)
		}
	case rTrace:
		if e, ok := d.entryOf(v, at); ok {
			num := d.conts[p].num
			if d.m.traces[num].recs.Len() >= d.maxTrace {
				d.failAt(d.pathOf(at), "more than "+strconv.Itoa(d.maxTrace)+" entries in a device's trace, the most this reader takes")
				return
			}
			d.m.traces[num].append(e, d.Strs)
		}
	case rStack:
		if f, ok := d.frameOf(v, at); ok {
			c = &d.conts[p]
			if cap(c.ids)-len(c.ids) < 4 {
				c.ids = slices.Grow(c.ids, 4*minFrames) // one allocation, not several
			}
			c.ids = append(c.ids, byte(f), byte(f>>8), byte(f>>16), byte(f>>24))
			c.ec = c.ec || d.m.frameEC[f]
		}
	default:
		c.items = append(c.items, v)
	}
	d.conts[p].count++
}

// set sets key k of dict p to v.
func (d *decoder) set(p int32, k, v val) {
	if p == sink {
		d.drop(v)
		return
	}
	c := &d.conts[p]
	if c.role == rGeneric {
		c.items = append(c.items, k, v)
		c.count++
		return
	}
	fk := noKey
	if k.K == kStr {
		fk = d.keyOf(k.X)
	}
	if fk == noKey || roleKeys[c.role]&(1<<fk) == 0 {
		d.drop(v)
		return
	}
	if v.K == kSkip && holdsContainer[fk] {
		d.skippedHere(join(d.path(p), keyNames[fk]), v)
		return
	}
	switch fk {
	case keyFrames:
		v = d.stackVal(v, p)
	case keyBlocks:
		v = d.listVal(v, rBlocks, p, k)
	case keySegments:
		v = d.listVal(v, rSegments, p, k)
	case keyDeviceTraces:
		v = d.listVal(v, rTraces, p, k)
	}
	c = &d.conts[p]
	f := &d.fields[c.fi]
	if f.present(fk) && f.v[fk].K == kCont {
		d.drop(f.v[fk]) // a key given twice
	}
	f.has |= 1 << fk
	f.v[fk] = v
}

// listVal returns a list value of a modelled key as a container of role r:
// itself, or a copy of a generic list filled item by item. Other values
// are left for the field's conversion to refuse.
func (d *decoder) listVal(v val, r role, parent int32, key val) val {
	if v.K != kCont {
		return v
	}
	c := &d.conts[v.X]
	if c.role == r || c.typ != ctList || c.done.K != kMark {
		return v
	}
	items := c.items
	i := d.alloc(ctList, r, parent, 0, int64(key.X))
	for _, it := range items {
		if d.add(i, it); d.Err != nil {
			break
		}
	}
	return val{K: kCont, X: uint64(i)}
}

// stackVal returns the "frames" value v of dict p as a kStack.
func (d *decoder) stackVal(v val, p int32) val {
	switch v.K {
	case kNone, kStack:
		return v
	case kCont:
	case kSkip:
		d.skippedHere(join(d.path(p), "frames"), v)
		return val{K: kNone}
	default:
		d.failAt(join(d.path(p), "frames"), "not a list but "+d.typeName(v))
		return val{K: kNone}
	}
	c := &d.conts[v.X]
	if c.done.K != kMark {
		return c.done
	}
	if c.typ != ctList {
		d.failAt(join(d.path(p), "frames"), "not a list but "+c.typ.PyName())
		return val{K: kNone}
	}
	i := int32(v.X)
	if c.role != rStack {
		items := c.items
		i = d.alloc(ctList, rStack, c.parent, c.idx, c.key)
		for _, it := range items {
			if d.add(i, it); d.Err != nil {
				return val{K: kNone}
			}
		}
	}
	var s val
	switch ids := d.conts[i].ids; {
	case !d.noStacks:
		s = val{K: kStack, X: uint64(d.m.internStack(ids))}
	case d.conts[i].ec:
		s = val{K: kStack, X: 1}
	default:
		s = val{K: kStack, X: 0}
	}
	d.used(int32(v.X), s)
	if i != int32(v.X) {
		d.release(i)
	}
	return s
}

// used records what container i became, once used, and frees it.
func (d *decoder) used(i int32, became val) {
	c := &d.conts[i]
	c.done = became
	d.release(i)
}

// An itemAt is the place of an item being added to a list.
type itemAt struct {
	list  int32
	index int32
}

func (d *decoder) pathOf(at itemAt) string {
	if at.list < 0 {
		return ""
	}
	return d.path(at.list) + "[" + strconv.Itoa(int(at.index)) + "]"
}

// dictFields returns the fields of a dict value that is to become an item
// of role r: its own for a modelled container, else those of a generic
// dict read key by key. ok is false, with the error recorded, when v is
// not a dict.
func (d *decoder) dictFields(v val, r role, at itemAt) (*fields, int32, bool) {
	if v.K == kSkip {
		d.skippedHere(d.pathOf(at), v)
		return nil, -1, false
	}
	if v.K != kCont || d.conts[v.X].typ != ctDict {
		d.failAt(d.pathOf(at), "not a dict but "+d.typeName(v))
		return nil, -1, false
	}
	c := &d.conts[v.X]
	if c.role == r {
		return &d.fields[c.fi], int32(v.X), true
	}
	items := c.items
	i := d.alloc(ctDict, r, at.list, at.index, -1)
	for j := 0; j+1 < len(items) && d.Err == nil; j += 2 {
		if k := items[j+1]; k.K == kCont {
			d.Share(k) // the generic dict keeps it too
		}
		d.set(i, items[j], items[j+1])
	}
	return &d.fields[d.conts[i].fi], i, d.Err == nil
}

// done reports what a container already became, if it was used before.
func (d *decoder) doneOf(v val) val {
	if v.K == kCont {
		return d.conts[v.X].done
	}
	return v
}

// repeat counts n items copied from the memo.
func (d *decoder) repeat(n int, at itemAt) bool {
	d.repeated += n
	if d.repeated > MaxRepeated {
		d.failAt(d.pathOf(at), "the file repeats more than "+strconv.Itoa(MaxRepeated)+
			" entries, blocks or segments through memo references (PyTorch writes each once): refused")
		return false
	}
	return true
}
