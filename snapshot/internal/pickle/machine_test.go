package pickle

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runScalars runs the opcodes of b through Scalar, as the layer above's
// loop does, and returns the machine: it stops at the first opcode that
// Scalar leaves, at a fault, or at the end.
func runScalars(t *testing.T, b []byte, tag func(string) uint8) *Machine {
	t.Helper()
	m := NewMachine(NewInput(bytes.NewReader(b), 0), tag)
	for m.Err == nil && (m.In.Pos < m.In.End || m.In.Need(1)) {
		m.OpOff = m.In.Off()
		op := m.In.Buf[m.In.Pos]
		m.In.Pos++
		if !m.Scalar(op) {
			m.Unknown(op)
		}
	}
	return &m
}

// Scalar pushes each scalar as Python's unpickler reads it, interns the
// strings once each, tagging them through the layer above's function,
// and records MARKs with their owner.
func TestMachineScalars(t *testing.T) {
	tags := 0
	tag := func(s string) uint8 {
		tags++
		return uint8(len(s))
	}
	b := []byte{OpProto, 4, OpFrame, 0, 0, 0, 0, 0, 0, 0, 0,
		OpNone, OpNewTrue, OpNewFalse,
		OpBinInt1, 200, OpBinInt2, 0x34, 0x12, OpBinInt, 0xff, 0xff, 0xff, 0xff,
		OpLong1, 0, OpLong1, 2, 0x00, 0x80, // -32768
		OpLong1, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, // 2^63
		OpLong1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, // 2^64
		OpBinFloat, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, // 1.5
		OpShortBinUnicode, 3, 'a', 'b', 'c', OpShortBinBytes, 3, 'a', 'b', 'c',
		OpMark, OpBinUnicode, 2, 0, 0, 0, 'h', 'i'}
	m := runScalars(t, b, tag)
	require.NoError(t, m.Err)
	want := []Val{{K: KNone}, {KBool, 1}, {KBool, 0}, IntVal(200), IntVal(0x1234), IntVal(-1),
		IntVal(0), IntVal(-32768), {KUint, 1 << 63}, {KBig, 0}, {KFloat, math.Float64bits(1.5)},
		{KStr, 0}, {KBytes, 0}, {K: KMark}, {KStr, 1}}
	assert.Equal(t, want, m.Stack)
	assert.Equal(t, "18446744073709551616", m.Bigs[0].String())
	assert.Equal(t, 1.5, m.Stack[10].Float())
	assert.Equal(t, []string{"abc", "hi"}, m.Strs)
	assert.Equal(t, []uint8{3, 2}, m.StrTags)
	assert.Equal(t, 2, tags, "one call of the tag per distinct string")
	assert.Equal(t, []Mark{{Pos: 13, Owner: -1}}, m.Marks)
}

// A MARK right above a container names it as its owner (a KSkip's is
// Sink); one above a MARK or a scalar has none.
func TestMachineMarkOwner(t *testing.T) {
	for _, c := range []struct {
		top  []Val
		want int32
	}{
		{[]Val{{KCont, 7}}, 7},
		{[]Val{{KSkip, uint64(Dict)}}, Sink},
		{[]Val{IntVal(1)}, -1},
		{nil, -1},
	} {
		m := NewMachine(NewInput(bytes.NewReader([]byte{OpMark}), 0), nil)
		m.Stack = append(m.Stack, c.top...)
		require.True(t, m.In.Need(1))
		m.In.Pos++
		require.True(t, m.Scalar(OpMark))
		assert.Equal(t, c.want, m.Marks[0].Owner, "%v", c.top)
	}
}

// Each fault is one line at the offset of its opcode (a bad string's at
// its byte), and the first one stays.
func TestMachineFaults(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{[]byte{OpProto, 1}, "at byte 0: pickle protocol 1: want 2 to 5"},
		{[]byte{OpNone, OpBinInt2, 1}, "at byte 1: truncated: the input ends inside an opcode"},
		{[]byte{OpLong4, 0xff, 0xff, 0xff, 0xff}, "at byte 0: LONG4 of -1 bytes"},
		{[]byte{OpBinUnicode8, 1, 0, 0, 0x40, 0, 0, 0, 0}, "at byte 0: a string of 1073741825 bytes"},
		{[]byte{OpNone, OpShortBinUnicode, 2, 'a', 0xff}, "at byte 4: byte 0xff of the string at byte 1 is not UTF-8: Python refuses the file"},
		{[]byte{OpShortBinString, 1, 0xe9}, "at byte 2: byte 0xe9 of the string at byte 0 is not ASCII, as Python 3 reads a string of Python 2: Python refuses the file"},
		{[]byte{OpNone, 'R'}, "at byte 1: opcode REDUCE: the pickle names Python code, which loading would run; a snapshot holds only data"},
		{[]byte{'z'}, "at byte 0: opcode 0x7a ('z'): not one that a snapshot's pickle holds"},
	} {
		m := runScalars(t, c.b, nil)
		require.Error(t, m.Err, "% x", c.b)
		assert.Equal(t, c.want, m.Err.Error(), "% x", c.b)
	}
}

