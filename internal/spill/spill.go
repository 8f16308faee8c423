// Package spill is the temporary file that a long read or recording
// writes what it would otherwise hold in memory to, and reads back.
//
// A [File] is made in the directory it is given ("" for [os.TempDir],
// which TMPDIR sets) when the first bytes are written, and its name is
// removed at once where the system allows it, so that nothing is left
// behind by a program that fails or is killed; else it is removed when
// the File is closed or, for one never closed, no longer referenced.
//
// Cost: the file takes on disk the bytes appended to it, as given (its
// users say what that is per entry); a File holds an open file and a few
// words of memory, and buffers nothing: each Append, WriteAt and ReadAt is
// one system call.
//
// Errors: every method returns the failure of the system's call, naming
// the file. The first failure to make or write the file is kept: later
// writes return it without trying again (the bytes a failed write left
// out would be missing from the file anyway), and [File.Err] reports it.
package spill

import (
	"fmt"
	"os"
	"runtime"
)

// A File is a temporary file written at its end and read back at any
// offset. The zero File is not usable: make one with [New]. ReadAt may
// be called from several goroutines at once; the other methods may not
// be called while another method runs.
type File struct {
	dir     string
	pattern string
	f       *os.File
	name    string // f's
	removed bool   // f's name was removed when it was made
	closed  bool
	size    int64
	err     error // the first failure to make or write the file
}

// New returns a File to be made in dir ("" for [os.TempDir]) with a name
// that starts with prefix, once something is written to it.
func New(dir, prefix string) *File {
	return &File{dir: dir, pattern: prefix + "*"}
}

// Append writes b at the end of the file, making the file first, and
// returns the offset it was written at.
func (s *File) Append(b []byte) (int64, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.closed {
		s.err = fmt.Errorf("writing the temporary file %s: %w", s.name, os.ErrClosed)
		return 0, s.err
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, s.pattern)
		if err != nil {
			s.err = fmt.Errorf("making a temporary file: %w", err)
			return 0, s.err
		}
		name := f.Name()
		s.name = name
		s.removed = os.Remove(name) == nil
		if !s.removed {
			// A system that cannot remove an open file: remove it once
			// the file is closed, at the latest when nothing refers to s.
			runtime.AddCleanup(s, func(f *os.File) { f.Close(); os.Remove(name) }, f)
		}
		s.f = f
	}
	at := s.size
	if _, err := s.f.WriteAt(b, at); err != nil {
		s.err = fmt.Errorf("writing the temporary file %s: %w", s.f.Name(), unwrapPath(err))
		return 0, s.err
	}
	s.size += int64(len(b))
	return at, nil
}

// WriteAt writes b over the bytes at offset at, which Append wrote.
func (s *File) WriteAt(b []byte, at int64) error {
	if s.err != nil {
		return s.err
	}
	if s.closed {
		s.err = fmt.Errorf("writing the temporary file %s: %w", s.name, os.ErrClosed)
		return s.err
	}
	if s.f == nil || at < 0 || at+int64(len(b)) > s.size {
		return fmt.Errorf("writing the temporary file: bytes %d to %d of %d", at, at+int64(len(b)), s.size)
	}
	if _, err := s.f.WriteAt(b, at); err != nil {
		s.err = fmt.Errorf("writing the temporary file %s: %w", s.f.Name(), unwrapPath(err))
		return s.err
	}
	return nil
}

// ReadAt reads len(b) bytes from offset at, which Append wrote. A failed
// read is not kept: the next may succeed.
func (s *File) ReadAt(b []byte, at int64) error {
	if s.closed {
		return fmt.Errorf("reading back the temporary file %s: %w", s.name, os.ErrClosed)
	}
	if len(b) == 0 {
		return nil
	}
	if s.f == nil || at < 0 || at+int64(len(b)) > s.size {
		return fmt.Errorf("reading back the temporary file: bytes %d to %d of %d", at, at+int64(len(b)), s.size)
	}
	if _, err := s.f.ReadAt(b, at); err != nil {
		return fmt.Errorf("reading back the temporary file %s: %w", s.f.Name(), unwrapPath(err))
	}
	return nil
}

// Size returns the bytes appended.
func (s *File) Size() int64 { return s.size }

// Err returns the first failure to make or write the file, if any.
func (s *File) Err() error { return s.err }

// Close closes the file, if it was made, and removes its name if it is
// still there. A File closed may not be used again.
func (s *File) Close() error {
	if s.f == nil {
		return nil
	}
	name := s.f.Name()
	err := s.f.Close()
	s.f, s.closed = nil, true
	if !s.removed {
		if rerr := os.Remove(name); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// unwrapPath drops the operation and path of an *os.PathError, which the
// messages name already.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
