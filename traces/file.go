package traces

import (
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Open opens the trace file at path for reading, in whichever format its
// content matches (see [NewReader] and [Formats]); "-" reads the
// standard input, named "stdin" in errors. Errors name the file by path. The
// file may be gzip-compressed, whatever its name. Close the reader to close
// the file.
func Open(path string, opts Options) (FileReader, error) {
	f, name := os.Stdin, "stdin"
	if path != "-" {
		var err error
		if f, err = os.Open(path); err != nil {
			// "FILE: no such file or directory", like every other error
			// about a trace, rather than "open FILE: ...".
			if pe := (*os.PathError)(nil); errors.As(err, &pe) {
				return nil, fmt.Errorf("%s: %w", path, pe.Err)
			}
			return nil, err
		}
		name = path
	}
	r, err := newReader(f, name, opts)
	if err != nil {
		if f != os.Stdin {
			f.Close()
		}
		return nil, err
	}
	if f != os.Stdin {
		r.core().file = f
	}
	return r, nil
}

// Create creates the trace file at path, or truncates it, and returns a
// [Writer] of the given columns to it, compressed with gzip if path ends in
// ".gz". "-" writes to the standard output, uncompressed. Close the Writer to
// complete the file.
func Create(path string, cols ...Column) (*Writer, error) {
	if path == "-" {
		return NewWriter(os.Stdout, cols...), nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		w := NewWriter(f, cols...)
		w.file = f
		return w, nil
	}
	gz := gzip.NewWriter(f)
	w := NewWriter(gz, cols...)
	w.gz, w.file = gz, f
	return w, nil
}