// Pop and PopMark refuse to take a MARK for a value or to pop one that
// is not there.
func TestMachinePops(t *testing.T) {
	m := NewMachine(NewInput(strings.NewReader(""), 0), nil)
	_, ok := m.Pop()
	assert.False(t, ok)
	assert.EqualError(t, m.Err, "at byte 0: a value is needed and the stack has none above its mark")

	m = NewMachine(NewInput(strings.NewReader(""), 0), nil)
	_, _, ok = m.PopMark()
	assert.False(t, ok)
	assert.EqualError(t, m.Err, "at byte 0: no MARK on the stack")

	m = NewMachine(NewInput(strings.NewReader(""), 0), nil)
	m.Push(IntVal(1))
	m.Marks = append(m.Marks, Mark{Pos: 1, Owner: 3})
	m.Push(Val{K: KMark})
	m.Push(IntVal(2))
	m.Push(IntVal(3))
	items, owner, ok := m.PopMark()
	require.True(t, ok)
	assert.Equal(t, []Val{IntVal(2), IntVal(3)}, items)
	assert.Equal(t, int32(3), owner)
	assert.Equal(t, []Val{IntVal(1)}, m.Stack)
	_, ok = m.Pop()
	assert.True(t, ok)
}

// A call is a call of a Builder's method, as recorder notes it.
type call struct {
	Method string
	T      CType
	Op     byte
	I      uint64
	Items  []Val
}

// recorder is a Builder that notes its calls, pushes a KCont for what
// Create and Collect make, and tags a memo entry with its value's X.
type recorder struct {
	m     *Machine
	calls []call
}

func (r *recorder) note(c call) {
	c.Items = append([]Val(nil), c.Items...)
	r.calls = append(r.calls, c)
}
func (r *recorder) Create(t CType) {
	r.note(call{Method: "Create", T: t})
	r.m.Push(Val{KCont, uint64(len(r.calls))})
}
func (r *recorder) Collect(t CType, items []Val) {
	r.note(call{Method: "Collect", T: t, Items: items})
	r.m.Push(Val{KCont, uint64(len(r.calls))})
}
func (r *recorder) Append(t CType, op byte, items []Val) {
	r.note(call{Method: "Append", T: t, Op: op, Items: items})
}
func (r *recorder) SetItems(op byte, items []Val) {
	r.note(call{Method: "SetItems", Op: op, Items: items})
}
func (r *recorder) Drop(items []Val) { r.note(call{Method: "Drop", Items: items}) }
func (r *recorder) Share(v Val)      { r.note(call{Method: "Share", Items: []Val{v}}) }
func (r *recorder) Memoized(i uint64, v, old Val, far bool) uint8 {
	c := call{Method: "Memoized", I: i, Items: []Val{v, old}}
	if far {
		c.Method = "Memoized far"
	}
	r.note(c)
	return uint8(v.X)
}

// stepAll runs the opcodes of b through Step, as the layer above's loop
// does, and returns the calls of the Builder.
func stepAll(t *testing.T, b []byte) ([]call, *Machine) {
	t.Helper()
	m := NewMachine(NewInput(bytes.NewReader(b), 0), nil)
	r := &recorder{m: &m}
	for m.Err == nil && (m.In.Pos < m.In.End || m.In.Need(1)) {
		m.OpOff = m.In.Off()
		op := m.In.Buf[m.In.Pos]
		m.In.Pos++
		m.Step(r, op)
	}
	return r.calls, &m
}

