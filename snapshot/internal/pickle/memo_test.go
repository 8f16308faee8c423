package pickle

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/internal/spill"
	"github.com/gpualloc/gpualloc/snapshot/internal/pages"
)

// The memo keeps the entries in order packed, with the tag that the
// Builder gives, a value too wide to pack whole, and the entries out of
// order apart; Gen counts the tagged entries stored over by another
// value.
func TestMemo(t *testing.T) {
	wide := Val{KUint, 1<<64 - 1}
	b := []byte{OpNone, OpMemoize, // 0: None, tag 0
		OpBinInt1, 3, OpMemoize, // 1: 3, tag 3
		OpLong1, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, OpMemoize, // 2: 2^64-1
		OpBinInt1, 5, OpBinPut, 9, // 9: apart
		OpBinInt1, 4, OpBinPut, 1, // 1: 4 over 3, tag 4
		OpBinInt1, 4, OpBinPut, 1, // 1: the same again
		OpBinGet, 2, OpBinGet, 9, OpBinGet, 1}
	calls, m := stepAll(t, b)
	require.NoError(t, m.Err)
	assert.Equal(t, []Val{{K: KNone}, IntVal(3), wide, IntVal(5), IntVal(4), IntVal(4), wide, IntVal(5), IntVal(4)}, m.Stack)
	assert.Equal(t, 3, m.Memo.Len())
	assert.Equal(t, []uint8{0, 4, 0xff}, m.Memo.Tags()[0])
	assert.Equal(t, uint32(1), m.Memo.Gen(), "3 stored over by 4; 4 by 4 is no change")
	v, ok := m.Memo.Entry(9)
	assert.True(t, ok)
	assert.Equal(t, IntVal(5), v)
	_, ok = m.Memo.Entry(3)
	assert.False(t, ok)
	assert.Equal(t, call{Method: "Memoized far", I: 9, Items: []Val{IntVal(5), {}}}, calls[3])
	assert.Equal(t, call{Method: "Memoized", I: 1, Items: []Val{IntVal(4), IntVal(3)}}, calls[4])

	m.Memo.Set(2, IntVal(7), 0)
	assert.Equal(t, IntVal(7), m.Memo.At(2))
	assert.Equal(t, uint32(2), m.Memo.Gen())
	m.Memo.Set(2, wide, 1)
	assert.Equal(t, wide, m.Memo.At(2))
}

// A memo past its spill's bound reads its entries and their tags back
// from the file; At loads the page of an entry's tag with it.
func TestMemoSpill(t *testing.T) {
	var fail error
	var m Memo
	m.Init(pages.NewSpill(spill.New("", "gpualloc-memo-"), 8*pages.Size, 1, &fail))
	n := 3*pages.Size + 1
	for i := range n {
		m.append(IntVal(int64(i)), uint8(i%3))
	}
	require.NoError(t, fail)
	require.Nil(t, m.Tags()[1], "spilled")
	assert.Equal(t, IntVal(pages.Size+2), m.At(pages.Size+2))
	assert.Equal(t, uint8((pages.Size+2)%3), m.Tags()[1][2])
	assert.Equal(t, IntVal(0), m.At(0))
	assert.Equal(t, IntVal(int64(n-1)), m.At(uint64(n-1)))
}

