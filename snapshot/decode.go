package snapshot

import (
	"encoding/binary"
	"fmt"
	"github.com/gpualloc/gpualloc/snapshot/internal/pickle"
	"io"
	"math"
	"math/big"
)

// The decoder is a pickle machine of its own, for the opcodes of protocols
// 2 to 5 that hold data: it runs no code and builds no generic object tree
// for the parts of a snapshot that the package models. Each container gets
// a role when it is created, from its place (the dict key or list it goes
// into): a trace entry's dict is kept as a handful of scalar fields until
// it is appended to its trace, then converted into a TraceEntry and its
// container reused. The memo keeps 8 bytes per entry (memoTable): a scalar, a string
// of the interned string table, a container, or a reference to what a
// container became (a trace entry, a segment, a frame, a stack), so that a
// list referenced twice decodes the same both times.
//
// The reader, from the bytes up:
//   - internal/pickle: the input's buffer and read-ahead, the opcodes and
//     their encodings, a pickle's faults at their offsets; nothing of a
//     snapshot;
//   - decode.go (this file): the machine: its values, stack, marks and
//     memo references, and what each opcode does to them;
//   - memo.go, paged.go, spill.go: the memo and the lists of records, in
//     pages that go to a temporary file past a bound;
//   - runs.go: the machine's fast paths over the buffer, for the memo
//     references and small integers that make up most of a big file;
//   - schema.go: which container is what (its role), from its place;
//   - build.go: the containers, and what an item or a key does to its
//     container by the container's role;
//   - model.go, fields.go: what the containers become (entries, blocks,
//     segments, frames, stacks), each field checked as the package doc says;
//   - read.go: ReadWith, which runs the machine over an input and turns
//     its errors into one line.

// A kind is the kind of a value on the machine's stack or in its memo.
type kind uint8

const (
	kMark  kind = iota // a MARK, on the stack only
	kNone              // None
	kBool              // x is 0 or 1
	kInt               // x holds an int64
	kUint              // x holds a uint64 above math.MaxInt64
	kBig               // x indexes decoder.bigs: an integer beyond 64 bits
	kFloat             // x holds a float64's bits
	kStr               // x indexes decoder.strs
	kBytes             // x indexes decoder.strs
	kCont              // x indexes decoder.conts: a list, dict, tuple or set
	kSkip              // x is a ctype: a container that the model does not read (see skipChild)
	kModel             // the first of the kinds of what a container became (see model.go)
)

// A val is a value of the machine.
type val struct {
	k kind
	x uint64
}

func intVal(n int64) val { return val{kInt, uint64(n)} }

// The limits of the decoder. Each is a bound on what a file describes, so
// that memory grows with the file, never with how often it refers to its
// memo.
const (
	// MaxRepeated is the most trace entries, blocks and segments that a
	// snapshot may repeat through memo references, in all: PyTorch writes
	// each once, and a file that repeats one segment of 10,000 blocks
	// 100,000 times is refused rather than expanded.
	MaxRepeated = 1 << 20
	// maxString is the longest string or bytes value read.
	maxString = 1 << 30
)

// A markRec is a MARK on the stack: where it stands and the open
// container that it batches items for, or -1.
type markRec struct {
	pos   int
	owner int32
}

// decoder runs the pickle machine over one input.
type decoder struct {
	in      pickle.Input
	stack   []val
	marks   []markRec
	memo    memoTable      // the entries stored in order
	memoFar map[uint64]val // memo entries stored out of order
	sp      *spill         // where the memo's and the traces' pages go past the bound
	opOff   int64          // offset of the opcode being run

	strs   []string          // interned strings
	strIdx map[string]uint32 // string: index in strs
	keyOf  []fieldKey        // for each string, the modelled key it is, or noKey
	bigs   []*big.Int

	conts  []cont   // containers; free ones are listed in free
	free   []int32  // reusable modelled containers
	fields []fields // the fields of modelled dicts, each kept by its container

	m model // what the containers became

	absorbed []uint32 // memo indexes of the frames that absorb took for the top MARK's list
	absRun   bool     // absorbed is a frameRun's idx, and absOwn the decoder's slice for it
	absOwn   []uint32
	absIDs   []byte     // with the stacks: the frame indexes of absorbed's first len(absIDs)/4
	absEC    bool       // one of absorbed is on the empty-cache path
	runs     []frameRun // runs of frames read before, by runHash; nil in a small file
	runNext  uint32     // counts the runs recorded, for the place of the next
	noStacks bool       // ReadOptions.NoStacks
	runsFrom int        // the memo entries from which runs are looked up
	maxTrace int        // the most entries of a device's trace
	repeated int        // entries, blocks and segments copied from the memo
	err      error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = &pickle.Error{Off: d.opOff, Msg: fmt.Sprintf(format, args...)}
	}
}

