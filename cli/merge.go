package cli

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
)

const mergeUsage = `usage: simulate merge [flags] -o OUT DIR...

Merges the outputs of the shards of one run (simulate --shard k/n -o DIR,
for k from 1 to n) into the report of the whole run in OUT: the report that
the run without --shard writes, file for file, but for the timings, and
the same table (or -f csv or json) on standard output; the flags that
shape the figures are those of a run's report. It refuses
directories that are not shard outputs, shards of different runs (other
traces, strategies, backend, capacity or --lenient), a shard given twice, a
missing shard, and a shard whose replays failed. OUT is written whole, as a
run's -o is: a directory that holds a report already is refused unless
--force.

Flags:
`

func mergeCmd(ctx context.Context, e *env, args []string) error {
	var out, format string
	var force bool
	var figures figureFlags
	fs := newFlagSet(e, "simulate merge", mergeUsage)
	fs.StringVarP(&out, "out", "o", "", "write the merged report into `DIR`")
	fs.BoolVar(&force, "force", false, "replace the report that DIR holds already")
	fs.StringVarP(&format, "format", "f", "table", "output format: table, csv or json")
	figures.add(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	opts, err := figures.options()
	if err != nil {
		return err
	}
	if out == "" {
		return usagef("merge: no -o OUT")
	}
	if fs.NArg() == 0 {
		return usagef("merge: no shard DIR")
	}
	if err := checkOutputDir("-o", out, force, fs.Args()); err != nil {
		return err
	}
	results, sizes, err := mergeShards(fs.Args())
	if err != nil {
		return err
	}
	d, err := report.NewDirWriter(out, force)
	if err != nil {
		return err
	}
	defer d.Abort()
	d.SetContext(ctx)
	if _, err := report.WriteFiles(d, results, withSizes(opts, sizes)); err != nil {
		return err
	}
	if err := writeResults(ctxWriter(ctx, e.stdout), format, results); err != nil {
		return err
	}
	return d.Commit()
}

// mergeShards reads the shards in dirs and returns the results of the
// whole run, in the run's order, and the request sizes of its traces.
func mergeShards(dirs []string) ([]sim.Result, map[string]*report.SizeHistogram, error) {
	var shards []*shardData
	from := map[int]string{} // shard number -> its directory
	for _, dir := range dirs {
		d, err := readShard(dir)
		if err != nil {
			return nil, nil, err
		}
		if len(shards) > 0 {
			if first := shards[0]; d.Run != first.Run || d.Shards != first.Shards || d.Jobs != first.Jobs {
				return nil, nil, fmt.Errorf("merge: %s and %s are shards of different runs (their traces, strategies or flags differ)", dirs[0], dir)
			}
		}
		if prev, dup := from[d.Shard]; dup {
			return nil, nil, fmt.Errorf("merge: %s and %s are both shard %d/%d", prev, dir, d.Shard, d.Shards)
		}
		if d.Failed != "" {
			return nil, nil, fmt.Errorf("merge: %s: shard %d/%d has replays that failed (the first: %s)", dir, d.Shard, d.Shards, d.Failed)
		}
		want := shard{d.Shard, d.Shards}
		if lo, hi := want.jobs(d.Jobs); d.Shard < 1 || d.Shard > d.Shards || d.First != lo || len(d.Rows) != hi-lo {
			return nil, nil, fmt.Errorf("merge: %s: %s does not hold shard %d/%d of %d replays", dir, ShardFile, d.Shard, d.Shards, d.Jobs)
		}
		for i, row := range d.Rows {
			if row == nil || row.Result.Trace == "" || row.Result.Strategy.Spec == "" {
				return nil, nil, fmt.Errorf("merge: %s: row %d of %d has no result (no trace or strategy): the file is damaged; run the shard again", filepath.Join(dir, ShardFile), i+1, len(d.Rows))
			}
		}
		from[d.Shard] = dir
		shards = append(shards, d)
	}
	n := shards[0].Shards
	var missing []int // the first few
	for k := 1; k <= n && len(missing) <= maxListed; k++ {
		if _, ok := from[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("merge: missing %d of %d shards: %s", n-len(from), n, shardList(missing, n))
	}
	results := make([]sim.Result, shards[0].Jobs)
	sizes := map[string]*report.SizeHistogram{}
	for _, d := range shards {
		for i, row := range d.Rows {
			r := row.Result
			r.Devices, r.Series, r.Strategy.Params = row.Devices, row.Series, row.Params
			results[d.First+i] = r
		}
		for name, h := range d.Sizes {
			sizes[name] = h
		}
	}
	return results, sizes, nil
}

// maxListed is the most missing shards an error lists.
const maxListed = 10

// shardList writes shard numbers as "2/8, 5/8", and "..." after
// maxListed of them.
func shardList(ks []int, n int) string {
	var s string
	for i, k := range ks {
		if i > 0 {
			s += ", "
		}
		if i == maxListed {
			return s + "..."
		}
		s += fmt.Sprintf("%d/%d", k, n)
	}
	return s
}

// readShard reads the ShardFile of dir.
func readShard(dir string) (*shardData, error) {
	path := filepath.Join(dir, ShardFile)
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("merge: %s: not a directory: not the output of simulate --shard k/n -o DIR", dir)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("merge: %s: no %s: not the output of simulate --shard k/n -o DIR", dir, ShardFile)
	}
	if err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	switch {
	case errors.Is(err, gzip.ErrHeader), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("merge: %s: not gzip-compressed (what simulate --shard writes): %s", path, fileStart(path))
	case err != nil:
		return nil, fmt.Errorf("merge: %s: %v", path, err)
	}
	var d shardData
	dec := json.NewDecoder(zr)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			return nil, fmt.Errorf("merge: %s: cut short (the shard's run did not finish writing it?): %v", path, err)
		case errors.As(err, &se):
			return nil, fmt.Errorf("merge: %s: not the JSON simulate --shard writes: byte %d of the decompressed data: %v", path, se.Offset, err)
		case errors.As(err, &te):
			return nil, fmt.Errorf("merge: %s: not the JSON simulate --shard writes: byte %d of the decompressed data: %s", path, te.Offset, err)
		}
		return nil, fmt.Errorf("merge: %s: %v", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("merge: %s: data after the shard's JSON: not what simulate --shard writes", path)
	}
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("merge: %s: not the JSON simulate --shard writes: %v", path, err)
	}
	return &d, nil
}

