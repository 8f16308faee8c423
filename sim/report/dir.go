package report

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A report directory holds one run's report whole. Its files are written
// into a staging directory inside it (.report-tmp-*) and moved into place
// together at the end, under a lock file (.report.lock) that runs writing
// into the same directory take in turn; the list of the report's files,
// ManifestFile, is written last. So a reader never sees a report mixed of
// two runs, a run that fails or is interrupted leaves the directory as it
// was, and a new report replaces the old one's files, stale figures
// included, while files that are not the report's are left alone. A
// directory that holds a report already is refused unless the writer is
// told to replace it. The cost: one rename per file, and the files in
// memory or on disk twice for a moment, never a copy.

// ManifestFile lists the files of the report that a directory holds, one
// name a line; it is written last, when the report is whole.
const ManifestFile = ".report-files"

// lockFile is held while a report's files are moved into its directory.
const lockFile = ".report.lock"

// reportNames are the files that mark a directory holding a report,
// written by this version or an older one without a manifest.
var reportNames = []string{ManifestFile, SummaryCSV, SummaryJSON, IndexHTML, TimeSeriesCSV}

// ErrReportExists is the error of a directory that holds a report already,
// which a writer not told to replace it refuses.
var ErrReportExists = errors.New("holds a report already")

// CheckDir checks, before the work of a run, that a report can be written
// into dir: dir is a directory or does not exist yet, it (or the directory
// that will hold it) can be written, and unless replace it holds no
// report. It leaves nothing behind: the check of writing makes a file and
// removes it.
func CheckDir(dir string, replace bool) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return checkParent(dir)
	case err != nil:
		return fmt.Errorf("%s: %w", dir, unwrapPath(err))
	case !fi.IsDir():
		return fmt.Errorf("%s: not a directory: a report is a directory of files", dir)
	}
	if name := heldReport(dir); name != "" && !replace {
		return fmt.Errorf("%s: %w (%s): name another directory, or replace it with --force", dir, ErrReportExists, name)
	}
	return checkWritable(dir, dir)
}

// checkWritable checks that a file can be made in dir, for a report
// into target.
func checkWritable(dir, target string) error {
	f, err := os.CreateTemp(dir, ".report-check-*")
	if err != nil {
		if dir == target {
			return fmt.Errorf("%s: cannot write into it: %w", target, unwrapPath(err))
		}
		return fmt.Errorf("%s: cannot be created in %s: %w", target, dir, unwrapPath(err))
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// checkParent checks that the nearest existing directory above dir, which
// does not exist, is a directory that can be written.
func checkParent(dir string) error {
	for p := filepath.Dir(filepath.Clean(dir)); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s: cannot be created: %s is not a directory", dir, p)
			}
			return checkWritable(p, dir)
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("%s: %w", dir, unwrapPath(err))
		}
		if q := filepath.Dir(p); q == p {
			return nil
		}
	}
}

// heldReport returns the name of a file that marks dir as holding a
// report, or "".
func heldReport(dir string) string {
	for _, n := range reportNames {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			return n
		}
	}
	return ""
}

// unwrapPath turns "stat DIR: permission denied" into "permission denied",
// for errors that name the path themselves.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// A DirWriter writes a report into a directory whole: its files go to a
// staging directory until Commit moves them into place (see ManifestFile).
type DirWriter struct {
	ctx      context.Context
	dir, tmp string
	replace  bool
	created  string // the topmost directory NewDirWriter created, removed again on Abort
	files    []string
}

// NewDirWriter checks dir as CheckDir does, creates it if need be and a
// staging directory inside it, and returns a writer of a report into it.
// Call Commit when every file is written, and Abort in any case (after a
// Commit it does nothing).
func NewDirWriter(dir string, replace bool) (*DirWriter, error) {
	if err := CheckDir(dir, replace); err != nil {
		return nil, err
	}
	d := &DirWriter{dir: dir, replace: replace}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || filepath.Dir(p) == p {
			break
		}
		d.created = p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, unwrapPath(err))
	}
	tmp, err := os.MkdirTemp(dir, ".report-tmp-*")
	if err != nil {
		d.Abort()
		return nil, fmt.Errorf("%s: cannot write into it: %w", dir, unwrapPath(err))
	}
	d.tmp = tmp
	return d, nil
}

// SetContext makes ctx's end stop the writer: [WriteFiles] starts no
// further figure, and WriteFile, Create and Commit fail with ctx's cause,
// leaving the directory as it was.
func (d *DirWriter) SetContext(ctx context.Context) { d.ctx = ctx }

