package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/gpualloc/gpualloc/sim/report"
)

// An atomicFile is an output file written under a temporary name beside
// it (".NAME.*.tmp", in the same directory, so that the rename stays on one
// file system) and renamed into place by Commit: no reader sees it half
// written, and a run that fails or is interrupted leaves what the file
// held before. Abort, deferred, removes the temporary when Commit did not
// happen.
//
// What is not a regular file is not replaced (see outputTarget): a
// symbolic link keeps pointing where it did, the file it leads to being
// the one replaced, and a character device or a FIFO is written through,
// opened and written as the shell's > does, with no temporary (what was
// written to it before a failure stays written).
type atomicFile struct {
	*os.File
	path    string // the output as named
	target  string // the file replaced: path, or where its links lead
	through bool   // File is the target itself, written through
	done    bool
}

// createAtomic creates the temporary of the output file path, or opens the
// device or FIFO it names; ctx's end stops an open that waits for a FIFO's
// reader.
func createAtomic(ctx context.Context, path string) (*atomicFile, error) {
	target, through, err := outputTarget(path)
	if err != nil {
		return nil, err
	}
	if through {
		f, err := openCtx(ctx, target, os.O_WRONLY)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, unwrapPathErr(err))
		}
		return &atomicFile{File: f, path: path, target: target, through: true}, nil
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("%s: cannot write beside it: %w", path, unwrapPathErr(err))
	}
	temps.Store(f.Name(), struct{}{})
	return &atomicFile{File: f, path: path, target: target}, nil
}

// temps are the temporaries of the atomicFiles being written, which
// removeTemps removes when the process must end at once.
var temps sync.Map

// removeTemps removes the temporaries of the atomicFiles being written.
func removeTemps() {
	temps.Range(func(name, _ any) bool {
		os.Remove(name.(string))
		return true
	})
}

// Commit completes the file: it closes the temporary and renames it over
// its target, with the permissions the target had, or os.Create's for a
// new file, not the temporary's 0600. A file written through is closed.
func (a *atomicFile) Commit() error {
	if a.through {
		a.done = true
		if err := a.Close(); err != nil {
			return fmt.Errorf("%s: %w", a.path, unwrapPathErr(err))
		}
		return nil
	}
	perm := os.FileMode(0o644)
	if fi, err := os.Stat(a.target); err == nil && fi.Mode().IsRegular() {
		perm = fi.Mode().Perm()
	}
	err := a.Chmod(perm)
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(a.Name(), a.target)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", a.path, unwrapPathErr(err))
	}
	temps.Delete(a.Name())
	a.done = true
	return nil
}

// writeFileVia writes the file at path with write, through an
// atomicFile: a failure leaves path as it was.
func writeFileVia(ctx context.Context, path string, write func(w io.Writer) error) error {
	f, err := createAtomic(ctx, path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := write(f); err != nil {
		return fmt.Errorf("%s: %w", path, unwrapPathErr(err))
	}
	return f.Commit()
}

// Abort removes the temporary, unless Commit renamed it; a file written
// through is closed.
func (a *atomicFile) Abort() {
	if !a.done {
		a.Close()
		if !a.through {
			os.Remove(a.Name())
			temps.Delete(a.Name())
		}
		a.done = true
	}
}

// maxLinks is the most symbolic links outputTarget follows, as Linux's
// open does.
const maxLinks = 40

// outputTarget returns the file that writing the output path changes:
// path, or, when path is a symbolic link, the file its links lead to
// (which may not exist yet), as an editor saving through a link does; and
// whether that file is written through (a character device, such as
// /dev/null, or a FIFO) rather than replaced. A directory, a block
// device, a socket, and links that go round, are errors.
func outputTarget(path string) (target string, through bool, err error) {
	target = path
	for links := 0; ; links++ {
		fi, err := os.Lstat(target)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return target, false, nil
		case err != nil:
			return "", false, fmt.Errorf("%s: %w", path, unwrapPathErr(err))
		}
		m := fi.Mode()
		switch {
		case m&fs.ModeSymlink != 0:
		case m.IsRegular():
			return target, false, nil
		case m.IsDir():
			return "", false, usagef("%s: is a directory; want a file", path)
		case m&fs.ModeNamedPipe != 0, m&fs.ModeCharDevice != 0:
			return target, true, nil
		case m&fs.ModeDevice != 0:
			return "", false, usagef("%s: is a block device (a disk): refusing to write over it", path)
		default:
			return "", false, usagef("%s: is not a regular file, a character device or a FIFO (%s)", path, m.Type())
		}
		if links == maxLinks {
			return "", false, fmt.Errorf("%s: too many levels of symbolic links", path)
		}
		link, err := os.Readlink(target)
		if err != nil {
			return "", false, fmt.Errorf("%s: %w", path, unwrapPathErr(err))
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(target), link)
		}
		target = link
	}
}

