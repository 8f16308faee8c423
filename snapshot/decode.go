package snapshot

import (
	"io"

	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
	"github.com/gpualloc/gpualloc/snapshot/internal/pickle"
)

// The decoder runs a pickle over the snapshot model: it runs no code and
// builds no generic object tree for the parts of a snapshot that the
// package models. Each container gets a role when it is created, from its
// place (the dict key or list it goes into): a trace entry's dict is kept
// as a handful of scalar fields until it is appended to its trace, then
// converted into a TraceEntry and its container reused. The machine's
// memo keeps 8 bytes per entry (pickle.Memo): a scalar, a string of the
// interned string table, a container, or, set by the decoder when a
// container is released (release), a reference to what it became (a
// trace entry, a segment, a frame, a stack), so that a list referenced
// twice decodes the same both times.
//
// The reader, from the bytes up, in three layers:
//   - internal/pages, at the bottom: lists held in pages, which go to a
//     temporary file past a bound (pages.List, pages.Spill), each value
//     written there by its user's pages.Codec.
//   - internal/pickle, below, which knows nothing of a snapshot: the
//     input's buffer and read-ahead, the opcodes and their encodings, a
//     pickle's faults at their offsets, and the machine (pickle.Machine):
//     its values, stack and marks, interned strings and big integers, its
//     memo (pickle.Memo: the slots in order, in pages, and those out of
//     order apart, each with a tag byte), the dispatch of each opcode
//     (Machine.Step) and the fast path of the opcodes that only push a
//     value (Machine.PushRun). It runs the opcodes of scalars and of the
//     memo itself; for the others it takes their values off the stack,
//     checks their number, and calls its pickle.Builder: a container
//     created at the place the stack tells, items appended, keys set,
//     values dropped or shared, a memo slot about to be stored
//     (Memoized), which returns the entry's tag. Containers are handles
//     to it (a KCont's X), memo slots indexes.
//   - this package, above, whose decoder embeds the machine and is its
//     Builder; Go's import rules keep the machine from naming anything of
//     it. The decoder keeps track of which slot a container sits in, tags
//     the frames (memoTag), and sets a slot to what its container became:
//   - decode.go (this file): the loop over the opcodes and the Builder's
//     methods;
//   - spill.go: the read's spill, and how a trace's records are written
//     to it (recCodec);
//   - runs.go: the decoder's fast paths over the buffer: the machine's
//     for the memo references and small integers that make up most of a
//     big file, and its own for the frames of a "frames" list that a
//     batch refers to (absorb), read by their tags;
//   - schema.go: which container is what (its role), from its place;
//   - build.go: the containers, and what an item or a key does to its
//     container by the container's role;
//   - model.go, fields.go: what the containers become (entries, blocks,
//     segments, frames, stacks), each field checked as the package doc says;
//   - read.go: ReadWith, which runs the decoder over an input and turns
//     its errors into one line.

// The machine's values and kinds, by the short names that the decoder
// reads them by.
type (
	val   = pickle.Val
	kind  = pickle.Kind
	ctype = pickle.CType
)

const (
	kMark  = pickle.KMark
	kNone  = pickle.KNone
	kBool  = pickle.KBool
	kInt   = pickle.KInt
	kUint  = pickle.KUint
	kBig   = pickle.KBig
	kFloat = pickle.KFloat
	kStr   = pickle.KStr
	kBytes = pickle.KBytes
	kCont  = pickle.KCont // X indexes decoder.conts: a list, dict, tuple or set
	kSkip  = pickle.KSkip // X is a ctype: a container that the model does not read (see skipChild)
	kModel = pickle.KUser // the first of the kinds of what a container became (see model.go)

	ctList  = pickle.List
	ctDict  = pickle.Dict
	ctTuple = pickle.Tuple
	ctSet   = pickle.Set

	// sink stands for a skipped container, where the decoder tells a
	// container by its index: as a MARK's owner, as where a value goes,
	// as the target of an APPEND or a SETITEM.
	sink = pickle.Sink
)

