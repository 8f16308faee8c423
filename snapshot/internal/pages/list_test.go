package pages

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/internal/spill"
)

// A List holds its values across its pages; the zero List holds them
// all, with no codec.
func TestList(t *testing.T) {
	var none List[uint64]
	require.Equal(t, 0, none.Len())
	require.Empty(t, none.Hold().Pages)

	var m List[uint64]
	for i := range 2*Size + 3 {
		m.Append(uint64(i))
	}
	require.Equal(t, 2*Size+3, m.Len())
	for _, i := range []uint64{0, Size - 1, Size, 2 * Size, 2*Size + 2} {
		require.Equal(t, i, *m.At(i))
	}
	h := m.Hold()
	require.Len(t, h.Pages, 3)
	require.Empty(t, h.Offs)
	require.Equal(t, 2*Size+3, h.N)
}

// A List past its spill's bound writes each page it fills and reads it
// back when asked, loading at most the spill's loaded, and a value
// changed on a page written out is written again before the page is
// dropped.
func TestListSpill(t *testing.T) {
	var fail error
	sp := NewSpill(spill.New("", "gpualloc-pages-"), 8*Size, 1, &fail) // the first page of uint64s held, the rest spilled
	m := New(sp, Uint64s)
	const n = 4*Size + 9
	for i := range n {
		m.Append(uint64(i))
	}
	require.Equal(t, 1, m.from)
	require.Len(t, m.offs, 3, "the full pages after the first")
	require.NotNil(t, m.Pages[0])
	require.Nil(t, m.Pages[1])
	*m.At(Size + 3) = 7
	m.Changed(Size + 3)
	for _, i := range []uint64{0, Size, 2*Size + 1, 3*Size + 2, n - 1} {
		require.Equal(t, i, *m.At(i))
		require.LessOrEqual(t, len(m.loaded), 1)
	}
	require.Equal(t, uint64(7), *m.At(Size + 3), "written again when dropped")
	require.Equal(t, int64(3*Size*8), sp.File().Size())
	require.NoError(t, fail)

	// A changed page that cannot be written again fails the spill, with
	// the file's error, and stays; nothing is written after.
	*m.At(2*Size + 4) = 9
	m.Changed(2*Size + 4)
	sp.Close()
	m.At(Size) // drops page 2
	require.ErrorIs(t, fail, os.ErrClosed)
	require.ErrorContains(t, fail, "gpualloc-pages-")
	var pe *Error
	require.ErrorAs(t, fail, &pe)
	require.NotNil(t, m.Pages[2], "held")
	require.Equal(t, uint64(9), *m.At(2*Size + 4))
	require.ErrorContains(t, sp.File().Err(), "writing the temporary file", "the page's rewrite failed")
	first, size := fail, sp.File().Size()
	for i := range 2 * Size {
		m.Append(uint64(i))
	}
	require.Same(t, first, fail, "the first failure stays")
	require.Equal(t, size, sp.File().Size(), "nothing is written after")
}

// Hold writes the last page of a list that spills, and leaves the pages
// held before the first spilled.
func TestListHold(t *testing.T) {
	var fail error
	sp := NewSpill(spill.New("", "gpualloc-pages-"), Size, 2, &fail) // the first page of bytes held
	m := New(sp, Bytes)
	for i := range 2*Size + 5 {
		m.Append(byte(i))
	}
	h := m.Hold()
	require.NoError(t, fail)
	require.Len(t, h.Pages, 1)
	require.Len(t, h.Offs, 2, "the full page spilled, and the last")
	require.Same(t, sp, h.Spill)
	require.Equal(t, 2*Size+5, h.N)
	require.Equal(t, 2, h.Spill.Loaded())
	b := make([]byte, 5)
	require.NoError(t, sp.File().ReadAt(b, h.Offs[1]))
	require.Equal(t, []byte{0, 1, 2, 3, 4}, b)
	sp.Close()
}

// The codecs of the package read back what they write.
func TestCodecs(t *testing.T) {
	u := []uint64{0, 1, 1<<64 - 1, 0x0102030405060708}
	var buf []byte
	b := Uint64s.encode(&buf, u)
	require.Len(t, b, 32)
	gu := make([]uint64, len(u))
	Uint64s.Decode(gu, b)
	require.Equal(t, u, gu)

	by := []byte{0, 1, 3, 255}
	gb := make([]byte, len(by))
	Bytes.Decode(gb, Bytes.encode(&buf, by))
	require.Equal(t, by, gb)
}
