package pickle

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readAll reads data through an Input in pieces of the sizes that steps
// gives in turn, reading ahead from ahead bytes on (0: never), and
// returns what it read.
func readAll(t *testing.T, r io.Reader, steps []byte, ahead int64) []byte {
	t.Helper()
	in := NewInput(r, ahead)
	in.Ahead = ahead > 0
	defer in.Stop()
	var out []byte
	for i := 0; ; i++ {
		n := 1
		if len(steps) > 0 {
			n = int(steps[i%len(steps)])%5000 + 1
		}
		if !in.Need(n) {
			out = append(out, in.Buf[in.Pos:in.End]...)
			require.Equal(t, int64(len(out)), in.Off()+int64(in.End-in.Pos))
			return out
		}
		require.Equal(t, int64(len(out)), in.Off(), "the offset of the next byte")
		out = append(out, in.Buf[in.Pos:in.Pos+n]...)
		in.Pos += n
	}
}

// An Input gives the bytes of its reader in order, whatever the pieces
// asked for, read ahead or not, through readers that give a byte at a
// time.
func FuzzInput(f *testing.F) {
	f.Add(bytes.Repeat([]byte("pickle"), 50_000), []byte{1, 200, 7})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, data, steps []byte) {
		for _, ahead := range []int64{0, 1, 100} {
			got := readAll(t, bytes.NewReader(data), steps, ahead)
			require.True(t, bytes.Equal(data, got), "ahead %d", ahead)
			got = readAll(t, iotest.OneByteReader(bytes.NewReader(data)), steps, ahead)
			require.True(t, bytes.Equal(data, got), "one byte at a time, ahead %d", ahead)
		}
	})
}

// A reader's error ends the input with it, read ahead or not, and Drain
// returns it; io.EOF is the input's end, not an error.
func TestInputErrors(t *testing.T) {
	for _, ahead := range []int64{0, 1} {
		in := NewInput(io.MultiReader(bytes.NewReader(make([]byte, 3<<20)), iotest.ErrReader(io.ErrClosedPipe)), ahead)
		in.Ahead = ahead > 0
		assert.ErrorIs(t, in.Drain(), io.ErrClosedPipe)
		assert.False(t, in.Need(1))
		in.Stop()
		in = NewInput(bytes.NewReader(make([]byte, 3<<20)), ahead)
		in.Ahead = ahead > 0
		assert.NoError(t, in.Drain())
		assert.Equal(t, int64(3<<20), in.Off())
		in.Stop()
	}
}

// Switch reads another reader from offset 0, in the same buffer.
func TestInputSwitch(t *testing.T) {
	in := NewInput(bytes.NewReader([]byte("abcdef")), 0)
	require.True(t, in.Need(2))
	in.Pos += 2
	in.Switch(bytes.NewReader([]byte("xyz")))
	require.True(t, in.Need(3))
	assert.Equal(t, "xyz", string(in.Buf[in.Pos:in.Pos+3]))
	assert.Equal(t, int64(0), in.Off())
	assert.False(t, in.Need(4))
}

func TestError(t *testing.T) {
	assert.Equal(t, "at byte 12: truncated", (&Error{Off: 12, Msg: "truncated"}).Error())
}

// BadText refuses what Python's unpickler refuses: invalid UTF-8 in the
// BINUNICODE opcodes, its surrogates let through, and any byte past ASCII
// in the BINSTRING ones.
func TestBadText(t *testing.T) {
	for _, tc := range []struct {
		op   byte
		s    string
		want int
	}{
		{OpBinUnicode, "héllo", -1},
		{OpBinUnicode, "ab\xffc", 2},
		{OpShortBinUnicode, "\xed\xa0\x80", -1}, // U+D800, a surrogate
		{OpBinUnicode8, "\xed\xa0", 0},
		{OpBinString, "abc", -1},
		{OpShortBinString, "aé", 1},
	} {
		assert.Equal(t, tc.want, BadText(tc.op, []byte(tc.s)), "%q", tc.s)
	}
}

func TestLeInt(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want int64
	}{
		{nil, 0},
		{[]byte{0xff}, -1},
		{[]byte{0x7f}, 127},
		{[]byte{0x00, 0x80}, -32768},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 1<<63 - 1},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0x80}, -1 << 63},
	} {
		assert.Equal(t, tc.want, LeInt(tc.b), "%x", tc.b)
	}
}

func TestRefused(t *testing.T) {
	name, ok := Refused('c')
	assert.True(t, ok)
	assert.Equal(t, "GLOBAL", name)
	_, ok = Refused(OpBinGet)
	assert.False(t, ok)
}