// Step takes the values that each opcode of containers and of the memo
// works on off the stack, and hands them to the Builder: the machine
// knows the stack and the opcodes, the layer above what the containers
// and the memo hold.
func TestMachineStep(t *testing.T) {
	one, two := IntVal(1), IntVal(2)
	b := []byte{OpEmptyDict, OpPop, OpEmptyList, OpPop, OpEmptyTuple, OpPop, OpEmptySet, OpPop,
		OpBinInt1, 1, OpBinInt1, 2, OpTuple2, OpPop,
		OpMark, OpBinInt1, 1, OpBinInt1, 2, OpDict, OpPop,
		OpMark, OpBinInt1, 1, OpList, OpPop,
		OpBinInt1, 1, OpAppend,
		OpMark, OpBinInt1, 1, OpBinInt1, 2, OpAppends,
		OpMark, OpBinInt1, 1, OpAddItems,
		OpBinInt1, 1, OpBinInt1, 2, OpSetItem,
		OpMark, OpBinInt1, 1, OpBinInt1, 2, OpSetItems,
		OpBinInt1, 1, OpPop, OpMark, OpBinInt1, 2, OpPopMark,
		OpBinInt1, 2, OpDup,
		OpMemoize, OpBinPut, 7, OpLongBinPut, 0, 1, 0, 0, OpBinGet, 7, OpLongBinGet, 0, 1, 0, 0,
		OpEmptyList, OpBinPut, 0, OpBinGet, 0}
	calls, m := stepAll(t, b)
	require.NoError(t, m.Err)
	cont := func(i uint64) []Val { return []Val{{KCont, i}} }
	assert.Equal(t, []call{
		{Method: "Create", T: Dict}, {Method: "Drop", Items: cont(1)},
		{Method: "Create", T: List}, {Method: "Drop", Items: cont(3)},
		{Method: "Create", T: Tuple}, {Method: "Drop", Items: cont(5)},
		{Method: "Create", T: Set}, {Method: "Drop", Items: cont(7)},
		{Method: "Collect", T: Tuple, Items: []Val{one, two}}, {Method: "Drop", Items: cont(9)},
		{Method: "Collect", T: Dict, Items: []Val{one, two}}, {Method: "Drop", Items: cont(11)},
		{Method: "Collect", T: List, Items: []Val{one}}, {Method: "Drop", Items: cont(13)},
		{Method: "Append", T: List, Op: OpAppend, Items: []Val{one}},
		{Method: "Append", T: List, Op: OpAppends, Items: []Val{one, two}},
		{Method: "Append", T: Set, Op: OpAddItems, Items: []Val{one}},
		{Method: "SetItems", Op: OpSetItem, Items: []Val{one, two}},
		{Method: "SetItems", Op: OpSetItems, Items: []Val{one, two}},
		{Method: "Drop", Items: []Val{one}},
		{Method: "Drop", Items: []Val{two}},
		{Method: "Share", Items: []Val{two}},
		{Method: "Memoized", I: 0, Items: []Val{two, {}}},
		{Method: "Memoized far", I: 7, Items: []Val{two, {}}}, {Method: "Memoized far", I: 256, Items: []Val{two, {}}},
		{Method: "Share", Items: []Val{two}}, {Method: "Share", Items: []Val{two}},
		{Method: "Create", T: List}, {Method: "Memoized", I: 0, Items: []Val{{KCont, 28}, two}},
		{Method: "Share", Items: []Val{{KCont, 28}}},
	}, calls)
	assert.Equal(t, []Val{two, two, two, two, {KCont, 28}, {KCont, 28}}, m.Stack, "DUP pushes the value again, GET the memo's")
	for op, name := range map[byte]string{OpAppend: "APPEND", OpAppends: "APPENDS", OpAddItems: "ADDITEMS", OpSetItem: "SETITEM", OpSetItems: "SETITEMS", OpDict: ""} {
		assert.Equal(t, name, Name(op))
	}
}

// The faults of the stack's shape are Step's, each at its opcode.
func TestMachineStepFaults(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{[]byte{OpBinInt1, 1, OpTuple2}, "at byte 2: TUPLE2 with too few values above the mark"},
		{[]byte{OpBinInt1, 1, OpMark, OpBinInt1, 1, OpTuple2}, "at byte 5: TUPLE2 with too few values above the mark"},
		{[]byte{OpMark, OpBinInt1, 1, OpDict}, "at byte 3: DICT with an odd number of values"},
		{[]byte{OpMark, OpBinInt1, 1, OpSetItems}, "at byte 3: SETITEMS with an odd number of values"},
		{[]byte{OpDup}, "at byte 0: DUP of nothing"},
		{[]byte{OpMark, OpDup}, "at byte 1: DUP of nothing"},
		{[]byte{OpMark, OpAppend}, "at byte 1: a value is needed and the stack has none above its mark"},
		{[]byte{OpBinInt1, 1, OpSetItem}, "at byte 2: a value is needed and the stack has none above its mark"},
		{[]byte{OpAppends}, "at byte 0: no MARK on the stack"},
		{[]byte{OpLongBinGet, 1}, "at byte 0: truncated: the input ends inside an opcode"},
		{[]byte{OpBinPut, 0}, "at byte 0: memo PUT of nothing"},
		{[]byte{OpMark, OpMemoize}, "at byte 1: memo PUT of nothing"},
		{[]byte{OpBinGet, 3}, "at byte 0: memo GET 3 of an entry never stored"},
	} {
		calls, m := stepAll(t, c.b)
		require.Error(t, m.Err, "% x", c.b)
		assert.Equal(t, c.want, m.Err.Error(), "% x", c.b)
		assert.Empty(t, calls, "% x", c.b)
	}
}
