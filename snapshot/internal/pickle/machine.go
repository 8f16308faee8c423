package pickle

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/big"
)

// A Kind is the kind of a value on a machine's stack or in its memo.
type Kind uint8

const (
	KMark  Kind = iota // a MARK, on the stack only
	KNone              // None
	KBool              // X is 0 or 1
	KInt               // X holds an int64
	KUint              // X holds a uint64 above math.MaxInt64
	KBig               // X indexes Machine.Bigs: an integer beyond 64 bits
	KFloat             // X holds a float64's bits
	KStr               // X indexes Machine.Strs
	KBytes             // X indexes Machine.Strs
	KCont              // X is a container's handle, which the layer above gives
	KSkip              // X is a CType: a container that the layer above does not read
	KUser              // the first of the kinds that the layer above defines, all below 31 (the memo packs a kind in 5 bits)
)

// A Val is a value of the machine: 16 bytes, no pointer, so that the stack
// and the memo hold millions of them without the collector scanning them.
type Val struct {
	K Kind
	X uint64
}

// IntVal returns the value of the integer n.
func IntVal(n int64) Val { return Val{KInt, uint64(n)} }

// Float returns a KFloat's value.
func (v Val) Float() float64 { return math.Float64frombits(v.X) }

// A CType is the Python type of a container.
type CType uint8

const (
	List CType = iota
	Dict
	Tuple
	Set
)

// PyName names the type as messages do: "a list".
func (t CType) PyName() string {
	return [...]string{"a list", "a dict", "a tuple", "a set"}[t]
}

// Sink is the handle of a skipped container (a KSkip), where a container
// is told by its handle: as a MARK's owner, as where a value goes, as the
// target of an APPEND or a SETITEM.
const Sink int32 = -2

// MaxString is the longest string or bytes value read.
const MaxString = 1 << 30

// A Mark is a MARK on the stack: where it stands and the open container
// (the handle of a KCont right below it, Sink for a KSkip) that it batches
// items for, or -1.
type Mark struct {
	Pos   int
	Owner int32
}

// A Machine holds the state of a pickle being run that is the pickle's
// own: the input, the stack and its MARKs, the interned strings and the
// big integers, the memo, and the first fault. It runs the opcodes that
// make scalars (Scalar) and those that use the memo; for the others, Step
// takes their values off the stack and hands them to a Builder, which
// knows what the containers hold. Its methods are plain ones on a struct that the layer above
// embeds, so that the calls on the hot path (Push, the fast paths' reads
// of the input and the stack) are direct; the Builder's are one call
// through an interface per opcode that needs it.
type Machine struct {
	In    Input
	Stack []Val
	Marks []Mark
	OpOff int64 // the offset of the opcode being run
	Err   error // the first fault, which stops the machine
	Memo  Memo  // its pages held in memory unless Memo.Init gives it a spill

	Strs []string // interned strings, a KStr's or KBytes's X their index
	// StrTags holds for each of Strs the tag that Tag gave it, so that
	// the layer above tells its keys by an index rather than by hashing
	// the string again.
	StrTags []uint8
	Tag     func(string) uint8 // called once per distinct string
	strIdx  map[string]uint32
	Bigs    []*big.Int
}

// NewMachine returns a machine over in, tagging its strings with tag.
func NewMachine(in Input, tag func(string) uint8) Machine {
	return Machine{In: in, strIdx: map[string]uint32{}, Tag: tag}
}

// Fail records a fault of the opcode being run, unless one is recorded.
func (m *Machine) Fail(format string, args ...any) {
	if m.Err == nil {
		m.Err = &Error{Off: m.OpOff, Msg: fmt.Sprintf(format, args...)}
	}
}

// IOErr returns the error of a read that came short.
func (m *Machine) IOErr() error {
	if m.In.Err == nil || m.In.Err == io.EOF || m.In.Err == io.ErrUnexpectedEOF {
		return &Error{Off: m.In.Off(), Msg: "truncated: the input ends inside an opcode"}
	}
	return m.In.Err
}

// Arg returns the next n bytes of the opcode's argument, or nil, with the
// fault recorded, when the input ends first.
func (m *Machine) Arg(n int) []byte {
	if !m.In.Need(n) {
		if m.Err == nil {
			if err := m.IOErr(); err != nil {
				if pe, ok := err.(*Error); ok {
					pe.Off = m.OpOff
					m.Err = pe
				} else {
					m.Err = err
				}
			}
		}
		return nil
	}
	b := m.In.Buf[m.In.Pos : m.In.Pos+n]
	m.In.Pos += n
	return b
}

// Push pushes v.
func (m *Machine) Push(v Val) { m.Stack = append(m.Stack, v) }

// Pop removes and returns the top of the stack; a MARK there is a fault.
func (m *Machine) Pop() (Val, bool) {
	n := len(m.Stack)
	if n == 0 || (len(m.Marks) > 0 && m.Marks[len(m.Marks)-1].Pos == n-1) {
		m.Fail("a value is needed and the stack has none above its mark")
		return Val{}, false
	}
	v := m.Stack[n-1]
	m.Stack = m.Stack[:n-1]
	return v, true
}

// PopMark removes the items above the last MARK and the MARK, returning
// the items (valid until the next push) and the MARK's owner.
func (m *Machine) PopMark() ([]Val, int32, bool) {
	if len(m.Marks) == 0 {
		m.Fail("no MARK on the stack")
		return nil, -1, false
	}
	k := m.Marks[len(m.Marks)-1]
	m.Marks = m.Marks[:len(m.Marks)-1]
	items := m.Stack[k.Pos+1:]
	m.Stack = m.Stack[:k.Pos]
	return items, k.Owner, true
}