// check returns what is wrong with the fields of d that say which part of
// which run it holds, nil when nothing is: a field that the JSON lacks
// reads as its zero.
func (d *shardData) check() error {
	switch {
	case d.Run == "":
		return errors.New(`"run" is empty or missing`)
	case d.Shards < 1:
		return fmt.Errorf(`"shards" is %d or missing, want 1 or more`, d.Shards)
	case d.Shard < 1 || d.Shard > d.Shards:
		return fmt.Errorf(`"shard" is %d or missing, want 1 to "shards" (%d)`, d.Shard, d.Shards)
	case d.Jobs < 0:
		return fmt.Errorf(`"jobs" is %d, want 0 or more`, d.Jobs)
	case d.First < 0 || d.First > d.Jobs:
		return fmt.Errorf(`"first" is %d, want 0 to "jobs" (%d)`, d.First, d.Jobs)
	case len(d.Rows) > d.Jobs-d.First:
		return fmt.Errorf(`%d "rows" from "first" %d, more than "jobs" (%d)`, len(d.Rows), d.First, d.Jobs)
	}
	return nil
}

// fileStart describes what the file at path starts with, for an error
// about a file that is not what its name says.
func fileStart(path string) string {
	b := make([]byte, 16)
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	n, _ := io.ReadFull(f, b)
	if n == 0 {
		return "the file is empty"
	}
	return fmt.Sprintf("it starts with %q", b[:n])
}