// run decodes the pickle up to its STOP and returns the value left.
func (d *decoder) run() (val, error) {
	in := &d.in
	if !in.Need(2) {
		return val{}, d.ioErr()
	}
	for d.err == nil {
		if in.Pos >= in.End && !in.Need(1) {
			if in.Err == io.EOF {
				return val{}, &pickle.Error{Off: in.Off(), Msg: "truncated: the input ends before the pickle's STOP"}
			}
			return val{}, d.ioErr()
		}
		d.opOff = in.Off()
		op := in.Buf[in.Pos]
		in.Pos++
		if pushOps[op] && d.memoRun(op) {
			continue
		}
		if len(d.absorbed) > 0 && op != pickle.OpAppends {
			d.unabsorb()
		}
		if op == pickle.OpStop {
			if len(d.stack) != 1 || len(d.marks) != 0 {
				d.fail("STOP with %d values on the stack, not one", len(d.stack))
				break
			}
			return d.stack[0], nil
		}
		d.step(op)
	}
	return val{}, d.err
}

// ioErr returns the error of a read that came short.
func (d *decoder) ioErr() error {
	if d.in.Err == nil || d.in.Err == io.EOF || d.in.Err == io.ErrUnexpectedEOF {
		return &pickle.Error{Off: d.in.Off(), Msg: "truncated: the input ends inside an opcode"}
	}
	return d.in.Err
}

// arg returns the next n bytes of the opcode's argument, or nil when the
// input ends first.
func (d *decoder) arg(n int) []byte {
	if !d.in.Need(n) {
		if d.err == nil {
			if err := d.ioErr(); err != nil {
				if pe, ok := err.(*pickle.Error); ok {
					pe.Off = d.opOff
					d.err = pe
				} else {
					d.err = err
				}
			}
		}
		return nil
	}
	b := d.in.Buf[d.in.Pos : d.in.Pos+n]
	d.in.Pos += n
	return b
}

func (d *decoder) push(v val) { d.stack = append(d.stack, v) }

// pop removes and returns the top of the stack; a MARK there is a fault.
func (d *decoder) pop() (val, bool) {
	n := len(d.stack)
	if n == 0 || (len(d.marks) > 0 && d.marks[len(d.marks)-1].pos == n-1) {
		d.fail("a value is needed and the stack has none above its mark")
		return val{}, false
	}
	v := d.stack[n-1]
	d.stack = d.stack[:n-1]
	return v, true
}

