package viewercheck

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The values the unpickler makes: int64, float64, string, bool, nil,
// *list (a list or a tuple) and *dict. Lists and dicts are pointers, so
// that one shared through the memo and appended to later is the same.
type list struct {
	items []any
	tuple bool
}

type dict struct {
	m    map[string]any
	keys []string // in order of insertion
}

func (d *dict) set(k string, v any) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

// mark is the MARK on the unpickler's stack.
type mark struct{}

// opName names the opcodes the viewer's unpickler reads (VIEWER.md); any
// other opcode is refused.
var opName = map[byte]string{
	0x80: "PROTO", 0x95: "FRAME", '.': "STOP", '(': "MARK", '}': "EMPTY_DICT", ']': "EMPTY_LIST",
	')': "EMPTY_TUPLE", 'd': "DICT", 'l': "LIST", 't': "TUPLE", 0x85: "TUPLE1", 0x86: "TUPLE2",
	0x87: "TUPLE3", 's': "SETITEM", 'u': "SETITEMS", 'a': "APPEND", 'e': "APPENDS", 'J': "BININT",
	'K': "BININT1", 'M': "BININT2", 0x8a: "LONG1", 'G': "BINFLOAT", 0x8c: "SHORT_BINUNICODE",
	'X': "BINUNICODE", 'N': "NONE", 0x88: "NEWTRUE", 0x89: "NEWFALSE", 'q': "BINPUT", 'r': "LONG_BINPUT",
	'h': "BINGET", 'j': "LONG_BINGET", 0x94: "MEMOIZE",
}

// maxExact is the largest integer up to which every integer is exact as a
// JavaScript number.
const maxExact = 1 << 53

// unpickle decodes data as the viewer's unpickler does, refusing what it
// refuses: another protocol than 2 to 4, an opcode it does not know, an
// integer LONG1 gives in more than 8 bytes (a BigInt, on which the viewer's
// arithmetic fails) and, since the viewer computes with addresses and
// sizes as JavaScript numbers, an integer that a double does not hold
// exactly. Bytes after STOP are refused too.
func unpickle(data []byte) (any, error) {
	if len(data) < 2 || data[0] != 0x80 {
		return nil, fmt.Errorf("not a pickle of protocol 2 or later (no PROTO opcode at the start)")
	}
	if data[1] < 2 || data[1] > 4 {
		return nil, fmt.Errorf("pickle protocol %d: the viewer reads 2, 3 and 4", data[1])
	}
	u := &unpickler{data: data, pos: 2}
	return u.run()
}

type unpickler struct {
	data  []byte
	pos   int
	stack []any
	memo  map[uint32]any
}