// PushRun runs the opcodes that only push a value as Step does, and
// stops, leaving it to Step, at a reference to a container, one to an
// entry not stored, a LONG1 too long, another opcode, or the buffer's end.
func TestPushRun(t *testing.T) {
	ops := []byte{OpBinInt1, 1, OpBinInt2, 2, 1, OpBinInt, 0xfe, 0xff, 0xff, 0xff, OpLong1, 2, 0, 0x80,
		OpNone, OpNewTrue, OpNewFalse, OpBinGet, 0, OpLongBinGet, 0, 0, 0, 0}
	prefix := []byte{OpBinInt1, 7, OpMemoize, OpEmptyList, OpMemoize, OpPop}
	for _, tail := range [][]byte{{OpBinGet, 1}, {OpBinGet, 2}, {OpLong1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {OpPop}} {
		src := append(append(append([]byte{}, prefix...), ops...), tail...)
		m := NewMachine(NewInput(bytes.NewReader(src), 0), nil)
		r := &recorder{m: &m}
		for m.Err == nil && m.In.Pos < len(prefix) && (m.In.Pos < m.In.End || m.In.Need(1)) {
			m.OpOff = m.In.Off()
			op := m.In.Buf[m.In.Pos]
			m.In.Pos++
			m.Step(r, op)
		}
		require.NoError(t, m.Err)
		m.Stack = m.Stack[:0]
		op := m.In.Buf[m.In.Pos]
		m.In.Pos++
		require.True(t, m.PushRun(op))
		assert.Equal(t, []Val{IntVal(1), IntVal(0x102), IntVal(-2), IntVal(-32768), {K: KNone}, {KBool, 1}, {KBool, 0}, IntVal(7), IntVal(7)}, m.Stack)
		assert.Equal(t, tail[0], m.In.Buf[m.In.Pos], "% x: left for Step", tail)
		m.In.Pos++
		assert.False(t, m.PushRun(tail[0]), "% x", tail)
	}
}

// PushRun reads a LONG1 of each length as LeInt does, whatever bytes
// follow it in the buffer, and wherever the buffer ends.
func TestPushRunLong1(t *testing.T) {
	for k := range 9 {
		for _, b := range [][]byte{{1, 2, 3, 4, 5, 6, 7, 0x88}, {0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0xfa, 0xf9, 0x7f}, {0x80, 0, 0, 0, 0, 0, 0, 0}} {
			for _, tail := range [][]byte{{OpPop}, {OpPop, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x11, 0x22, 0x33}} {
				src := append(append([]byte{OpLong1, byte(k)}, b[:k]...), tail...)
				m := NewMachine(NewInput(bytes.NewReader(src), 0), nil)
				require.True(t, m.In.Need(len(src)))
				m.In.Pos++
				require.True(t, m.PushRun(OpLong1))
				require.Equal(t, []Val{IntVal(LeInt(b[:k]))}, m.Stack, "% x", src)
				require.Equal(t, 2+k, m.In.Pos)
			}
		}
	}
}

// PushRun stops at a reference to an entry whose page is in the spill's
// file, and leaves it to Step, which loads the page.
func TestPushRunSpilled(t *testing.T) {
	var fail error
	n := 3*pages.Size + 1
	held, spilled := uint32(n-1), uint32(pages.Size+2)
	src := []byte{OpLongBinGet, byte(held), byte(held >> 8), byte(held >> 16), 0,
		OpLongBinGet, byte(spilled), byte(spilled >> 8), byte(spilled >> 16), 0, OpPop}
	m := NewMachine(NewInput(bytes.NewReader(src), 0), nil)
	m.Memo.Init(pages.NewSpill(spill.New("", "gpualloc-memo-"), 8*pages.Size, 1, &fail))
	for i := range n {
		m.Memo.append(IntVal(int64(i)), 0)
	}
	require.NoError(t, fail)
	require.Nil(t, m.Memo.Tags()[1], "spilled")
	require.True(t, m.In.Need(len(src)))
	m.In.Pos++
	require.True(t, m.PushRun(OpLongBinGet))
	assert.Equal(t, []Val{IntVal(int64(held))}, m.Stack)
	require.Equal(t, 5, m.In.Pos, "the reference to the spilled entry is left")
	m.In.Pos++
	m.Step(&recorder{m: &m}, OpLongBinGet)
	require.NoError(t, m.Err)
	assert.Equal(t, []Val{IntVal(int64(held)), IntVal(int64(spilled))}, m.Stack)
}
