package pages

import (
	"encoding/binary"

	"github.com/gpualloc/gpualloc/internal/spill"
)

// A Spill bounds the memory of the lists that share it, whatever their
// length: once their full pages held in memory take after bytes, each
// page filled after that is written to a temporary file (a [spill.File])
// and dropped, and read back, a page at a time, when it is needed again.
// A list keeps at most loaded of those pages loaded. Each page past the
// bound costs one write, and a read each time a walk over its list comes
// to it again: once per walk, for walks in order.
//
// The file takes the pages' bytes on disk, by the Codec of each list,
// written and read back through one page's buffer.
//
// The first failure to make, write or read the file back is stored, as
// an *Error, where the Spill was told to store it, unless something is
// there already: its user stops on it. Nothing is tried again, and no
// page is held past the bound instead.
type Spill struct {
	f      *spill.File
	after  int64  // the bytes of full pages held in memory before the next are spilled
	loaded int    // the most spilled pages of one list loaded at a time
	held   int64  // the bytes of the full pages held in memory
	fail   *error // where the first failure goes
	buf    []byte // a page's bytes, written or read
}

// NewSpill returns a Spill to f that holds after bytes of full pages in
// memory, loads at most loaded spilled pages of a list at a time, and
// stores its first failure in *fail.
func NewSpill(f *spill.File, after int64, loaded int, fail *error) *Spill {
	return &Spill{f: f, after: after, loaded: loaded, fail: fail}
}

// File returns the file that s writes to.
func (s *Spill) File() *spill.File { return s.f }

// Loaded returns the most spilled pages of a list that s loads at a time.
func (s *Spill) Loaded() int { return s.loaded }

// Close closes the file, once nothing will read it back.
func (s *Spill) Close() { s.f.Close() }

// keep reports whether a page of n bytes that has just filled stays in
// memory, counting it if so.
func (s *Spill) keep(n int64) bool {
	if s.held+n <= s.after {
		s.held += n
		return true
	}
	return false
}

// failed records err, the spill's first failure, unless a failure is
// recorded already.
func (s *Spill) failed(err error) {
	if *s.fail == nil {
		*s.fail = &Error{err}
	}
}

// write writes b at the end of the file and returns its offset, or false
// when it cannot, which fails the spill.
func (s *Spill) write(b []byte) (int64, bool) {
	at, err := s.f.Append(b)
	if err != nil {
		s.failed(err)
		return 0, false
	}
	return at, true
}

// rewrite writes b at offset at, where write put it, and reports whether
// it could; where it could not, the spill fails.
func (s *Spill) rewrite(b []byte, at int64) bool {
	if err := s.f.WriteAt(b, at); err != nil {
		s.failed(err)
		return false
	}
	return true
}

// read reads b from offset at, where write put it; where it cannot, the
// spill fails.
func (s *Spill) read(b []byte, at int64) {
	if err := s.f.ReadAt(b, at); err != nil {
		s.failed(err)
	}
}

// An Error is a failure of a Spill's file: a fault of the machine (a
// full disk, a missing directory) rather than of what is read.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// A Codec is how a page of values of type T is held in a Spill's file:
// Bytes bytes a value, Encode writing n values into b[:Bytes*n], Decode
// reading them back. The values need not be flat: a Codec writes each
// field as its user decides.
type Codec[T any] struct {
	Bytes  int
	Encode func(b []byte, pg []T)
	Decode func(pg []T, b []byte)
}

// encode returns the bytes of pg in *buf, grown if it has not the room.
func (c *Codec[T]) encode(buf *[]byte, pg []T) []byte {
	*buf = Room(*buf, c.Bytes*len(pg))
	c.Encode(*buf, pg)
	return *buf
}

// Room returns buf with n bytes, reallocated if it has not the room.
func Room(buf []byte, n int) []byte {
	if cap(buf) < n {
		return make([]byte, n)
	}
	return buf[:n]
}

// Uint64s is the Codec of uint64 values: 8 bytes each, little-endian.
var Uint64s = &Codec[uint64]{
	Bytes: 8,
	Encode: func(b []byte, pg []uint64) {
		for i, v := range pg {
			binary.LittleEndian.PutUint64(b[8*i:], v)
		}
	},
	Decode: func(pg []uint64, b []byte) {
		for i := range pg {
			pg[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	},
}

// Bytes is the Codec of byte values, as they are.
var Bytes = &Codec[byte]{
	Bytes:  1,
	Encode: func(b []byte, pg []byte) { copy(b, pg) },
	Decode: func(pg []byte, b []byte) { copy(pg, b) },
}