func (u *unpickler) take(n int) ([]byte, error) {
	if n < 0 || u.pos+n > len(u.data) || u.pos+n < u.pos {
		return nil, fmt.Errorf("offset %d: truncated", u.pos)
	}
	b := u.data[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 {
		return nil, fmt.Errorf("offset %d: stack underflow", u.pos)
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	if _, ok := v.(mark); ok {
		return nil, fmt.Errorf("offset %d: MARK where a value belongs", u.pos)
	}
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) == 0 {
		return nil, fmt.Errorf("offset %d: stack underflow", u.pos)
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark pops the values down to the last MARK and the MARK.
func (u *unpickler) popMark() ([]any, error) {
	for i := len(u.stack) - 1; i >= 0; i-- {
		if _, ok := u.stack[i].(mark); ok {
			vs := append([]any(nil), u.stack[i+1:]...)
			u.stack = u.stack[:i]
			for _, v := range vs {
				if _, ok := v.(mark); ok {
					return nil, fmt.Errorf("offset %d: nested MARK", u.pos)
				}
			}
			return vs, nil
		}
	}
	return nil, fmt.Errorf("offset %d: no MARK", u.pos)
}

func (u *unpickler) setItems(d any, kvs []any) error {
	dd, ok := d.(*dict)
	if !ok {
		return fmt.Errorf("offset %d: SETITEM(S) on a %s", u.pos, typeName(d))
	}
	if len(kvs)%2 != 0 {
		return fmt.Errorf("offset %d: SETITEMS with an odd number of values", u.pos)
	}
	for i := 0; i < len(kvs); i += 2 {
		k, ok := kvs[i].(string)
		if !ok {
			return fmt.Errorf("offset %d: a dict key is a %s, not a string", u.pos, typeName(kvs[i]))
		}
		dd.set(k, kvs[i+1])
	}
	return nil
}

func (u *unpickler) appendItems(l any, vs []any) error {
	ll, ok := l.(*list)
	if !ok || ll.tuple {
		return fmt.Errorf("offset %d: APPEND(S) on a %s", u.pos, typeName(l))
	}
	ll.items = append(ll.items, vs...)
	return nil
}

func (u *unpickler) int(x int64) error {
	if x > maxExact || x < -maxExact {
		if f := float64(x); f >= math.MaxInt64 || int64(f) != x {
			return fmt.Errorf("offset %d: integer %d is not exact as a JavaScript number", u.pos, x)
		}
	}
	u.push(x)
	return nil
}

func (u *unpickler) run() (any, error) {
	u.memo = map[uint32]any{}
	for {
		if u.pos >= len(u.data) {
			return nil, fmt.Errorf("no STOP opcode")
		}
		at := u.pos
		op := u.data[u.pos]
		u.pos++
		if _, ok := opName[op]; !ok {
			return nil, fmt.Errorf("offset %d: opcode %#02x (%q), which the viewer does not read", at, op, rune(op))
		}
		if err := u.step(op); err != nil {
			return nil, err
		}
		if op == '.' {
			if u.pos != len(u.data) {
				return nil, fmt.Errorf("offset %d: %d bytes after STOP", u.pos, len(u.data)-u.pos)
			}
			if len(u.stack) != 1 {
				return nil, fmt.Errorf("offset %d: STOP with %d values on the stack", at, len(u.stack))
			}
			return u.pop()
		}
	}
}

func (u *unpickler) step(op byte) error {
	switch op {
	case 0x80:
		_, err := u.take(1)
		return err
	case 0x95:
		b, err := u.take(8)
		if err != nil {
			return err
		}
		if n := binary.LittleEndian.Uint64(b); n > uint64(len(u.data)-u.pos) {
			return fmt.Errorf("offset %d: a frame of %d bytes past the end", u.pos, n)
		}
	case '.':
	case '(':
		u.push(mark{})
	case '}':
		u.push(&dict{m: map[string]any{}})
	case ']':
		u.push(&list{})
	case ')':
		u.push(&list{tuple: true})
	case 'd':
		vs, err := u.popMark()
		if err != nil {
			return err
		}
		d := &dict{m: map[string]any{}}
		if err := u.setItems(d, vs); err != nil {
			return err
		}
		u.push(d)
	case 'l', 't':
		vs, err := u.popMark()
		if err != nil {
			return err
		}
		u.push(&list{items: vs, tuple: op == 't'})
	case 0x85, 0x86, 0x87:
		n := int(op-0x85) + 1
		vs := make([]any, n)
		for i := n - 1; i >= 0; i-- {
			v, err := u.pop()
			if err != nil {
				return err
			}
			vs[i] = v
		}
		u.push(&list{items: vs, tuple: true})
	case 's':
		v, err := u.pop()
		if err != nil {
			return err
		}
		k, err := u.pop()
		if err != nil {
			return err
		}
		d, err := u.top()
		if err != nil {
			return err
		}
		return u.setItems(d, []any{k, v})
	case 'u':
		vs, err := u.popMark()
		if err != nil {
			return err
		}
		d, err := u.top()
		if err != nil {
			return err
		}
		return u.setItems(d, vs)
	case 'a':
		v, err := u.pop()
		if err != nil {
			return err
		}
		l, err := u.top()
		if err != nil {
			return err
		}
		return u.appendItems(l, []any{v})
	case 'e':
		vs, err := u.popMark()
		if err != nil {
			return err
		}
		l, err := u.top()
		if err != nil {
			return err
		}
		return u.appendItems(l, vs)
	case 'J':
		b, err := u.take(4)
		if err != nil {
			return err
		}
		return u.int(int64(int32(binary.LittleEndian.Uint32(b))))
	case 'K':
		b, err := u.take(1)
		if err != nil {
			return err
		}
		return u.int(int64(b[0]))
	case 'M':
		b, err := u.take(2)
		if err != nil {
			return err
		}
		return u.int(int64(binary.LittleEndian.Uint16(b)))
	case 0x8a:
		n, err := u.take(1)
		if err != nil {
			return err
		}
		if n[0] > 8 {
			return fmt.Errorf("offset %d: LONG1 of %d bytes, which the viewer reads as a BigInt", u.pos, n[0])
		}
		b, err := u.take(int(n[0]))
		if err != nil {
			return err
		}
		var x uint64
		for i := len(b) - 1; i >= 0; i-- {
			x = x<<8 | uint64(b[i])
		}
		if len(b) > 0 && len(b) < 8 && b[len(b)-1]&0x80 != 0 {
			x |= math.MaxUint64 << (8 * len(b)) // sign extension
		}
		return u.int(int64(x))
	case 'G':
		b, err := u.take(8)
		if err != nil {
			return err
		}
		u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case 0x8c, 'X':
		var n int
		if op == 0x8c {
			b, err := u.take(1)
			if err != nil {
				return err
			}
			n = int(b[0])
		} else {
			b, err := u.take(4)
			if err != nil {
				return err
			}
			n = int(binary.LittleEndian.Uint32(b))
		}
		s, err := u.take(n)
		if err != nil {
			return err
		}
		u.push(string(s))
	case 'N':
		u.push(nil)
	case 0x88:
		u.push(true)
	case 0x89:
		u.push(false)
	case 'q', 'r', 0x94:
		var i uint32
		switch op {
		case 'q':
			b, err := u.take(1)
			if err != nil {
				return err
			}
			i = uint32(b[0])
		case 'r':
			b, err := u.take(4)
			if err != nil {
				return err
			}
			i = binary.LittleEndian.Uint32(b)
		default:
			i = uint32(len(u.memo))
		}
		v, err := u.top()
		if err != nil {
			return err
		}
		if _, ok := v.(mark); ok {
			return fmt.Errorf("offset %d: memoizing a MARK", u.pos)
		}
		u.memo[i] = v
	case 'h', 'j':
		var i uint32
		if op == 'h' {
			b, err := u.take(1)
			if err != nil {
				return err
			}
			i = uint32(b[0])
		} else {
			b, err := u.take(4)
			if err != nil {
				return err
			}
			i = binary.LittleEndian.Uint32(b)
		}
		v, ok := u.memo[i]
		if !ok {
			return fmt.Errorf("offset %d: memo entry %d was never stored", u.pos, i)
		}
		u.push(v)
	}
	return nil
}

// typeName names a decoded value's type for messages, in Python's terms.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case bool:
		return "bool"
	case *list:
		if x.tuple {
			return "tuple"
		}
		return "list"
	case *dict:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}
