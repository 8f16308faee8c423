package snapshot

import (
	"os"
	"runtime"
	"unsafe"
)

// A spill bounds the memory of a read, whatever the length of the file:
// once the pages of a read's long lists (the trace entries' records and
// the memo, see paged) take spillAfter bytes, each page filled after that
// is written to an unnamed temporary file in [os.TempDir] and dropped,
// and read back, a page at a time, when it is needed again. A list keeps
// at most maxLoaded of those pages loaded. Each page past the bound costs
// one write, and a read each time a walk over the trace comes to it
// again: the walks after a read are sequential (the start-state rebuild
// walks back, the replays forward), so that is once per walk.
//
// The file takes the pages' bytes on disk, 48 a trace entry and 9 a memo
// entry. It is closed when the read ends, unless it holds a compact
// read's traces: then when the snapshot that reads it is no longer
// referenced. Where no temporary file can be made, or one cannot be
// written, the pages are held in memory instead, as a read with no bound
// would.
type spill struct {
	f    *os.File      // nil until the first page is spilled
	end  int64         // the bytes written to f
	held int64         // the bytes of the full pages held in memory
	off  bool          // no file: hold every page
	done chan struct{} // closed when the read ends: the lists stop making pages ahead
}

// spillAfter is the bytes of full pages that a read holds in memory
// before it spills the next ones. A variable for the tests.
var spillAfter int64 = 256 << 20

// maxLoaded is the most spilled pages of one list loaded at a time. A
// variable for the tests.
var maxLoaded = 8

// keep reports whether a page of n bytes that has just filled stays in
// memory, counting it if so.
func (s *spill) keep(n int64) bool {
	if s == nil || s.off || s.held+n <= spillAfter {
		if s != nil {
			s.held += n
		}
		return true
	}
	return false
}

// write writes b at the end of the file, making the file first, and
// returns its offset, or -1 when it cannot, after which the pages are held.
func (s *spill) write(b []byte) int64 {
	if s.f == nil {
		f, err := os.CreateTemp("", "gpualloc-snapshot-*")
		if err != nil {
			s.off = true
			return -1
		}
		if os.Remove(f.Name()) != nil {
			// A system that cannot remove an open file: remove it once
			// the file is closed, when nothing refers to the spill.
			name := f.Name()
			runtime.AddCleanup(s, func(f *os.File) { f.Close(); os.Remove(name) }, f)
		}
		s.f = f
	}
	if _, err := s.f.WriteAt(b, s.end); err != nil {
		s.off = true
		return -1
	}
	at := s.end
	s.end += int64(len(b))
	return at
}

// close closes the file, if any, once nothing will read it back.
func (s *spill) close() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// rewrite writes b at offset at, where write put it, and reports whether
// it could; where it could not, the page is held instead.
func (s *spill) rewrite(b []byte, at int64) bool {
	_, err := s.f.WriteAt(b, at)
	return err == nil
}

// read reads b from offset at, where write put it.
func (s *spill) read(b []byte, at int64) {
	if _, err := s.f.ReadAt(b, at); err != nil {
		panic(&spillError{err})
	}
}

// A spillError is the panic of a read of a spilled page that fails: the
// temporary file that the read wrote cannot be read back, a fault of the
// machine rather than of the snapshot.
type spillError struct{ err error }

func (e *spillError) Error() string {
	return "snapshot: reading back the trace from its temporary file: " + e.err.Error()
}

func (e *spillError) Unwrap() error { return e.err }

// bytesOf returns the bytes of the values pg, which hold no pointers.
func bytesOf[T any](pg []T) []byte {
	if len(pg) == 0 {
		return nil
	}
	var v T
	return unsafe.Slice((*byte)(unsafe.Pointer(&pg[0])), len(pg)*int(unsafe.Sizeof(v)))
}
