package pickle

import "encoding/binary"

// A Builder gives a machine's containers their meaning: Step
// takes the values that an opcode works on off the stack, checks their
// number, and calls the Builder with them. Items lie in the stack's array
// past its top: they are valid until the next push, which may overwrite
// them. A Builder records its faults in the Machine's Err.
type Builder interface {
	// Create pushes a new empty container of type t (EMPTY_LIST, _DICT,
	// _TUPLE, _SET), whose place the stack tells.
	Create(t CType)
	// Collect pushes a container of type t of the items (TUPLE1 to 3,
	// TUPLE, LIST, DICT, FROZENSET).
	Collect(t CType, items []Val)
	// Append appends the items to the open list (t List: APPEND, APPENDS)
	// or set (t Set: ADDITEMS) below them; op names the opcode.
	Append(t CType, op byte, items []Val)
	// SetItems sets the keys to the values, in pairs, of the items in
	// the open dict below them (SETITEM, SETITEMS).
	SetItems(op byte, items []Val)
	// Drop discards the items popped (POP, POP_MARK).
	Drop(items []Val)
	// Share notes that v, pushed again (DUP), is referenced once more.
	Share(v Val)
	// Memoized is told, before PUT, LONG_BINPUT or MEMOIZE stores v in
	// memo slot i over old (a KMark where the slot held nothing), that
	// it does, so that it keeps track of which slot holds a container
	// and of a container held twice; far: the slot is out of order, and
	// the memo keeps it apart (no tag, never stored over by Memo.Set).
	// It returns v's tag in the memo (see Memo.Tags).
	Memoized(i uint64, v, old Val, far bool) uint8
}

// Step runs the opcode op, other than STOP, whose argument follows in
// the input: itself where it makes a scalar or a MARK or uses the memo
// (see Memo), and through b where it makes or fills a container, stores
// one in the memo or refers to one again. That costs one
// call through the interface's table per such opcode, about 1% of the
// instructions of a read of a big file (see BENCHMARKS.md); a type
// parameter in its place would be called through a dictionary, no more
// directly.
func (m *Machine) Step(b Builder, op byte) {
	switch class[op] {
	case cEmptyList:
		b.Create(List)
	case cEmptyDict:
		b.Create(Dict)
	case cEmptyTuple:
		b.Create(Tuple)
	case cEmptySet:
		b.Create(Set)
	case cTupleN:
		n := int(op-OpTuple1) + 1
		if len(m.Stack) < n || (len(m.Marks) > 0 && m.Marks[len(m.Marks)-1].Pos >= len(m.Stack)-n) {
			m.failTuple(n)
			return
		}
		m.Stack = m.Stack[:len(m.Stack)-n]
		b.Collect(Tuple, m.popped(n))
	case cCollect:
		items, _, ok := m.PopMark()
		if !ok {
			return
		}
		t := collected[op]
		if t == Dict && len(items)%2 != 0 {
			m.Fail("DICT with an odd number of values")
			return
		}
		b.Collect(t, items)
	case cAppend:
		if _, ok := m.Pop(); ok {
			b.Append(List, op, m.popped(1))
		}
	case cAppends:
		if items, _, ok := m.PopMark(); ok {
			b.Append(collected[op], op, items)
		}
	case cSetItem:
		_, ok1 := m.Pop()
		_, ok2 := m.Pop()
		if ok1 && ok2 {
			b.SetItems(op, m.popped(2))
		}
	case cSetItems:
		items, _, ok := m.PopMark()
		if !ok {
			return
		}
		if len(items)%2 != 0 {
			m.Fail("SETITEMS with an odd number of values")
			return
		}
		b.SetItems(op, items)
	case cPop:
		if _, ok := m.Pop(); ok {
			b.Drop(m.popped(1))
		}
	case cPopMark:
		if items, _, ok := m.PopMark(); ok {
			b.Drop(items)
		}
	case cDup:
		if n := len(m.Stack); n > 0 && m.Stack[n-1].K != KMark {
			b.Share(m.Stack[n-1])
			m.Push(m.Stack[n-1])
			return
		}
		m.Fail("DUP of nothing")
	case cMark:
		m.mark() // here too, as it is frequent, rather than through Scalar
	case cMemoize:
		m.memoize(b)
	case cPut1:
		if a := m.Arg(1); a != nil {
			m.put(b, uint64(a[0]))
		}
	case cPut4:
		if a := m.Arg(4); a != nil {
			m.put(b, uint64(binary.LittleEndian.Uint32(a)))
		}
	case cGet1:
		if a := m.Arg(1); a != nil {
			m.get(b, uint64(a[0]))
		}
	case cGet4:
		if a := m.Arg(4); a != nil {
			m.get(b, uint64(binary.LittleEndian.Uint32(a)))
		}
	default:
		if !m.Scalar(op) {
			m.Unknown(op)
		}
	}
}

// The classes of the opcodes that Step tells apart, numbered densely so
// that its switch is a table of jumps rather than a search.
const (
	cOther = iota
	cEmptyList
	cEmptyDict
	cEmptyTuple
	cEmptySet
	cTupleN
	cCollect
	cAppend
	cAppends
	cSetItem
	cSetItems
	cPop
	cPopMark
	cDup
	cMark
	cMemoize
	cPut1
	cPut4
	cGet1
	cGet4
)

var class = [256]uint8{
	OpEmptyList: cEmptyList, OpEmptyDict: cEmptyDict, OpEmptyTuple: cEmptyTuple, OpEmptySet: cEmptySet,
	OpTuple1: cTupleN, OpTuple2: cTupleN, OpTuple3: cTupleN,
	OpTuple: cCollect, OpList: cCollect, OpDict: cCollect, OpFrozenSet: cCollect,
	OpAppend: cAppend, OpAppends: cAppends, OpAddItems: cAppends, OpSetItem: cSetItem, OpSetItems: cSetItems,
	OpPop: cPop, OpPopMark: cPopMark, OpDup: cDup, OpMark: cMark, OpMemoize: cMemoize,
	OpBinPut: cPut1, OpLongBinPut: cPut4, OpBinGet: cGet1, OpLongBinGet: cGet4,
}

// collected is the type of the container that TUPLE, LIST, DICT,
// FROZENSET, APPENDS and ADDITEMS make or fill.
var collected = [256]CType{OpTuple: Tuple, OpList: List, OpDict: Dict, OpFrozenSet: Set, OpAppends: List, OpAddItems: Set}

// failTuple records the fault of a TUPLE1 to 3 short of values.
func (m *Machine) failTuple(n int) { m.Fail("TUPLE%d with too few values above the mark", n) }

// Name returns the name of an opcode that fills a container (APPEND,
// APPENDS, ADDITEMS, SETITEM, SETITEMS), as Python's pickletools names
// it, for messages.
func Name(op byte) string {
	switch op {
	case OpAppend:
		return "APPEND"
	case OpAppends:
		return "APPENDS"
	case OpAddItems:
		return "ADDITEMS"
	case OpSetItem:
		return "SETITEM"
	case OpSetItems:
		return "SETITEMS"
	}
	return ""
}

// popped returns the n values just popped, which lie past the stack's top.
func (m *Machine) popped(n int) []Val { return m.Stack[len(m.Stack) : len(m.Stack)+n] }
