package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpualloc/gpualloc/sim/report"
)

// An atomicFile is an output file written under a temporary name beside
// it (".NAME.*.tmp", in the same directory, so that the rename stays on one
// file system) and renamed into place by Commit: no reader sees it half
// written, and a run that fails or is interrupted leaves what the file
// held before. Abort, deferred, removes the temporary when Commit did not
// happen.
type atomicFile struct {
	*os.File
	path string
	done bool
}

// createAtomic creates the temporary of the output file path.
func createAtomic(path string) (*atomicFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("%s: cannot write beside it: %w", path, unwrapPathErr(err))
	}
	return &atomicFile{File: f, path: path}, nil
}

// Commit completes the file: it closes the temporary and renames it to
// its path, with the permissions os.Create gives, not the temporary's
// 0600.
func (a *atomicFile) Commit() error {
	err := a.Chmod(0o644)
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(a.Name(), a.path)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", a.path, unwrapPathErr(err))
	}
	a.done = true
	return nil
}

// writeFileVia writes the file at path with write, through an
// atomicFile: a failure leaves path as it was.
func writeFileVia(path string, write func(w io.Writer) error) error {
	f, err := createAtomic(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := write(f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Commit()
}

// Abort removes the temporary, unless Commit renamed it.
func (a *atomicFile) Abort() {
	if !a.done {
		a.Close()
		os.Remove(a.Name())
		a.done = true
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
// from).
func checkOutputFile(flag, out string, inputs []string) error {
	if out == "-" {
		return nil
	}
	fi, err := os.Stat(out)
	switch {
	case err == nil && fi.IsDir():
		return usagef("%s %s: is a directory; want a file", flag, out)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: %w", flag, out, unwrapPathErr(err))
	}
	dir := filepath.Dir(out)
	if di, err := os.Stat(dir); err != nil || !di.IsDir() {
		return usagef("%s %s: no directory %s to write it in", flag, out, dir)
	}
	probe, err := os.CreateTemp(dir, "."+filepath.Base(out)+".*.tmp")
	if err != nil {
		return fmt.Errorf("%s %s: cannot write in %s: %w", flag, out, dir, unwrapPathErr(err))
	}
	probe.Close()
	os.Remove(probe.Name())
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