// The limits of the decoder. Each is a bound on what a file describes, so
// that memory grows with the file, never with how often it refers to its
// memo.
const (
	// MaxRepeated is the most trace entries, blocks and segments that a
	// snapshot may repeat through memo references, in all: PyTorch writes
	// each once, and a file that repeats one segment of 10,000 blocks
	// 100,000 times is refused rather than expanded.
	MaxRepeated = 1 << 20
)

// decoder runs the pickle machine over one input, its containers and memo
// those of the snapshot model.
type decoder struct {
	pickle.Machine
	sp *pages.Spill // where the memo's and the traces' pages go past the bound

	conts  []cont   // containers; free ones are listed in free
	free   []int32  // reusable modelled containers
	fields []fields // the fields of modelled dicts, each kept by its container

	m model // what the containers became

	absorbed []uint32 // memo indexes of the frames that absorb took for the top MARK's list
	absRun   bool     // absorbed is a frameRun's idx, and absOwn the decoder's slice for it
	absOwn   []uint32
	absIDs   []byte     // with the stacks: the frame indexes of absorbed's first len(absIDs)/4
	absEC    bool       // one of absorbed is on the empty-cache path
	runs     []frameRun // runs of frames read before, by slot (runHash); nil in a small file
	runTags  []uint32   // each slot's tag, 0 where empty
	runBytes [][]byte   // each slot's bytes
	runGen   uint32     // the memo's Gen for which the slots stand
	runNext  uint32     // counts the runs recorded, for the place of the next
	noStacks bool       // ReadOptions.NoStacks
	runsFrom int        // the memo entries from which runs are looked up
	maxTrace int        // the most entries of a device's trace
	repeated int        // entries, blocks and segments copied from the memo
}

// keyOf returns the modelled key that string i is, or noKey.
func (d *decoder) keyOf(i uint64) fieldKey { return fieldKey(d.StrTags[i]) }

// run decodes the pickle up to its STOP and returns the value left.
func (d *decoder) run() (val, error) {
	in := &d.In
	if !in.Need(2) {
		return val{}, d.IOErr()
	}
	for d.Err == nil {
		if in.Pos >= in.End && !in.Need(1) {
			if in.Err == io.EOF {
				return val{}, &pickle.Error{Off: in.Off(), Msg: "truncated: the input ends before the pickle's STOP"}
			}
			return val{}, d.IOErr()
		}
		d.OpOff = in.Off()
		op := in.Buf[in.Pos]
		in.Pos++
		if pickle.Pushes[op] && d.memoRun(op) {
			continue
		}
		if len(d.absorbed) > 0 && op != pickle.OpAppends {
			d.unabsorb()
		}
		if op == pickle.OpStop {
			if len(d.Stack) != 1 || len(d.Marks) != 0 {
				d.Fail("STOP with %d values on the stack, not one", len(d.Stack))
				break
			}
			return d.Stack[0], nil
		}
		d.Step(d, op)
	}
	return val{}, d.Err
}

// The decoder is its machine's pickle.Builder: the machine's Step takes
// each opcode's values off the stack and calls these methods with them,
// which give the containers and the memo their meaning in the model.

// Create pushes a new empty container of type t, its role told by its
// place.
func (d *decoder) Create(t ctype) { d.Push(d.newCont(t)) }

// Collect pushes a container of type t of the items.
func (d *decoder) Collect(t ctype, items []val) {
	d.Push(d.generic(t, items)) // generic copies the items before push overwrites them
}

// Append appends the items to the open list or set below them; a batch
// of frames for a "frames" list goes in at once (appendFrames).
func (d *decoder) Append(t ctype, op byte, items []val) {
	p, ok := d.target(t, op)
	if !ok {
		return
	}
	if c := d.contAt(p); c != nil && c.role == rStack && op != pickle.OpAppend {
		items = d.appendFrames(c, items)
	}
	for _, v := range items {
		if d.add(p, v); d.Err != nil {
			return
		}
	}
}