// Scalar runs op if it is one of the opcodes that touch no container and
// no memo entry: PROTO, FRAME, MARK, the integers, floats, strings, None
// and the booleans. It reports false, having done nothing, for the others.
func (m *Machine) Scalar(op byte) bool {
	switch op {
	case OpProto:
		if b := m.Arg(1); b != nil && (b[0] < 2 || b[0] > 5) {
			m.Fail("pickle protocol %d: want 2 to 5", b[0])
		}
	case OpFrame:
		m.Arg(8)
	case OpMark:
		m.mark()
	case OpNone:
		m.Push(Val{K: KNone})
	case OpNewTrue:
		m.Push(Val{KBool, 1})
	case OpNewFalse:
		m.Push(Val{KBool, 0})
	case OpBinInt1:
		if b := m.Arg(1); b != nil {
			m.Push(IntVal(int64(b[0])))
		}
	case OpBinInt2:
		if b := m.Arg(2); b != nil {
			m.Push(IntVal(int64(binary.LittleEndian.Uint16(b))))
		}
	case OpBinInt:
		if b := m.Arg(4); b != nil {
			m.Push(IntVal(int64(int32(binary.LittleEndian.Uint32(b)))))
		}
	case OpLong1:
		if b := m.Arg(1); b != nil {
			m.long(int(b[0]))
		}
	case OpLong4:
		if b := m.Arg(4); b != nil {
			n := int32(binary.LittleEndian.Uint32(b))
			if n < 0 || n > MaxString {
				m.Fail("LONG4 of %d bytes", n)
				return true
			}
			m.long(int(n))
		}
	case OpBinFloat:
		if b := m.Arg(8); b != nil {
			m.Push(Val{KFloat, binary.BigEndian.Uint64(b)})
		}
	case OpShortBinUnicode, OpShortBinBytes, OpShortBinString:
		if b := m.Arg(1); b != nil {
			m.str(op, int(b[0]))
		}
	case OpBinUnicode, OpBinBytes, OpBinString:
		if b := m.Arg(4); b != nil {
			m.str(op, int(binary.LittleEndian.Uint32(b)))
		}
	case OpBinUnicode8, OpBinBytes8, OpByteArray8:
		if b := m.Arg(8); b != nil {
			n := binary.LittleEndian.Uint64(b)
			if n > MaxString {
				m.Fail("a string of %d bytes", n)
				return true
			}
			m.str(op, int(n))
		}
	default:
		return false
	}
	return true
}

// mark pushes a MARK, owned by the container right below it, if any.
func (m *Machine) mark() {
	owner, n := int32(-1), len(m.Stack)
	if n > 0 && (len(m.Marks) == 0 || m.Marks[len(m.Marks)-1].Pos < n-1) {
		if top := m.Stack[n-1]; top.K == KCont {
			owner = int32(top.X)
		} else if top.K == KSkip {
			owner = Sink
		}
	}
	m.Marks = append(m.Marks, Mark{Pos: n, Owner: owner})
	m.Stack = append(m.Stack, Val{K: KMark})
}

// Unknown records the fault of an opcode that no layer runs.
func (m *Machine) Unknown(op byte) {
	if name, ok := Refused(op); ok {
		m.Fail("opcode %s: the pickle names Python code, which loading would run; a snapshot holds only data", name)
		return
	}
	m.Fail("opcode 0x%02x (%q): not one that a snapshot's pickle holds", op, rune(op))
}

// long pushes a LONG1 or LONG4 integer of n bytes, two's complement,
// little-endian.
func (m *Machine) long(n int) {
	b := m.Arg(n)
	if b == nil {
		return
	}
	switch {
	case n == 0:
		m.Push(IntVal(0))
	case n <= 8:
		m.Push(IntVal(LeInt(b)))
	case n == 9 && b[8] == 0 && b[7]&0x80 != 0:
		m.Push(Val{KUint, binary.LittleEndian.Uint64(b)})
	default:
		be := make([]byte, n)
		for i := range b {
			be[n-1-i] = b[i]
		}
		x := new(big.Int).SetBytes(be)
		if b[n-1]&0x80 != 0 {
			x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
		}
		m.Bigs = append(m.Bigs, x)
		m.Push(Val{KBig, uint64(len(m.Bigs) - 1)})
	}
}

// str pushes a string (or bytes) of n bytes, interned.
func (m *Machine) str(op byte, n int) {
	if n > MaxString {
		m.Fail("a string of %d bytes", n)
		return
	}
	b := m.Arg(n)
	if b == nil {
		return
	}
	k := KStr
	switch op {
	case OpShortBinBytes, OpBinBytes, OpBinBytes8, OpByteArray8:
		k = KBytes
	default:
		if i := BadText(op, b); i >= 0 && m.Err == nil {
			what := "UTF-8"
			if op == OpShortBinString || op == OpBinString {
				what = "ASCII, as Python 3 reads a string of Python 2"
			}
			m.Err = &Error{Off: m.In.Off() - int64(n-i),
				Msg: fmt.Sprintf("byte 0x%02x of the string at byte %d is not %s: Python refuses the file", b[i], m.OpOff, what)}
			return
		}
	}
	m.Push(Val{k, uint64(m.Intern(b))})
}

// Intern returns the index of the string b in Strs, adding it if new.
func (m *Machine) Intern(b []byte) uint32 {
	if i, ok := m.strIdx[string(b)]; ok {
		return i
	}
	s := string(b)
	i := uint32(len(m.Strs))
	m.Strs = append(m.Strs, s)
	m.strIdx[s] = i
	var t uint8
	if m.Tag != nil {
		t = m.Tag(s)
	}
	m.StrTags = append(m.StrTags, t)
	return i
}
