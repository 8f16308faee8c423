package dataset

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A file is an output file written under a temporary name beside it (in
// the same directory, so that the rename stays on one file system) and
// renamed over its path by commit.
type file struct {
	*os.File
	path string
	done bool
}

// create creates the temporary for path.
func create(path string) (*file, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: cannot write beside it: %w", path, unwrapPath(err))
	}
	return &file{File: f, path: path}, nil
}

// commit closes the temporary and renames it over path, with the
// permissions path had, or 0644 for a new file, not the temporary's 0600.
func (f *file) commit() error {
	perm := fs.FileMode(0o644)
	if fi, err := os.Stat(f.path); err == nil && fi.Mode().IsRegular() {
		perm = fi.Mode().Perm()
	}
	err := f.Chmod(perm)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), f.path)
	}
	if err != nil {
		f.abort()
		return fmt.Errorf("dataset: %s: %w", f.path, unwrapPath(err))
	}
	f.done = true
	return nil
}

// abort removes the temporary unless commit renamed it.
func (f *file) abort() {
	if !f.done {
		f.Close()
		os.Remove(f.Name())
		f.done = true
	}
}

// unwrapPath drops an *fs.PathError's own path, which names the
// temporary, keeping its operation and cause.
func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