// stopped returns ctx's cause once the context of SetContext is done.
func (d *DirWriter) stopped() error {
	if d.ctx != nil && d.ctx.Err() != nil {
		return context.Cause(d.ctx)
	}
	return nil
}

// Dir returns the directory the report goes to.
func (d *DirWriter) Dir() string { return d.dir }

// WriteFile writes the report's file name (a base name) with data.
func (d *DirWriter) WriteFile(name string, data []byte) error {
	if err := d.stopped(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.tmp, name), data, 0o644); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(d.dir, name), unwrapPath(err))
	}
	d.files = append(d.files, name)
	return nil
}

// Create creates the report's file name for writing; close it before
// Commit.
func (d *DirWriter) Create(name string) (*os.File, error) {
	if err := d.stopped(); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(d.tmp, name))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(d.dir, name), unwrapPath(err))
	}
	d.files = append(d.files, name)
	return f, nil
}

// Commit moves the report into its directory, in place of the report it
// held (if replacing), under the directory's lock; the manifest goes last.
// A report that another run wrote into the directory since NewDirWriter
// is refused unless replacing.
func (d *DirWriter) Commit() error {
	if d.tmp == "" {
		return errors.New("report: commit of a report already committed or aborted")
	}
	if err := d.stopped(); err != nil {
		return err
	}
	unlock, err := lockDir(d.dir)
	if err != nil {
		return err
	}
	defer unlock()
	if name := heldReport(d.dir); name != "" && !d.replace {
		return fmt.Errorf("%s: another run wrote a report into it meanwhile (%s): name another directory, or replace it with --force", d.dir, name)
	}
	// The old report goes first, so that no reader takes its files and the
	// new ones for one report.
	old, err := manifest(d.dir)
	if err != nil {
		return err
	}
	for _, name := range append(old, reportNames...) {
		if !slices.Contains(d.files, name) {
			os.Remove(filepath.Join(d.dir, name))
		}
	}
	os.Remove(filepath.Join(d.dir, ManifestFile))
	slices.Sort(d.files)
	for _, name := range d.files {
		if err := os.Rename(filepath.Join(d.tmp, name), filepath.Join(d.dir, name)); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(d.dir, name), unwrapPath(err))
		}
	}
	list := strings.Join(d.files, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(d.tmp, ManifestFile), []byte(list), 0o644); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(d.dir, ManifestFile), unwrapPath(err))
	}
	if err := os.Rename(filepath.Join(d.tmp, ManifestFile), filepath.Join(d.dir, ManifestFile)); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(d.dir, ManifestFile), unwrapPath(err))
	}
	os.Remove(d.tmp)
	d.tmp, d.created = "", ""
	return nil
}

// Abort removes what the writer wrote and the directories it created;
// after Commit it does nothing.
func (d *DirWriter) Abort() {
	if d.tmp != "" {
		os.RemoveAll(d.tmp)
		d.tmp = ""
	}
	if d.created != "" {
		// Only what is still empty: another run may have written there.
		for p := filepath.Clean(d.dir); ; p = filepath.Dir(p) {
			if os.Remove(p) != nil || p == d.created {
				break
			}
		}
		d.created = ""
	}
}

// manifest returns the files that dir's manifest lists, base names only:
// none when dir has no manifest. A manifest that cannot be read whole (a
// line over bufio.MaxScanTokenSize, 64 KiB, which no file name is) is an
// error that names the file and the line, rather than a shorter list that
// would leave the old report's other files beside the new one.
func manifest(dir string) ([]string, error) {
	path := filepath.Join(dir, ManifestFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		if n := strings.TrimSpace(sc.Text()); n != "" && n == filepath.Base(n) && n != "." && n != ".." {
			names = append(names, n)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: a line longer than %d bytes, which no file name is: remove the file, or name another directory", path, line+1, bufio.MaxScanTokenSize)
		}
		return nil, fmt.Errorf("%s:%d: %w", path, line+1, err)
	}
	return names, nil
}

// lockTimeout is how long lockDir waits for another run's lock.
var lockTimeout = 30 * time.Second

// lockDir takes dir's lock file, waiting while another run holds it, and
// returns its release. The lock is held only while files are renamed, a
// moment, so a lock older than lockTimeout is one that a killed run left:
// the error says so.
func lockDir(dir string) (func(), error) {
	path := filepath.Join(dir, lockFile)
	deadline := time.Now().Add(lockTimeout)
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			return func() { os.Remove(path) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: another run has been writing a report here for %v; remove the file if no run is", path, lockTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
