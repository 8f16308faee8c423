package snapshot

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// The pickle's bytes: the input read through a buffer, the opcodes and
// how their arguments are encoded, and the faults of a pickle as such.
// Nothing here knows a snapshot; the machine that runs the opcodes is in
// decode.go, the model that gives its containers their meaning in
// build.go and model.go.

// input reads the pickle through a buffer of its own, counting the bytes
// read for error messages.
type input struct {
	r        io.Reader
	buf      []byte
	pos, end int
	base     int64 // offset of buf[0] in the input
	err      error // the reader's error, once it has one
	ahead    bool  // a long input may be read ahead (see prefetcher)
	pre      *prefetcher
	// prefetchFrom is the bytes read from which a long input is read
	// ahead.
	prefetchFrom int64
	chunk        []byte // the prefetcher's buffer that buf lies in, if it does
}

// off returns the offset of the next byte.
func (in *input) off() int64 { return in.base + int64(in.pos) }

// maxBuffer is the size that the input's buffer grows to as a long input
// is read (from 64 KiB, doubling after each eight buffers read), unless a
// longer argument needs more.
const maxBuffer = 1 << 20

// need makes n bytes available at buf[pos:], reading more; false at the
// input's end or error. The buffer grows only as the bytes arrive, so that
// a length that a damaged file claims costs no more memory than the file
// holds.
func (in *input) need(n int) bool {
	if in.end-in.pos >= n {
		return true
	}
	if in.err != nil {
		return false
	}
	if in.pre == nil && in.ahead && in.base >= in.prefetchFrom {
		in.pre = startPrefetch(in.r) // a long input: read on beside
	}
	if in.pre != nil {
		for in.end-in.pos < n && in.err == nil {
			in.take()
		}
		return in.end-in.pos >= n
	}
	if in.pos > 0 {
		if len(in.buf) < maxBuffer && in.base >= 8*int64(len(in.buf)) {
			// A long input: fewer, larger reads.
			nb := make([]byte, 2*len(in.buf))
			copy(nb, in.buf[in.pos:in.end])
			in.buf = nb
		} else {
			copy(in.buf, in.buf[in.pos:in.end])
		}
		in.base += int64(in.pos)
		in.end -= in.pos
		in.pos = 0
	}
	for in.end < n && in.err == nil {
		if in.end == len(in.buf) {
			nb := make([]byte, min(n, 2*len(in.buf)))
			copy(nb, in.buf[:in.end])
			in.buf = nb
		}
		m, err := in.r.Read(in.buf[in.end:])
		in.end += m
		if err != nil {
			in.err = err
		}
	}
	return in.end-in.pos >= n
}

// drain reads the input to its end, dropping what it reads, and returns
// the reader's error other than io.EOF.
func (in *input) drain() error {
	for {
		in.pos = in.end
		if !in.need(1) {
			break
		}
	}
	if in.err == io.EOF {
		return nil
	}
	return in.err
}

// A pickleError is a fault of the pickle itself, at a byte offset.
type pickleError struct {
	off int64
	msg string
}

func (e *pickleError) Error() string { return fmt.Sprintf("at byte %d: %s", e.off, e.msg) }

// refused names the opcodes that would run code or call into Python.
var refused = map[byte]string{
	'c': "GLOBAL", 0x93: "STACK_GLOBAL", 'R': "REDUCE", 'b': "BUILD", 'i': "INST", 'o': "OBJ",
	0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 'P': "PERSID", 'Q': "BINPERSID", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4",
}

// Opcodes beyond those that Write uses (Python's Lib/pickletools.py names
// them).
const (
	opLong4          = 0x8b
	opShortBinBytes  = 'C'
	opBinBytes       = 'B'
	opShortBinString = 'U'
	opBinString      = 'T'
	opBinUnicode8    = 0x8d
	opBinBytes8      = 0x8e
	opByteArray8     = 0x96
	opEmptyTuple     = ')'
	opEmptySet       = 0x8f
	opFrozenSet      = 0x91
	opAddItems       = 0x90
	opTuple          = 't'
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opList           = 'l'
	opDict           = 'd'
	opAppend         = 'a'
	opSetItem        = 's'
	opPop            = '0'
	opPopMark        = '1'
	opDup            = '2'
)

// badText returns the index of the first byte of the string b of opcode
// op that Python's unpickler refuses, or -1: it decodes the BINUNICODE
// opcodes as UTF-8, letting surrogates through ("surrogatepass"), and
// the BINSTRING ones of Python 2 as ASCII.
func badText(op byte, b []byte) int {
	if op == opShortBinString || op == opBinString {
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

// leInt returns the integer of at most 8 bytes b, two's complement,
// little-endian, as LONG1 and LONG4 hold it.
func leInt(b []byte) int64 {
	var u uint64
	for i := len(b) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if shift := 64 - 8*len(b); shift > 0 && shift < 64 {
		u = uint64(int64(u<<shift) >> shift) // sign-extend
	}
	return int64(u)
}
