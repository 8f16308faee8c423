package pickle

import (
	"encoding/binary"

	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
)

// Pushes are the opcodes that only push a value, which PushRun runs.
var Pushes = [256]bool{OpBinGet: true, OpLongBinGet: true, OpBinInt1: true, OpBinInt2: true, OpBinInt: true,
	OpLong1: true, OpNone: true, OpNewTrue: true, OpNewFalse: true}

// notPushed are the kinds of the memo entries that PushRun leaves to
// Step, a bit each: the containers, the marks and the wide values.
const notPushed uint64 = 1<<KCont | 1<<KMark | 1<<kWide

// PushRun is the machine's fast path: it runs the opcodes that start
// with op, just read, and only push a value (see Pushes) in a loop of its
// own over the bytes already in the input's buffer, rather than one by
// one through Step: memo references to values other than containers, and
// the integers, None and booleans, as long as their arguments are in the
// buffer. They are the bulk of a big pickle of small containers (a dict's
// keys are references to strings stored once, its values small integers).
// It stops where those opcodes end or the buffer does, and reports false,
// having consumed nothing, when op is left for Step: a reference to a
// container or to an entry on a page in the spill's file, a LONG1 of more
// than 8 bytes. A reference to a container goes through Step, so that
// the Builder learns of it (Share).
//
// The layer above may take a run of references first, for a fast path of
// its own by the tags of the entries referred to (see Memo.Tags), and
// call PushRun for the rest.
func (m *Machine) PushRun(op byte) bool {
	in := &m.In
	buf, memo, n := in.Buf[:in.End], m.Memo.packed.Pages, uint64(m.Memo.Len())
	pos, done, stack, ran := in.Pos, in.Pos, m.Stack, false // pos just after op
loop:
	for {
		var v Val
		switch op {
		case OpBinGet, OpLongBinGet:
			var i uint64
			if op == OpBinGet {
				if pos >= len(buf) {
					break loop
				}
				i = uint64(buf[pos])
				pos++
			} else {
				if pos+4 > len(buf) {
					break loop
				}
				i = uint64(binary.LittleEndian.Uint32(buf[pos:]))
				pos += 4
			}
			if i >= n {
				break loop
			}
			pg, j := memo[i>>pages.Shift], i&(pages.Size-1)
			if j >= uint64(len(pg)) {
				break loop // spilled: get loads it
			}
			p := pg[j]
			if notPushed&(1<<(p&kindMask)) != 0 {
				break loop
			}
			v = Val{K: Kind(p & kindMask), X: p >> kindBits}
		case OpBinInt1:
			if pos >= len(buf) {
				break loop
			}
			v = IntVal(int64(buf[pos]))
			pos++
		case OpBinInt2:
			if pos+2 > len(buf) {
				break loop
			}
			v = IntVal(int64(binary.LittleEndian.Uint16(buf[pos:])))
			pos += 2
		case OpBinInt:
			if pos+4 > len(buf) {
				break loop
			}
			v = IntVal(int64(int32(binary.LittleEndian.Uint32(buf[pos:]))))
			pos += 4
		case OpLong1:
			if pos >= len(buf) {
				break loop
			}
			k := int(buf[pos])
			if k > 8 || pos+1+k > len(buf) {
				break loop
			}
			if pos+9 <= len(buf) {
				// Eight bytes at once: those past the k shift out, and
				// the shift back extends the sign.
				s := uint(64 - 8*k)
				v = IntVal(int64(binary.LittleEndian.Uint64(buf[pos+1:])<<s) >> s)
			} else {
				v = IntVal(LeInt(buf[pos+1 : pos+1+k]))
			}
			pos += 1 + k
		case OpNone:
			v = Val{K: KNone}
		case OpNewTrue:
			v = Val{K: KBool, X: 1}
		case OpNewFalse:
			v = Val{K: KBool, X: 0}
		default:
			break loop
		}
		stack = append(stack, v)
		done, ran = pos, true
		if pos >= len(buf) {
			break
		}
		op = buf[pos]
		pos++
	}
	// The next opcode starts at in.Pos, for the caller's loop to read.
	m.Stack = stack
	in.Pos = done
	return ran
}
