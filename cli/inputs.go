package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	// progress, when not nil, shows how much of the file each read has
	// read, once it takes readProgressDelay (see readProgress); tick, when
	// not nil, is called as the bytes are read (the replay's bar).
	progress io.Writer
	tick     func()

	mu        sync.Mutex
	skipped   int64  // bad events a lenient reader skipped
	firstSkip string // the first of them
}

// openTrace opens the trace at path, the command's standard input for
// "-", or the bundled trace of that name when no file has it, and returns
// its reader and what closes the reader and its file. Reading it fails with
// ctx's cause once ctx is done.
func openTrace(ctx context.Context, e *env, path string, opts traces.Options) (traces.FileReader, io.Closer, error) {
	if path == "-" {
		r, err := traces.NewReader(ctxReader(ctx, e.stdin), "stdin", opts)
		return r, r, err
	}
	if b, ok := bundledByName(path); ok {
		r, err := b.Open()
		return r, r, err
	}
	f, err := openTraceFile(path)
	if err != nil {
		return nil, nil, err
	}
	src, done := ctxReader(ctx, f), func() {}
	if e.readProgress != nil {
		size := int64(-1)
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		cr := &countingReader{r: src, n: new(atomic.Int64)}
		cr.show, done = readProgress(e.readProgress, path, size)
		src = cr
	}
	r, err := traces.NewReader(src, path, opts)
	if err != nil {
		done()
		f.Close()
		return nil, nil, err
	}
	return r, closeFunc(func() error {
		done()
		err := r.Close()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}), nil
}

// openTraceFile opens the trace file at path for reading, as openInput
// does; a missing file whose name misspells a bundled trace's says so.
func openTraceFile(path string) (*os.File, error) {
	f, err := openInput(path)
	if near := nearBundled(path); near != "" && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (did you mean the bundled trace %s?)", err, near)
	}
	return f, err
}

// openInput opens the file at path for reading. Its errors name the file
// as every error about a trace does, "FILE: no such file or directory"
// rather than "open FILE: ...".
func openInput(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		if pe := (*os.PathError)(nil); errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %w", path, pe.Err)
		}
		return nil, err
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: is a directory, not a file", path)
	}
	return f, nil
}

// nearBundled returns the bundled trace whose name name misspells, by one
// or two edits, or "".
func nearBundled(name string) string {
	for _, b := range traces.Bundled() {
		if d := editDistance(name, b.Name); d > 0 && d <= 2 {
			return b.Name
		}
	}
	return ""
}

// bundledByName returns the bundled trace called name ("training"), when
// no file of that name exists: a file always wins, and a directory never
// does (a directory is no trace: a report written with -o training, say).
func bundledByName(name string) (traces.Bundle, bool) {
	b, ok := traces.LookupBundled(name)
	if !ok {
		return b, false
	}
	if fi, err := os.Stat(name); err == nil && !fi.IsDir() {
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

// readInputs checks --progress mode, then returns the traces args name (see
// [traceInputs]), read leniently if lenient, each showing its read's
// progress where mode says.
func readInputs(ctx context.Context, e *env, args []string, lenient bool, mode string) ([]*input, error) {
	progress, err := readProgressTo(mode, e.stderr)
	if err != nil {
		return nil, err
	}
	inputs, err := traceInputs(ctx, args, e.stdin, traces.Options{Lenient: lenient})
	if err != nil {
		return nil, err
	}
	for _, in := range inputs {
		in.progress = progress
	}
	return inputs, nil
}

// traceInputs returns the traces the arguments name ("-" reads stdin, the
// name of a bundled trace that is no file reads that trace), or the bundled
// traces when there are none. It checks that every file named can be
// opened for reading, before any work starts; reading a trace fails with
// ctx's cause once ctx is done.
func traceInputs(ctx context.Context, args []string, stdin io.Reader, opts traces.Options) ([]*input, error) {
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
		if path != "-" {
			f, err := openTraceFile(path)
			if err != nil {
				return nil, err
			}
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				in.size = fi.Size()
			}
			f.Close()
		}
		in.open = func() (traces.Reader, io.Closer, error) {
			if path == "-" {
				r, err := traces.NewReader(ctxReader(ctx, stdin), "stdin", opts)
				if err != nil {
					return nil, nil, err
				}
				return r, in.closer(r, nil), nil
			}
			f, err := openInput(path)
			if err != nil {
				return nil, nil, err
			}
			cr := &countingReader{r: ctxReader(ctx, f), n: &in.read, tick: in.tick}
			var c io.Closer = f
			if in.progress != nil {
				var done func()
				cr.show, done = readProgress(in.progress, path, in.size)
				c = closeFunc(func() error { done(); return f.Close() })
			}
			r, err := traces.NewReader(cr, path, opts)
			if err != nil {
				c.Close()
				return nil, nil, err
			}
			return r, in.closer(r, c), nil
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
	r    io.Reader
	n    *atomic.Int64
	tick func()           // called after each read, when not nil
	show func(read int64) // gets the bytes this reader has read, when not nil
	own  int64            // those bytes
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	if c.show != nil {
		c.own += int64(n)
		c.show(c.own)
	}
	if c.tick != nil {
		c.tick()
	}
	return n, err
}
