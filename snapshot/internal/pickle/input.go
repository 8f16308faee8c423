// Package pickle reads the bytes of a Python pickle of protocols 2 to 5:
// the input through a buffer (read ahead on a goroutine when it is long),
// the opcodes and how their arguments are encoded, the faults of a pickle
// as such, at their byte offsets, and the machine that runs the opcodes
// (Machine): its values, stack and marks, interned strings and big
// integers, and its memo (Memo), in pages that go to a temporary file
// past a bound (package pages). It runs the opcodes of scalars and of the
// memo itself, the frequent ones that only push a value in a loop over
// the input's buffer (Machine.PushRun), and hands each other one
// (Machine.Step), with the values it takes off the stack, to a Builder.
// It knows nothing of what the pickle holds: containers are handles to
// it, and a memo entry's tag a byte that the Builder gives; the snapshot
// package, which embeds a Machine and is its Builder, gives them their
// meaning and reads the input's buffer and the memo's tags in place on
// its own hot path.
package pickle

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// An Input reads a pickle through a buffer of its own, counting the bytes
// read for error messages. The bytes not read yet are Buf[Pos:End]: a
// reader takes them in place and moves Pos on, and calls Need for more.
type Input struct {
	Buf      []byte
	Pos, End int
	Err      error // the reader's error, once it has one
	// Ahead allows a long input to be read ahead on a goroutine (see
	// prefetcher) once its prefetchFrom bytes are read: set it once what
	// is read is only the pickle's, and Stop the Input when done.
	Ahead bool

	r            io.Reader
	base         int64 // offset of Buf[0] in the input
	pre          *prefetcher
	chunk        []byte // the prefetcher's buffer that Buf lies in, if it does
	prefetchFrom int64
}

// NewInput returns an Input of r, whose buffer starts at 64 KiB, that may
// read ahead once prefetchFrom bytes are read (0: PrefetchFrom).
func NewInput(r io.Reader, prefetchFrom int64) Input {
	if prefetchFrom == 0 {
		prefetchFrom = PrefetchFrom
	}
	return Input{r: r, Buf: make([]byte, 64<<10), prefetchFrom: prefetchFrom}
}

// Switch makes the Input read r from its first byte, at offset 0, in its
// buffer, dropping what it holds: for a pickle found compressed once the
// first bytes are read. It must not be reading ahead.
func (in *Input) Switch(r io.Reader) {
	*in = Input{r: r, Buf: in.Buf, prefetchFrom: in.prefetchFrom}
}

// Off returns the offset of the next byte.
func (in *Input) Off() int64 { return in.base + int64(in.Pos) }

// maxBuffer is the size that the input's buffer grows to as a long input
// is read (from 64 KiB, doubling after each eight buffers read), unless a
// longer argument needs more.
const maxBuffer = 1 << 20

// Need makes n bytes available at Buf[Pos:], reading more; false at the
// input's end or error. The buffer grows only as the bytes arrive, so that
// a length that a damaged file claims costs no more memory than the file
// holds.
func (in *Input) Need(n int) bool {
	if in.End-in.Pos >= n {
		return true
	}
	if in.Err != nil {
		return false
	}
	if in.pre == nil && in.Ahead && in.base >= in.prefetchFrom {
		in.pre = startPrefetch(in.r) // a long input: read on beside
	}
	if in.pre != nil {
		for in.End-in.Pos < n && in.Err == nil {
			in.take()
		}
		return in.End-in.Pos >= n
	}
	if in.Pos > 0 {
		if len(in.Buf) < maxBuffer && in.base >= 8*int64(len(in.Buf)) {
			// A long input: fewer, larger reads.
			nb := make([]byte, 2*len(in.Buf))
			copy(nb, in.Buf[in.Pos:in.End])
			in.Buf = nb
		} else {
			copy(in.Buf, in.Buf[in.Pos:in.End])
		}
		in.base += int64(in.Pos)
		in.End -= in.Pos
		in.Pos = 0
	}
	for in.End < n && in.Err == nil {
		if in.End == len(in.Buf) {
			nb := make([]byte, min(n, 2*len(in.Buf)))
			copy(nb, in.Buf[:in.End])
			in.Buf = nb
		}
		m, err := in.r.Read(in.Buf[in.End:])
		in.End += m
		if err != nil {
			in.Err = err
		}
	}
	return in.End-in.Pos >= n
}

// Drain reads the input to its end, dropping what it reads, and returns
// the reader's error other than io.EOF.
func (in *Input) Drain() error {
	for {
		in.Pos = in.End
		if !in.Need(1) {
			break
		}
	}
	if in.Err == io.EOF {
		return nil
	}
	return in.Err
}

// An Error is a fault of the pickle itself, at a byte offset.
type Error struct {
	Off int64
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("at byte %d: %s", e.Off, e.Msg) }

// BadText returns the index of the first byte of the string b of opcode
// op that Python's unpickler refuses, or -1: it decodes the BINUNICODE
// opcodes as UTF-8, letting surrogates through ("surrogatepass"), and
// the BINSTRING ones of Python 2 as ASCII.
func BadText(op byte, b []byte) int {
	if op == OpShortBinString || op == OpBinString {
		for i, c := range b {
			if c >= utf8.RuneSelf {
				return i
			}
		}
		return -1
	}
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			if b[i] == 0xed && i+2 < len(b) && b[i+1]&0xe0 == 0xa0 && b[i+2]&0xc0 == 0x80 {
				i += 3 // a surrogate, U+D800 to U+DFFF
				continue
			}
			return i
		}
		i += n
	}
	return -1
}

// LeInt returns the integer of at most 8 bytes b, two's complement,
// little-endian, as LONG1 and LONG4 hold it.
func LeInt(b []byte) int64 {
	var u uint64
	for i := len(b) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if shift := 64 - 8*len(b); shift > 0 && shift < 64 {
		u = uint64(int64(u<<shift) >> shift) // sign-extend
	}
	return int64(u)
}
