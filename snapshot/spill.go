package snapshot

import (
	"encoding/binary"

	spillfile "github.com/gpualloc/gpualloc/internal/spill"
)

// A spill bounds the memory of a read, whatever the length of the file:
// once the pages of a read's long lists (the trace entries' records and
// the memo, see paged) take after bytes ([ReadOptions.MaxHeld]), each
// page filled after that is written to an unnamed temporary file (a
// [spillfile.File] in [ReadOptions.TempDir]) and dropped, and read back,
// a page at a time, when it is needed again. A list keeps at most loaded
// of those pages loaded. Each page past the bound costs one write, and a
// read each time a walk over the trace comes to it again: the walks after
// a read are sequential (the start-state rebuild walks back, the replays
// forward), so that is once per walk.
//
// The file takes the pages' bytes on disk, 48 a trace entry and 9 a memo
// entry, written and read back field by field (encodePage, decodePage)
// through one page's buffer. It is closed when the read ends, unless it
// holds a read's traces: then when the snapshot that reads it is
// no longer referenced.
//
// The first failure to make, write or read the file back during the read
// ends the read with that error: nothing is tried again, and no page is
// held past the bound instead. After the read, a trace that cannot read
// a page back reports it by [Trace.Err].
type spill struct {
	f      *spillfile.File
	after  int64  // the bytes of full pages held in memory before the next are spilled
	loaded int    // the most spilled pages of one list loaded at a time
	held   int64  // the bytes of the full pages held in memory
	fail   *error // where the first failure goes: the decoder's error, which stops it
	buf    []byte // a page's bytes, written or read
}

// The bounds of a read that its ReadOptions leave at zero.
const (
	defaultMaxHeld = 256 << 20
	defaultLoaded  = 8
)

// newSpill returns the spill of a read with o, whose first failure is
// stored in *fail.
func newSpill(o ReadOptions, fail *error) *spill {
	s := &spill{f: spillfile.New(o.TempDir, "gpualloc-snapshot-"), after: o.MaxHeld, loaded: orDefault(o.maxLoaded, defaultLoaded), fail: fail}
	if s.after <= 0 {
		s.after = defaultMaxHeld
	}
	return s
}

// keep reports whether a page of n bytes that has just filled stays in
// memory, counting it if so.
func (s *spill) keep(n int64) bool {
	if s == nil || s.held+n <= s.after {
		if s != nil {
			s.held += n
		}
		return true
	}
	return false
}

// failed records err, the spill's first failure, as the read's error if
// it has none yet.
func (s *spill) failed(err error) {
	if *s.fail == nil {
		*s.fail = &spillError{err}
	}
}

// write writes b at the end of the file and returns its offset, or false
// when it cannot, which fails the read.
func (s *spill) write(b []byte) (int64, bool) {
	at, err := s.f.Append(b)
	if err != nil {
		s.failed(err)
		return 0, false
	}
	return at, true
}

// rewrite writes b at offset at, where write put it, and reports whether
// it could; where it could not, the read fails.
func (s *spill) rewrite(b []byte, at int64) bool {
	if err := s.f.WriteAt(b, at); err != nil {
		s.failed(err)
		return false
	}
	return true
}

// read reads b from offset at, where write put it; where it cannot, the
// read fails.
func (s *spill) read(b []byte, at int64) {
	if err := s.f.ReadAt(b, at); err != nil {
		s.failed(err)
	}
}

// close closes the file, if any, once nothing will read it back.
func (s *spill) close() { s.f.Close() }

// A spillError is a failure of the temporary file of a read: a fault of
// the machine (a full disk, a missing directory) rather than of the
// snapshot.
type spillError struct{ err error }

func (e *spillError) Error() string { return e.err.Error() }

func (e *spillError) Unwrap() error { return e.err }

// flat lists the types of the values that paged lists hold, which
// encodePage and decodePage write out and read back: each is a case of
// theirs, which TestPageCodec checks.
type flat interface {
	entryRec | uint64 | byte
}

// recBytes is the bytes that an entryRec takes in the file.
const recBytes = 48

// pageBytes returns the bytes that n values of type T take in the file.
func pageBytes[T flat](n int) int {
	var v T
	switch any(v).(type) {
	case uint64:
		return 8 * n
	case entryRec:
		return recBytes * n
	}
	return n
}

// room returns buf with n bytes, reallocated if it has not the room.
func room(buf []byte, n int) []byte {
	if cap(buf) < n {
		return make([]byte, n)
	}
	return buf[:n]
}

// encodePage returns the bytes of the values pg, in buf if it has room.
func encodePage[T flat](buf []byte, pg []T) []byte {
	buf = room(buf, pageBytes[T](len(pg)))
	switch pg := any(pg).(type) {
	case []byte:
		copy(buf, pg)
	case []uint64:
		for i, v := range pg {
			binary.LittleEndian.PutUint64(buf[8*i:], v)
		}
	case []entryRec:
		for i := range pg {
			r, b := &pg[i], buf[recBytes*i:recBytes*(i+1)]
			binary.LittleEndian.PutUint64(b[0:], r.addr)
			binary.LittleEndian.PutUint64(b[8:], r.stream)
			binary.LittleEndian.PutUint64(b[16:], uint64(r.size))
			binary.LittleEndian.PutUint64(b[24:], uint64(r.time))
			binary.LittleEndian.PutUint32(b[32:], r.action)
			binary.LittleEndian.PutUint32(b[36:], r.category)
			binary.LittleEndian.PutUint32(b[40:], uint32(r.stack))
			b[44] = 0
			if r.emptyCache {
				b[44] = 1
			}
		}
	}
	return buf
}

// decodePage sets the values pg from b, as encodePage wrote them.
func decodePage[T flat](pg []T, b []byte) {
	switch pg := any(pg).(type) {
	case []byte:
		copy(pg, b)
	case []uint64:
		for i := range pg {
			pg[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	case []entryRec:
		for i := range pg {
			r, b := &pg[i], b[recBytes*i:recBytes*(i+1)]
			*r = entryRec{
				addr: binary.LittleEndian.Uint64(b[0:]), stream: binary.LittleEndian.Uint64(b[8:]),
				size: int64(binary.LittleEndian.Uint64(b[16:])), time: int64(binary.LittleEndian.Uint64(b[24:])),
				action: binary.LittleEndian.Uint32(b[32:]), category: binary.LittleEndian.Uint32(b[36:]),
				stack: StackID(binary.LittleEndian.Uint32(b[40:])), emptyCache: b[44] != 0,
			}
		}
	}
}
