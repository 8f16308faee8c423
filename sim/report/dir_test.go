package report_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/internal/dirtest"
	"github.com/gpualloc/gpualloc/sim/report"
)

// writeReport writes a report of the given files, each holding its own
// name and tag, with the DirWriter of dir.
func writeReport(dir string, replace bool, tag string, files ...string) error {
	d, err := report.NewDirWriter(dir, replace)
	if err != nil {
		return err
	}
	defer d.Abort()
	for _, f := range files {
		if err := d.WriteFile(f, []byte(f+" "+tag)); err != nil {
			return err
		}
	}
	return d.Commit()
}

// TestDirWriter: a report is refused over another unless replacing, which
// removes the old report's files that the new one lacks and keeps files
// not of the report; an aborted writer leaves no trace, not even the
// directories it made.
func TestDirWriter(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	require.NoError(t, writeReport(dir, false, "1", report.SummaryCSV, "old.svg"))
	assert.Equal(t, []string{".report-files", "old.svg", "summary.csv"}, dirtest.Names(t, dir))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mine.txt"), nil, 0o644))

	err := writeReport(dir, false, "2", report.SummaryCSV)
	assert.ErrorIs(t, err, report.ErrReportExists)
	assert.EqualError(t, err, dir+": holds a report already (.report-files): name another directory, or replace it with --force")
	b, _ := os.ReadFile(filepath.Join(dir, report.SummaryCSV))
	assert.Equal(t, "summary.csv 1", string(b))

	require.NoError(t, writeReport(dir, true, "3", report.SummaryCSV, "new.svg"))
	assert.Equal(t, []string{".report-files", "mine.txt", "new.svg", "summary.csv"}, dirtest.Names(t, dir))
	b, _ = os.ReadFile(filepath.Join(dir, report.SummaryCSV))
	assert.Equal(t, "summary.csv 3", string(b))
	m, _ := os.ReadFile(filepath.Join(dir, report.ManifestFile))
	assert.Equal(t, "new.svg\nsummary.csv\n", string(m))

	// A report of an older version, without a manifest, is a report too.
	legacy := filepath.Join(root, "legacy")
	require.NoError(t, os.Mkdir(legacy, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(legacy, report.IndexHTML), nil, 0o644))
	assert.ErrorIs(t, report.CheckDir(legacy, false), report.ErrReportExists)
	assert.NoError(t, report.CheckDir(legacy, true))

	// Abort removes what NewDirWriter made.
	fresh := filepath.Join(root, "x", "y", "z")
	d, err := report.NewDirWriter(fresh, false)
	require.NoError(t, err)
	require.NoError(t, d.WriteFile("f", []byte("f")))
	d.Abort()
	assert.Equal(t, []string{"a", "legacy"}, dirtest.Names(t, root))

	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	assert.EqualError(t, report.CheckDir(file, true), file+": not a directory: a report is a directory of files")
	assert.EqualError(t, report.CheckDir(filepath.Join(file, "sub"), true), filepath.Join(file, "sub")+": cannot be created: "+file+" is not a directory")
}

// TestDirWriterConcurrent: writers committing into one directory at once
// leave the files of one report, never a mix; without replacing, those
// that come after the first are refused.
func TestDirWriterConcurrent(t *testing.T) {
	files := []string{report.SummaryCSV, report.SummaryJSON, report.IndexHTML, "fig.svg"}
	for _, replace := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "out")
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { errs[i] = writeReport(dir, replace, string(rune('a'+i)), files...) })
		}
		wg.Wait()
		ok := slices.IndexFunc(errs, func(err error) bool { return err == nil })
		require.GreaterOrEqual(t, ok, 0, "%v", errs)
		for _, err := range errs {
			if replace {
				assert.NoError(t, err)
			} else if err != nil {
				assert.True(t, errors.Is(err, report.ErrReportExists) || err.Error() == dir+": another run wrote a report into it meanwhile (.report-files): name another directory, or replace it with --force", err.Error())
			}
		}
		var tag string
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(dir, f))
			require.NoError(t, err)
			got := string(b)[len(f)+1:]
			if tag == "" {
				tag = got
			}
			assert.Equal(t, tag, got, "%s: every file of one writer", f)
		}
		assert.ElementsMatch(t, append([]string{report.ManifestFile}, files...), dirtest.Names(t, dir))
	}
}

// TestDirWriterStopped: a writer whose context ends renders no figure,
// commits nothing and leaves the directory as it was.
func TestDirWriterStopped(t *testing.T) {
	results, _ := replay(t, "testdata/tiny.csv", tinyTrace(t, false), strategies...)
	dir := filepath.Join(t.TempDir(), "out")
	d, err := report.NewDirWriter(dir, false)
	require.NoError(t, err)
	defer d.Abort()
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("interrupted")
	cancel(stop)
	d.SetContext(ctx)
	_, err = report.WriteFiles(d, results, report.Options{Formats: []report.Format{report.SVG}})
	assert.ErrorIs(t, err, stop)
	assert.ErrorIs(t, d.Commit(), stop)
	d.Abort()
	assert.NoDirExists(t, dir)
}

// TestDirWriterLongManifestLine: a manifest with a line over 64 KiB, which
// the scanner cannot read, fails the commit with the file and the line,
// and the old report stays whole, rather than a shorter list of its files
// leaving some of them beside the new report.
func TestDirWriterLongManifestLine(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writeReport(dir, false, "1", report.SummaryCSV, "old.svg"))
	path := filepath.Join(dir, report.ManifestFile)
	long := strings.Repeat("x", 70<<10)
	require.NoError(t, os.WriteFile(path, []byte("summary.csv\n"+long+"\nold.svg\n"), 0o644))
	err := writeReport(dir, true, "2", report.SummaryCSV)
	require.Error(t, err)
	assert.Equal(t, path+":2: a line longer than 65536 bytes, which no file name is: remove the file, or name another directory", err.Error())
	assert.Equal(t, []string{".report-files", "old.svg", "summary.csv"}, dirtest.Names(t, dir))
	b, _ := os.ReadFile(filepath.Join(dir, report.SummaryCSV))
	assert.Equal(t, "summary.csv 1", string(b))
}
