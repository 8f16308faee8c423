package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"slices"
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

	// once says that the trace can be read only once: standard input, a
	// FIFO, a device. file is such a trace's file, opened when the input
	// was checked, which its first open reads; opened counts its opens.
	// held says that open reads it from memory (see holdOnce).
	once   bool
	file   *os.File
	opened int
	held   bool

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
		r, err := traces.NewReader(waitingReader(ctx, e.stdin), "stdin", opts)
		return r, r, err
	}
	if b, ok := bundledByName(path); ok {
		r, err := b.Open()
		return r, r, err
	}
	f, err := openTraceFile(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	src, done := fileReader(ctx, f), func() {}
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
func openTraceFile(ctx context.Context, path string) (*os.File, error) {
	f, err := openInputCtx(ctx, path)
	if near := nearBundled(path); near != "" && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (did you mean the bundled trace %s?)", err, near)
	}
	return f, err
}

// openInput opens the file at path for reading, as openInputCtx does
// with a context that never ends.
func openInput(path string) (*os.File, error) {
	return openInputCtx(context.Background(), path)
}

// openInputCtx opens the file at path for reading. Its errors name the
// file as every error about a trace does, "FILE: no such file or
// directory" rather than "open FILE: ...". The open of a FIFO, which waits
// for a writer, returns ctx's cause once ctx is done.
func openInputCtx(ctx context.Context, path string) (*os.File, error) {
	f, err := openCtx(ctx, path, os.O_RDONLY)
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
	inputs, err := traceInputs(ctx, args, e.stdin, traces.Options{Lenient: lenient, TempDir: e.tempDir})
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
// ctx's cause once ctx is done. A file that can be read only once (a FIFO,
// a device) is opened here, once, and its first open reads it; standard
// input, or such a file, given twice is bad usage.
func traceInputs(ctx context.Context, args []string, stdin io.Reader, opts traces.Options) ([]*input, error) {
	var ins []*input
	if len(args) == 0 {
		for _, b := range traces.Bundled() {
			ins = append(ins, bundledInput(b))
		}
		return ins, nil
	}
	ok := false
	defer func() {
		if !ok {
			for _, in := range ins {
				if in.file != nil {
					in.file.Close()
				}
			}
		}
	}()
	if err := checkReadOnce(args); err != nil {
		return nil, err
	}
	for _, path := range args {
		if b, ok := bundledByName(path); ok {
			ins = append(ins, bundledInput(b))
			continue
		}
		in := &input{name: path, size: -1, once: path == "-"}
		if path != "-" {
			f, err := openTraceFile(ctx, path)
			if err != nil {
				return nil, err
			}
			fi, err := f.Stat()
			switch {
			case err == nil && fi.Mode().IsRegular():
				in.size = fi.Size()
				f.Close()
			case err != nil:
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, unwrapPathErr(err))
			default:
				in.once, in.file = true, f
			}
		}
		in.open = in.opener(ctx, stdin, opts)
		ins = append(ins, in)
	}
	ok = true
	return ins, nil
}