// openCtx opens the file at path with flag, as os.OpenFile does, but
// returns ctx's cause when ctx ends first: the open of a FIFO waits for
// the other end. An open left waiting closes its file if it ever opens.
func openCtx(ctx context.Context, path string, flag int) (*os.File, error) {
	if fi, err := os.Stat(path); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 || ctx.Done() == nil {
		return os.OpenFile(path, flag, 0)
	}
	type opened struct {
		f   *os.File
		err error
	}
	c := make(chan opened, 1)
	go func() {
		f, err := os.OpenFile(path, flag, 0)
		c <- opened{f, err}
	}()
	select {
	case o := <-c:
		return o.f, o.err
	case <-ctx.Done():
		go func() {
			if o := <-c; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, context.Cause(ctx)
	}
}

// unwrapPathErr turns "open PATH: permission denied" into "permission
// denied", for errors that name the path themselves.
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// checkOutputFile checks, before any work starts, that the output file
// that flag names ("-o") can be written: it is no directory, its directory
// exists and takes a new file (one made and removed), and it is none of
// inputs, which the run reads (the output would replace what it was made
// from). A symbolic link is checked as the file it leads to; a device or
// a FIFO, written through, needs only to be writable.
func checkOutputFile(flag, out string, inputs []string) error {
	if out == "-" {
		return nil
	}
	target, through, err := outputTarget(out)
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		return usagef("%s %v", flag, err)
	case err != nil:
		return fmt.Errorf("%s %w", flag, err)
	}
	if through {
		if err := canWrite(target); err != nil {
			return fmt.Errorf("%s %s: cannot write it: %w", flag, out, err)
		}
	} else {
		dir := filepath.Dir(target)
		if di, err := os.Stat(dir); err != nil || !di.IsDir() {
			return usagef("%s %s: no directory %s to write it in", flag, out, dir)
		}
		probe, err := os.CreateTemp(dir, "."+filepath.Base(target)+".*.tmp")
		if err != nil {
			return fmt.Errorf("%s %s: cannot write in %s: %w", flag, out, dir, unwrapPathErr(err))
		}
		probe.Close()
		os.Remove(probe.Name())
	}
	for _, in := range inputs {
		if sameFile(in, out) {
			return usagef("%s %s: is an input of the run too; name another output file", flag, out)
		}
	}
	return nil
}

// checkOutputDir checks, before any work starts, that a report can be
// written into the directory that flag names ("-o"): it is no file, and
// it holds no report unless force, nor is it an input.
func checkOutputDir(flag, dir string, force bool, inputs []string) error {
	for _, in := range inputs {
		if sameFile(in, dir) {
			return usagef("%s %s: is an input of the run too; name another directory", flag, dir)
		}
	}
	if err := report.CheckDir(dir, force); err != nil {
		return usagef("%s %v", flag, err)
	}
	return nil
}

// fileArgs returns the TRACE arguments that name files: neither standard
// input nor a bundled trace.
func fileArgs(args []string) []string {
	var files []string
	for _, a := range args {
		if _, bundled := bundledByName(a); !bundled && a != "-" {
			files = append(files, a)
		}
	}
	return files
}

// sameFile reports whether paths a and b name the same file: the same
// file when both exist, else the same absolute path.
func sameFile(a, b string) bool {
	if a == "-" || b == "-" {
		return false
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	x, err1 := filepath.Abs(a)
	y, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && x == y
}

// ctxReader returns a reader of r that fails with ctx's cause once ctx is
// done, so that a decoder reading it stops at its next read.
func ctxReader(ctx context.Context, r io.Reader) io.Reader {
	if ctx.Done() == nil {
		return r // never done
	}
	return &ctxReadWriter{ctx: ctx, r: r}
}

// ctxWriter returns a writer to w that fails with ctx's cause once ctx is
// done, so that whatever writes through it stops at its next write.
func ctxWriter(ctx context.Context, w io.Writer) io.Writer {
	if ctx.Done() == nil {
		return w // never done
	}
	return &ctxReadWriter{ctx: ctx, w: w}
}

// A ctxReadWriter reads r or writes w until its context is done: a check
// of the context for each call, which a buffered reader or writer makes
// once every few KiB.
type ctxReadWriter struct {
	ctx context.Context
	r   io.Reader
	w   io.Writer
}

func (c *ctxReadWriter) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

func (c *ctxReadWriter) Write(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.w.Write(p)
}