// SetItems sets the keys to the values, in pairs, of the items in the
// open dict below them. A value that is no container, at a key of a
// modelled dict that does not hold one (scalarKeys), is most of a
// snapshot's items: it is stored here, as set would, without set's
// cases for the others.
func (d *decoder) SetItems(op byte, items []val) {
	p, ok := d.target(ctDict, op)
	if !ok {
		return
	}
	var keys uint32
	var f *fields // p's where keys are some, again after each set, which may move it
	fi := int32(-1)
	if p != sink {
		c := &d.conts[p]
		if keys, fi = scalarKeys[c.role], c.fi; keys != 0 {
			f = &d.fields[fi]
		}
	}
	for ; len(items) >= 2; items = items[2:] {
		k, v := items[0], items[1]
		if keys != 0 && k.K == kStr && v.K != kCont && v.K != kSkip {
			// keyOf is noKey, past the bits of keys, for a key not modelled.
			if fk := d.keyOf(k.X); keys&(1<<fk) != 0 && (!f.present(fk) || f.v[fk].K != kCont) {
				f.has |= 1 << fk
				f.v[fk] = v
				continue
			}
		}
		if d.set(p, k, v); d.Err != nil {
			return
		}
		if keys != 0 {
			f = &d.fields[fi]
		}
	}
}

// Drop discards values popped from the stack.
func (d *decoder) Drop(items []val) {
	for _, v := range items {
		d.drop(v)
	}
}

// Memoized keeps track, as the machine stores v in memo slot i over
// old, of the slot that a container sits in (cont.memo), so that what it
// becomes goes to that slot (release), and of a container that two slots
// hold or one that the memo keeps apart (far), which stays whole
// (cont.shared). It returns v's tag: isFrame, | isEC, for absorb.
func (d *decoder) Memoized(i uint64, v, old val, far bool) uint8 {
	// A container that the slot held no longer names it: what it becomes
	// goes to its other slots only, as in Python, where the slot now
	// holds v.
	if old.K == kCont && d.conts[old.X].memo == int64(i) {
		d.conts[old.X].memo = -1
	}
	if v.K == kCont {
		c := &d.conts[v.X]
		if c.memo >= 0 && c.memo != int64(i) {
			c.shared = true // two memo slots: keep it whole
		}
		if !far {
			c.memo = int64(i)
		} else {
			c.shared = true // apart: kept whole, never released
		}
	}
	return memoTag(v)
}

// Share notes that a container is referenced more than once, so that it
// outlives its first use.
func (d *decoder) Share(v val) {
	if v.K == kCont {
		d.conts[v.X].shared = true
	}
}

// target returns the open container under the values just popped, which
// the APPEND, SETITEM or their batches of opcode op go into: sink for a
// container skipped.
func (d *decoder) target(want ctype, op byte) (int32, bool) {
	n := len(d.Stack)
	if n > 0 && d.Stack[n-1].K == kSkip {
		if t := ctype(d.Stack[n-1].X); t != want {
			d.Fail("%s into %s", pickle.Name(op), t.PyName())
			return 0, false
		}
		return sink, true
	}
	if n == 0 || d.Stack[n-1].K != kCont {
		what := "nothing"
		if n > 0 {
			what = d.typeName(d.Stack[n-1])
		}
		d.Fail("%s into %s", pickle.Name(op), what)
		return 0, false
	}
	c := &d.conts[d.Stack[n-1].X]
	if c.typ != want {
		d.Fail("%s into %s", pickle.Name(op), c.typ.PyName())
		return 0, false
	}
	if c.done.K != kMark {
		d.Fail("%s into a container already used", pickle.Name(op))
		return 0, false
	}
	return int32(d.Stack[n-1].X), true
}

// drop discards a value popped from the stack.
func (d *decoder) drop(v val) {
	if v.K == kCont {
		d.release(int32(v.X))
	}
}