// checkReadOnce refuses trace arguments that name standard input ("-"),
// or a file that can be read only once (a FIFO, a device), twice: the
// second read would find nothing, or wait forever for a FIFO's writer.
func checkReadOnce(args []string) error {
	var once []os.FileInfo
	for i, path := range args {
		if path == "-" {
			if slices.Contains(args[:i], "-") {
				return usagef("-: standard input given twice; it can be read once")
			}
			continue
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().IsRegular() || fi.IsDir() {
			continue
		}
		for _, o := range once {
			if os.SameFile(o, fi) {
				return usagef("%s: given twice; a %s can be read once", path, fileKind(fi))
			}
		}
		once = append(once, fi)
	}
	return nil
}

// fileKind names the kind of file that fi describes, one not regular.
func fileKind(fi os.FileInfo) string {
	switch m := fi.Mode(); {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "file of this kind"
}

// opener returns the open of the trace file (or standard input) of in.
func (in *input) opener(ctx context.Context, stdin io.Reader, opts traces.Options) func() (traces.Reader, io.Closer, error) {
	path := in.name
	return func() (traces.Reader, io.Closer, error) {
		in.mu.Lock()
		f := in.file
		in.file = nil
		in.opened++
		again := in.once && in.opened > 1
		in.mu.Unlock()
		if again {
			what := "standard input"
			if path != "-" {
				what = "a FIFO or a device"
			}
			return nil, nil, fmt.Errorf("%s: cannot be read a second time (%s)", path, what)
		}
		if path == "-" {
			r, err := traces.NewReader(waitingReader(ctx, stdin), "stdin", opts)
			if err != nil {
				return nil, nil, err
			}
			return r, in.closer(r, nil), nil
		}
		if f == nil {
			var err error
			if f, err = openInputCtx(ctx, path); err != nil {
				return nil, nil, err
			}
		}
		cr := &countingReader{r: fileReader(ctx, f), n: &in.read, tick: in.tick}
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
}

// holdOnce makes in, when it can be read only once (standard input, a
// FIFO, a device), read once into memory by its first open and from
// memory by every open, so that it can be read again: by --offline and
// --min-capacity after the replays. It holds 48 bytes an event until
// the command ends.
func (in *input) holdOnce() {
	if !in.once || in.held {
		return
	}
	d := in.decodeOnce(math.MaxInt64, false)
	in.open, in.held = d.open, true
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

// fileReader returns a reader of the input file f that fails with ctx's
// cause once ctx is done: at its next read for a regular file, at once
// for a FIFO or a device, whose read may wait for data forever.
func fileReader(ctx context.Context, f *os.File) io.Reader {
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		return ctxReader(ctx, f)
	}
	return waitingReader(ctx, f)
}

// waitingReader returns a reader of r, a reader whose reads may wait for
// data without end (standard input, a pipe, a FIFO), that fails with ctx's
// cause as soon as ctx is done, even during a read: a goroutine reads r
// ahead, into one of two buffers, and the reader takes what it read or
// ctx's end, whichever comes first. A read of r that never returns leaves
// its goroutine blocked, which the process's exit ends.
func waitingReader(ctx context.Context, r io.Reader) io.Reader {
	if ctx.Done() == nil {
		return r // never done
	}
	p := &pumpReader{ctx: ctx, full: make(chan pumped, 1), free: make(chan []byte, 2)}
	p.free <- make([]byte, 64<<10)
	p.free <- make([]byte, 64<<10)
	go p.pump(r)
	return p
}

// A pumpReader is a waitingReader.
type pumpReader struct {
	ctx  context.Context
	full chan pumped // what the goroutine read
	free chan []byte // the buffers that the reader is done with
	cur  []byte      // what is left to return of buf
	buf  []byte
	err  error // r's error, after cur
}

// pumped is what one read of the underlying reader gave.
type pumped struct {
	b   []byte
	err error
}

// pump reads r into the free buffers until an error or ctx's end.
func (p *pumpReader) pump(r io.Reader) {
	for {
		var b []byte
		select {
		case b = <-p.free:
		case <-p.ctx.Done():
			return
		}
		n, err := r.Read(b[:cap(b)])
		select {
		case p.full <- pumped{b[:n], err}:
		case <-p.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *pumpReader) Read(q []byte) (int, error) {
	if p.ctx.Err() != nil {
		return 0, context.Cause(p.ctx)
	}
	for len(p.cur) == 0 {
		if p.buf != nil {
			p.free <- p.buf // never blocks: two buffers, room for two
			p.buf = nil
		}
		if p.err != nil {
			return 0, p.err
		}
		select {
		case c := <-p.full:
			p.cur, p.buf, p.err = c.b, c.b, c.err
		case <-p.ctx.Done():
			return 0, context.Cause(p.ctx)
		}
	}
	n := copy(q, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}
