package cli

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

const genUsage = `usage: simulate gen [flags] WORKLOAD

Writes a synthetic trace of the workload in the native format, gzip-compressed
when the output name ends in .gz. The output depends only on the workload and
the flags, so anyone can regenerate or vary a trace. The file is written
under a temporary name beside it and renamed once whole: a run that fails or
is interrupted leaves what the file held before. An output that is a
symbolic link replaces the file the link leads to, and the link stays; a
character device (/dev/null) or a FIFO is written through, as the shell's
> writes it, and stays what it is.

Workloads:
%s
Flags:
`

func genCmd(ctx context.Context, e *env, args []string) error {
	d := gen.DefaultOptions()
	o := d
	var out, maxSize string
	var list strings.Builder
	for _, w := range gen.Workloads() {
		var flags []string
		for _, p := range w.Params {
			flags = append(flags, "--"+p.Flag)
		}
		fmt.Fprintf(&list, "  %-10s %s\n  %-10s (flags: %s)\n", w.Name, w.Summary, "", strings.Join(flags, " "))
	}
	fs := newFlagSet(e, "simulate gen", fmt.Sprintf(genUsage, list.String()))
	fs.StringVarP(&out, "out", "o", "-", "output `FILE` (- for standard output)")
	fs.Uint64Var(&o.Seed, "seed", d.Seed, "seed of every random choice")
	fs.IntVar(&o.Steps, "steps", d.Steps, "training steps")
	fs.StringVar(&o.Model, "model", d.Model, "model preset: tiny, small, medium or large")
	fs.IntVar(&o.Batch, "batch", d.Batch, "batch size")
	fs.IntVar(&o.Seq, "seq", d.Seq, "sequence length (training)")
	fs.IntVar(&o.MinSeq, "min-seq", d.MinSeq, "shortest sequence length (dynamic)")
	fs.IntVar(&o.MaxSeq, "max-seq", d.MaxSeq, "longest sequence length (dynamic)")
	fs.Int64Var(&o.Events, "events", d.Events, "number of events (random)")
	fs.IntVar(&o.MaxLive, "max-live", d.MaxLive, "most allocations live at once (random)")
	fs.StringVar(&maxSize, "max-size", fmt.Sprint(d.MaxSize), "largest allocation `SIZE` (random)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("gen: name one workload (%s)", workloadNames())
	}
	// A count the command line gives is at least 1: 0 would stand for the
	// default in gen.Options.
	for _, c := range []struct {
		flag string
		v    int64
	}{
		{"steps", int64(o.Steps)}, {"batch", int64(o.Batch)}, {"seq", int64(o.Seq)}, {"min-seq", int64(o.MinSeq)},
		{"max-seq", int64(o.MaxSeq)}, {"events", o.Events}, {"max-live", int64(o.MaxLive)},
	} {
		if c.v < 1 {
			return usagef("--%s %d: want 1 or more", c.flag, c.v)
		}
	}
	n, err := parseSizeFlag("--max-size", maxSize)
	if err != nil {
		return err
	}
	o.MaxSize = n
	name := fs.Arg(0)
	known := false
	for _, w := range gen.Workloads() {
		known = known || w.Name == name
	}
	if !known {
		return usagef("gen: unknown workload %q (known: %s)", name, workloadNames())
	}
	if err := checkOutputFile("-o", out, nil); err != nil {
		return err
	}
	if out == "-" {
		return genTo(ctxWriter(ctx, e.stdout), name, o)
	}
	f, err := createAtomic(ctx, out)
	if err != nil {
		return err
	}
	defer f.Abort()
	var w io.Writer = ctxWriter(ctx, f)
	if strings.HasSuffix(out, ".gz") {
		zw := gzip.NewWriter(w)
		if err := genTo(zw, name, o); err != nil {
			return writeError(out, err)
		}
		if err := zw.Close(); err != nil {
			return writeError(out, err)
		}
	} else if err := genTo(w, name, o); err != nil {
		return writeError(out, err)
	}
	return f.Commit()
}

// writeError is err, of a write to the output file out, naming out: a
// failed write ("out: no space left on device"), or what gen refused as
// it is.
func writeError(out string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", out, pe.Err)
	}
	return err
}

func workloadNames() string {
	var names []string
	for _, w := range gen.Workloads() {
		names = append(names, w.Name)
	}
	return strings.Join(names, ", ")
}

// genTo writes the workload to out.
func genTo(out io.Writer, name string, o gen.Options) error {
	w := traces.NewWriter(out, gen.ColumnsOf(name)...)
	if err := gen.Generate(w, name, o); err != nil {
		return err
	}
	return w.Flush()
}
