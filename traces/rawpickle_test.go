package traces

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
)

// decodeRawPickle decodes a pickle of the types a PyTorch snapshot holds
// (dict, list, str, int, float, bool, None, tuple) into map[any]any,
// []any, string, int64 (*big.Int past its range), float64, bool and nil:
// an independent decoding for the tests to check the snapshot reader's
// against. A list shared through the memo is the same list wherever it is
// referred to, filled; og-rek's decoder memoizes a list as it was then,
// empty, so that the frames lists PyTorch shares between trace entries
// are empty after their first.
func decodeRawPickle(data []byte) (any, error) {
	type list struct{ items []any }
	var stack, memo []any
	var marks []int
	pos := 0
	take := func(n int) ([]byte, error) {
		if n < 0 || pos+n > len(data) {
			return nil, fmt.Errorf("pickle ends at byte %d", len(data))
		}
		b := data[pos : pos+n]
		pos += n
		return b, nil
	}
	pop := func() (any, error) {
		if len(stack) == 0 {
			return nil, fmt.Errorf("stack underflow at byte %d", pos)
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v, nil
	}
	popMark := func() ([]any, error) {
		if len(marks) == 0 {
			return nil, fmt.Errorf("no mark at byte %d", pos)
		}
		k := marks[len(marks)-1]
		marks = marks[:len(marks)-1]
		items := append([]any(nil), stack[k:]...)
		stack = stack[:k]
		return items, nil
	}
	put := func(i int) error {
		if len(stack) == 0 {
			return fmt.Errorf("memoize of an empty stack at byte %d", pos)
		}
		for len(memo) <= i {
			memo = append(memo, nil)
		}
		memo[i] = stack[len(stack)-1]
		return nil
	}
	get := func(i int) error {
		if i >= len(memo) {
			return fmt.Errorf("memo %d unset at byte %d", i, pos)
		}
		stack = append(stack, memo[i])
		return nil
	}
	str := func(n int) error {
		b, err := take(n)
		stack = append(stack, string(b))
		return err
	}
	top := func() any {
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	appendTo := func(items []any) error {
		l, ok := top().(*list)
		if !ok {
			return fmt.Errorf("append to a %T at byte %d", top(), pos)
		}
		l.items = append(l.items, items...)
		return nil
	}
	setIn := func(items []any) error {
		m, ok := top().(map[any]any)
		if !ok || len(items)%2 != 0 {
			return fmt.Errorf("setitems on a %T at byte %d", top(), pos)
		}
		for i := 0; i < len(items); i += 2 {
			switch items[i].(type) {
			case string, int64, bool, float64, nil:
			default:
				return fmt.Errorf("a key of type %T at byte %d", items[i], pos)
			}
			m[items[i]] = items[i+1]
		}
		return nil
	}
	for {
		op, err := take(1)
		if err != nil {
			return nil, err
		}
		var b []byte
		switch op[0] {
		case 0x80: // PROTO
			_, err = take(1)
		case 0x95: // FRAME
			_, err = take(8)
		case '.': // STOP
			v, err := pop()
			if err != nil {
				return nil, err
			}
			// Lists become []any, each shared one once.
			lists := map[*list][]any{}
			var conv func(v any) any
			conv = func(v any) any {
				switch x := v.(type) {
				case *list:
					if out, ok := lists[x]; ok {
						return out
					}
					out := make([]any, len(x.items))
					lists[x] = out
					for i, it := range x.items {
						out[i] = conv(it)
					}
					return out
				case map[any]any:
					for k, it := range x {
						x[k] = conv(it)
					}
				case []any: // a tuple
					for i, it := range x {
						x[i] = conv(it)
					}
				}
				return v
			}
			return conv(v), nil
		case '(': // MARK
			marks = append(marks, len(stack))
		case '}': // EMPTY_DICT
			stack = append(stack, map[any]any{})
		case ']': // EMPTY_LIST
			stack = append(stack, &list{})
		case ')': // EMPTY_TUPLE
			stack = append(stack, []any{})
		case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
			n := int(op[0]-0x85) + 1
			if len(stack) < n {
				return nil, fmt.Errorf("stack underflow at byte %d", pos)
			}
			t := append([]any(nil), stack[len(stack)-n:]...)
			stack = append(stack[:len(stack)-n], t)
		case 't': // TUPLE
			var items []any
			if items, err = popMark(); err == nil {
				stack = append(stack, items)
			}
		case 'a': // APPEND
			var v any
			if v, err = pop(); err == nil {
				err = appendTo([]any{v})
			}
		case 'e': // APPENDS
			var items []any
			if items, err = popMark(); err == nil {
				err = appendTo(items)
			}
		case 's': // SETITEM
			if len(stack) < 2 {
				return nil, fmt.Errorf("stack underflow at byte %d", pos)
			}
			items := append([]any(nil), stack[len(stack)-2:]...)
			stack = stack[:len(stack)-2]
			err = setIn(items)
		case 'u': // SETITEMS
			var items []any
			if items, err = popMark(); err == nil {
				err = setIn(items)
			}
		case 0x94: // MEMOIZE
			err = put(len(memo))
		case 'q': // BINPUT
			if b, err = take(1); err == nil {
				err = put(int(b[0]))
			}
		case 'r': // LONG_BINPUT
			if b, err = take(4); err == nil {
				err = put(int(binary.LittleEndian.Uint32(b)))
			}
		case 'h': // BINGET
			if b, err = take(1); err == nil {
				err = get(int(b[0]))
			}
		case 'j': // LONG_BINGET
			if b, err = take(4); err == nil {
				err = get(int(binary.LittleEndian.Uint32(b)))
			}
		case 'J': // BININT
			if b, err = take(4); err == nil {
				stack = append(stack, int64(int32(binary.LittleEndian.Uint32(b))))
			}
		case 'K': // BININT1
			if b, err = take(1); err == nil {
				stack = append(stack, int64(b[0]))
			}
		case 'M': // BININT2
			if b, err = take(2); err == nil {
				stack = append(stack, int64(binary.LittleEndian.Uint16(b)))
			}
		case 0x8a: // LONG1: little-endian two's complement
			if b, err = take(1); err == nil {
				if b, err = take(int(b[0])); err == nil {
					be := make([]byte, len(b))
					for i := range b {
						be[len(b)-1-i] = b[i]
					}
					n := new(big.Int).SetBytes(be)
					if len(b) > 0 && b[len(b)-1]&0x80 != 0 {
						n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
					}
					if n.IsInt64() {
						stack = append(stack, n.Int64())
					} else {
						stack = append(stack, n)
					}
				}
			}
		case 'X': // BINUNICODE
			if b, err = take(4); err == nil {
				err = str(int(binary.LittleEndian.Uint32(b)))
			}
		case 0x8c: // SHORT_BINUNICODE
			if b, err = take(1); err == nil {
				err = str(int(b[0]))
			}
		case 0x8d: // BINUNICODE8
			if b, err = take(8); err == nil {
				n := binary.LittleEndian.Uint64(b)
				if n > uint64(len(data)) {
					return nil, fmt.Errorf("string of %d bytes at byte %d", n, pos)
				}
				err = str(int(n))
			}
		case 'G': // BINFLOAT
			if b, err = take(8); err == nil {
				stack = append(stack, math.Float64frombits(binary.BigEndian.Uint64(b)))
			}
		case 0x88: // NEWTRUE
			stack = append(stack, true)
		case 0x89: // NEWFALSE
			stack = append(stack, false)
		case 'N': // NONE
			stack = append(stack, nil)
		default:
			return nil, fmt.Errorf("opcode %#x at byte %d", op[0], pos-1)
		}
		if err != nil {
			return nil, err
		}
	}
}

func TestDecodeRawPickle(t *testing.T) {
	// A list shared through the memo is the filled list at each reference.
	shared := []byte{0x80, 2, '}', 'q', 0, '(', 'X', 1, 0, 0, 0, 'a', ']', 'q', 1, '(', 'K', 1, 'K', 2, 'e',
		'X', 1, 0, 0, 0, 'b', 'h', 1, 'u', '.'}
	v, err := decodeRawPickle(shared)
	require.NoError(t, err)
	assert.Equal(t, map[any]any{"a": []any{int64(1), int64(2)}, "b": []any{int64(1), int64(2)}}, v)

	big64, _ := new(big.Int).SetString("18446744073709551615", 10)
	in := pk.Dict{
		{K: "segments", V: []any{pk.Dict{{K: "address", V: uint64(0x7f0000000000)}, {K: "pool", V: [2]any{0, 0}}}}},
		{K: "n", V: -5}, {K: "m", V: 70000}, {K: "x", V: 1.5}, {K: "t", V: true}, {K: "f", V: false}, {K: "none", V: nil},
		{K: "big", V: big64}, {K: "four", V: pk.Tuple{1, "s", "s", 2}}, {K: "empty", V: []any{}},
	}
	want := map[any]any{
		"segments": []any{map[any]any{"address": int64(0x7f0000000000), "pool": []any{int64(0), int64(0)}}},
		"n":        int64(-5), "m": int64(70000), "x": 1.5, "t": true, "f": false, "none": nil,
		"big": big64, "four": []any{int64(1), "s", "s", int64(2)}, "empty": []any{},
	}
	for _, proto := range []int{2, 3, 4, 5} {
		for _, memo := range []bool{false, true} {
			for _, long := range []bool{false, true} {
				v, err := decodeRawPickle(pk.Encode(in, pk.Options{Proto: proto, Memo: memo, AllLong: long}))
				require.NoError(t, err)
				assert.Equal(t, want, v, "protocol %d, memo %v, all long %v", proto, memo, long)
			}
		}
	}

	for _, bad := range [][]byte{{0x80, 2}, {0x80, 2, 'h', 0, '.'}, {0x80, 2, 'K', 1, 'a', '.'}, {0x80, 2, 0xff, '.'}, {0x80, 2, 'X', 9, 0, 0, 0, 'a'}} {
		_, err := decodeRawPickle(bad)
		assert.Error(t, err, "%q", bad)
	}
}
