package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/gpualloc/gpualloc/traces"
)

// An input is a trace named on the command line, or a bundled one.
type input struct {
	name string
	open func() (traces.Reader, io.Closer, error)
	// size is the bytes of the trace's file, -1 when unknown (a bundled
	// trace, the standard input); read counts the bytes read from it by
	// every replay.
	size int64
	read atomic.Int64

	mu        sync.Mutex
	skipped   int64  // bad events a lenient reader skipped
	firstSkip string // the first of them
}

// openTrace opens the trace at path, the command's standard input for
// "-", or the bundled trace of that name when no file has it.
func openTrace(e *env, path string, opts traces.Options) (traces.FileReader, error) {
	if path == "-" {
		return traces.NewReader(e.stdin, "stdin", opts)
	}
	if b, ok := bundledByName(path); ok {
		return b.Open()
	}
	return traces.Open(path, opts)
}

// bundledByName returns the bundled trace called name ("training"), when
// no file of that name exists: a file always wins.
func bundledByName(name string) (traces.Bundle, bool) {
	b, ok := traces.LookupBundled(name)
	if !ok {
		return b, false
	}
	if _, err := os.Lstat(name); err == nil {
		return b, false
	}
	return b, true
}

// bundledInput is the input of a bundled trace.
func bundledInput(b traces.Bundle) *input {
	in := &input{name: b.Name, size: -1}
	in.open = func() (traces.Reader, io.Closer, error) {
		r, err := b.Open()
		if err != nil {
			return nil, nil, err
		}
		return r, in.closer(r, nil), nil
	}
	return in
}

// traceInputs returns the traces the arguments name ("-" reads stdin, the
// name of a bundled trace that is no file reads that trace), or the bundled
// traces when there are none.
func traceInputs(args []string, stdin io.Reader, opts traces.Options) ([]*input, error) {
	var ins []*input
	if len(args) == 0 {
		for _, b := range traces.Bundled() {
			ins = append(ins, bundledInput(b))
		}
		return ins, nil
	}
	for _, path := range args {
		if b, ok := bundledByName(path); ok {
			ins = append(ins, bundledInput(b))
			continue
		}
		in := &input{name: path, size: -1}
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && path != "-" {
			in.size = fi.Size()
		}
		in.open = func() (traces.Reader, io.Closer, error) {
			if path == "-" {
				r, err := traces.NewReader(stdin, "stdin", opts)
				if err != nil {
					return nil, nil, err
				}
				return r, in.closer(r, nil), nil
			}
			f, err := os.Open(path)
			if err != nil {
				// "FILE: no such file or directory", like every other
				// error about a trace, rather than "open FILE: ...".
				if pe := (*os.PathError)(nil); errors.As(err, &pe) {
					return nil, nil, fmt.Errorf("%s: %w", path, pe.Err)
				}
				return nil, nil, err
			}
			r, err := traces.NewReader(&countingReader{r: f, n: &in.read}, path, opts)
			if err != nil {
				f.Close()
				return nil, nil, err
			}
			return r, in.closer(r, f), nil
		}
		ins = append(ins, in)
	}
	return ins, nil
}

// closer closes r, and then f if not nil, and notes what r skipped.
func (in *input) closer(r traces.FileReader, f io.Closer) io.Closer {
	return closeFunc(func() error {
		in.mu.Lock()
		if n := r.Skipped(); n > in.skipped {
			in.skipped = n
			if err := r.FirstSkipped(); err != nil {
				in.firstSkip = err.Error()
			}
		}
		in.mu.Unlock()
		err := r.Close()
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		return err
	})
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }

// A countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