// popMark removes the items above the last MARK and the MARK, returning
// the items (valid until the next push) and the MARK's owner.
func (d *decoder) popMark() ([]val, int32, bool) {
	if len(d.marks) == 0 {
		d.fail("no MARK on the stack")
		return nil, -1, false
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := d.stack[m.pos+1:]
	d.stack = d.stack[:m.pos]
	return items, m.owner, true
}

// step runs one opcode other than STOP.
func (d *decoder) step(op byte) {
	switch op {
	case pickle.OpProto:
		if b := d.arg(1); b != nil && (b[0] < 2 || b[0] > 5) {
			d.fail("pickle protocol %d: want 2 to 5", b[0])
		}
	case pickle.OpFrame:
		d.arg(8)
	case pickle.OpMark:
		owner := int32(-1)
		if n := len(d.stack); n > 0 && (len(d.marks) == 0 || d.marks[len(d.marks)-1].pos < n-1) {
			switch d.stack[n-1].k {
			case kCont:
				owner = int32(d.stack[n-1].x)
			case kSkip:
				owner = sink
			}
		}
		d.marks = append(d.marks, markRec{pos: len(d.stack), owner: owner})
		d.stack = append(d.stack, val{k: kMark})
	case pickle.OpNone:
		d.push(val{k: kNone})
	case pickle.OpNewTrue:
		d.push(val{kBool, 1})
	case pickle.OpNewFalse:
		d.push(val{kBool, 0})
	case pickle.OpBinInt1:
		if b := d.arg(1); b != nil {
			d.push(intVal(int64(b[0])))
		}
	case pickle.OpBinInt2:
		if b := d.arg(2); b != nil {
			d.push(intVal(int64(binary.LittleEndian.Uint16(b))))
		}
	case pickle.OpBinInt:
		if b := d.arg(4); b != nil {
			d.push(intVal(int64(int32(binary.LittleEndian.Uint32(b)))))
		}
	case pickle.OpLong1:
		if b := d.arg(1); b != nil {
			d.long(int(b[0]))
		}
	case pickle.OpLong4:
		if b := d.arg(4); b != nil {
			n := int32(binary.LittleEndian.Uint32(b))
			if n < 0 || n > maxString {
				d.fail("LONG4 of %d bytes", n)
				return
			}
			d.long(int(n))
		}
	case pickle.OpBinFloat:
		if b := d.arg(8); b != nil {
			d.push(val{kFloat, binary.BigEndian.Uint64(b)})
		}
	case pickle.OpShortBinUnicode, pickle.OpShortBinBytes, pickle.OpShortBinString:
		if b := d.arg(1); b != nil {
			d.str(op, int(b[0]))
		}
	case pickle.OpBinUnicode, pickle.OpBinBytes, pickle.OpBinString:
		if b := d.arg(4); b != nil {
			d.str(op, int(binary.LittleEndian.Uint32(b)))
		}
	case pickle.OpBinUnicode8, pickle.OpBinBytes8, pickle.OpByteArray8:
		if b := d.arg(8); b != nil {
			n := binary.LittleEndian.Uint64(b)
			if n > maxString {
				d.fail("a string of %d bytes", n)
				return
			}
			d.str(op, int(n))
		}
	case pickle.OpEmptyList:
		d.push(d.newCont(ctList))
	case pickle.OpEmptyDict:
		d.push(d.newCont(ctDict))
	case pickle.OpEmptyTuple:
		d.push(d.newCont(ctTuple))
	case pickle.OpEmptySet:
		d.push(d.newCont(ctSet))
	case pickle.OpTuple1, pickle.OpTuple2, pickle.OpTuple3:
		n := int(op-pickle.OpTuple1) + 1
		if len(d.stack) < n || (len(d.marks) > 0 && d.marks[len(d.marks)-1].pos >= len(d.stack)-n) {
			d.fail("TUPLE%d with too few values above the mark", n)
			return
		}
		items := d.stack[len(d.stack)-n:]
		d.stack = d.stack[:len(d.stack)-n]
		d.push(d.generic(ctTuple, items)) // generic copies the items before push overwrites them
	case pickle.OpTuple, pickle.OpList, pickle.OpDict, pickle.OpFrozenSet:
		items, _, ok := d.popMark()
		if !ok {
			return
		}
		t := map[byte]ctype{pickle.OpTuple: ctTuple, pickle.OpList: ctList, pickle.OpDict: ctDict, pickle.OpFrozenSet: ctSet}[op]
		if t == ctDict && len(items)%2 != 0 {
			d.fail("DICT with an odd number of values")
			return
		}
		d.push(d.generic(t, items))
	case pickle.OpAppend:
		v, ok := d.pop()
		if !ok {
			return
		}
		if p, ok := d.target(ctList, "APPEND"); ok {
			d.add(p, v)
		}
	case pickle.OpAppends, pickle.OpAddItems:
		items, _, ok := d.popMark()
		if !ok {
			return
		}
		want, name := ctList, "APPENDS"
		if op == pickle.OpAddItems {
			want, name = ctSet, "ADDITEMS"
		}
		if p, ok := d.target(want, name); ok {
			if c := d.contAt(p); c != nil && c.role == rStack {
				items = d.appendFrames(c, items)
			}
			for _, v := range items {
				if d.add(p, v); d.err != nil {
					return
				}
			}
		}
	case pickle.OpSetItem:
		v, ok1 := d.pop()
		k, ok2 := d.pop()
		if !ok1 || !ok2 {
			return
		}
		if p, ok := d.target(ctDict, "SETITEM"); ok {
			d.set(p, k, v)
		}
	case pickle.OpSetItems:
		items, _, ok := d.popMark()
		if !ok {
			return
		}
		if len(items)%2 != 0 {
			d.fail("SETITEMS with an odd number of values")
			return
		}
		if p, ok := d.target(ctDict, "SETITEMS"); ok {
			for i := 0; i < len(items); i += 2 {
				if d.set(p, items[i], items[i+1]); d.err != nil {
					return
				}
			}
		}
	case pickle.OpPop:
		if v, ok := d.pop(); ok {
			d.drop(v)
		}
	case pickle.OpPopMark:
		if items, _, ok := d.popMark(); ok {
			for _, v := range items {
				d.drop(v)
			}
		}
	case pickle.OpDup:
		if n := len(d.stack); n > 0 && d.stack[n-1].k != kMark {
			d.share(d.stack[n-1])
			d.push(d.stack[n-1])
		} else {
			d.fail("DUP of nothing")
		}
	case pickle.OpMemoize:
		d.memoize()
	case pickle.OpBinPut:
		if b := d.arg(1); b != nil {
			d.put(uint64(b[0]))
		}
	case pickle.OpLongBinPut:
		if b := d.arg(4); b != nil {
			d.put(uint64(binary.LittleEndian.Uint32(b)))
		}
	case pickle.OpBinGet:
		if b := d.arg(1); b != nil {
			d.get(uint64(b[0]))
		}
	case pickle.OpLongBinGet:
		if b := d.arg(4); b != nil {
			d.get(uint64(binary.LittleEndian.Uint32(b)))
		}
	default:
		if name, ok := pickle.Refused(op); ok {
			d.fail("opcode %s: the pickle names Python code, which loading would run; a snapshot holds only data", name)
			return
		}
		d.fail("opcode 0x%02x (%q): not one that a snapshot's pickle holds", op, rune(op))
	}
}

// long pushes a LONG1 or LONG4 integer of n bytes, two's complement,
// little-endian.
func (d *decoder) long(n int) {
	b := d.arg(n)
	if b == nil {
		return
	}
	switch {
	case n == 0:
		d.push(intVal(0))
	case n <= 8:
		d.push(intVal(pickle.LeInt(b)))
	case n == 9 && b[8] == 0 && b[7]&0x80 != 0:
		d.push(val{kUint, binary.LittleEndian.Uint64(b)})
	default:
		be := make([]byte, n)
		for i := range b {
			be[n-1-i] = b[i]
		}
		x := new(big.Int).SetBytes(be)
		if b[n-1]&0x80 != 0 {
			x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
		}
		d.bigs = append(d.bigs, x)
		d.push(val{kBig, uint64(len(d.bigs) - 1)})
	}
}

// str pushes a string (or bytes) of n bytes, interned.
func (d *decoder) str(op byte, n int) {
	if n > maxString {
		d.fail("a string of %d bytes", n)
		return
	}
	b := d.arg(n)
	if b == nil {
		return
	}
	k := kStr
	switch op {
	case pickle.OpShortBinBytes, pickle.OpBinBytes, pickle.OpBinBytes8, pickle.OpByteArray8:
		k = kBytes
	default:
		if i := pickle.BadText(op, b); i >= 0 && d.err == nil {
			what := "UTF-8"
			if op == pickle.OpShortBinString || op == pickle.OpBinString {
				what = "ASCII, as Python 3 reads a string of Python 2"
			}
			d.err = &pickle.Error{Off: d.in.Off() - int64(n-i),
				Msg: fmt.Sprintf("byte 0x%02x of the string at byte %d is not %s: Python refuses the file", b[i], d.opOff, what)}
			return
		}
	}
	d.push(val{k, uint64(d.intern(b))})
}

// intern returns the index of the string b in the string table.
func (d *decoder) intern(b []byte) uint32 {
	if i, ok := d.strIdx[string(b)]; ok {
		return i
	}
	s := string(b)
	i := uint32(len(d.strs))
	d.strs = append(d.strs, s)
	d.strIdx[s] = i
	d.keyOf = append(d.keyOf, keyNamed(s))
	return i
}

// put stores the top of the stack in the memo at i. The memo is a slice
// while the indexes come in order, as picklers write them; others go to a
// map, so that no index makes the memo larger than the PUTs in the file.
func (d *decoder) put(i uint64) {
	n := len(d.stack)
	if n == 0 || d.stack[n-1].k == kMark {
		d.fail("memo PUT of nothing")
		return
	}
	v := d.stack[n-1]
	// A container that the slot held no longer names it: what it becomes
	// goes to its other slots only, as in Python, where the slot now
	// holds v.
	if old, ok := d.memoAt(i); ok && old.k == kCont && d.conts[old.x].memo == int64(i) {
		d.conts[old.x].memo = -1
	}
	switch {
	case i < uint64(d.memo.len()):
		d.memo.set(i, v)
	case i == uint64(d.memo.len()) && d.memoFar[i].k == kMark:
		d.memo.append(v)
	default:
		if d.memoFar == nil {
			d.memoFar = map[uint64]val{}
		}
		d.memoFar[i] = v
	}
	if v.k == kCont {
		c := &d.conts[v.x]
		if c.memo >= 0 && c.memo != int64(i) {
			c.shared = true // two memo slots: keep it whole
		}
		if i < uint64(d.memo.len()) {
			c.memo = int64(i)
		} else {
			c.shared = true // in the map: kept whole, never released
		}
	}
}

// memoize is MEMOIZE: a PUT at the number of memo entries.
func (d *decoder) memoize() { d.put(uint64(d.memo.len() + len(d.memoFar))) }

// memoAt returns the memo's entry i, false when none was stored.
func (d *decoder) memoAt(i uint64) (val, bool) {
	if i < uint64(d.memo.len()) {
		return d.memo.at(i), true
	}
	v, ok := d.memoFar[i]
	return v, ok
}

// get pushes the memo's entry i.
func (d *decoder) get(i uint64) {
	v, ok := d.memoAt(i)
	if !ok {
		d.fail("memo GET %d of an entry never stored", i)
		return
	}
	d.share(v)
	d.push(v)
}

// share notes that a container is referenced more than once, so that it
// outlives its first use.
func (d *decoder) share(v val) {
	if v.k == kCont {
		d.conts[v.x].shared = true
	}
}

// target returns the open container under the values just popped, which
// an APPEND or SETITEM goes into: sink for a container skipped.
func (d *decoder) target(want ctype, name string) (int32, bool) {
	n := len(d.stack)
	if n > 0 && d.stack[n-1].k == kSkip {
		if t := ctype(d.stack[n-1].x); t != want {
			d.fail("%s into %s", name, t.pyName())
			return 0, false
		}
		return sink, true
	}
	if n == 0 || d.stack[n-1].k != kCont {
		what := "nothing"
		if n > 0 {
			what = d.typeName(d.stack[n-1])
		}
		d.fail("%s into %s", name, what)
		return 0, false
	}
	c := &d.conts[d.stack[n-1].x]
	if c.typ != want {
		d.fail("%s into %s", name, c.typ.pyName())
		return 0, false
	}
	if c.done.k != kMark {
		d.fail("%s into a container already used", name)
		return 0, false
	}
	return int32(d.stack[n-1].x), true
}

// drop discards a value popped from the stack.
func (d *decoder) drop(v val) {
	if v.k == kCont {
		d.release(int32(v.x))
	}
}

// floatOf returns a kFloat's value.
func floatOf(v val) float64 { return math.Float64frombits(v.x) }
