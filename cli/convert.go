package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpualloc/gpualloc/traces"
)

const convertUsage = `usage: simulate convert [flags] IN OUT

Converts a trace in any format simulate reads (or a bundled trace, by
name) to the native CSV format: OUT ends in .csv, or in .csv.gz for gzip,
or is "-" for standard output; any other name is refused. OUT is replaced only once the whole trace has
been read without error. The memory of each device that IN records (a
PyTorch snapshot with an out-of-memory error) is kept, in "# device_memory
DEVICE BYTES" comments, so that OUT replays on the same devices.

With --to minimalloc it writes a MiniMalloc CSV instead (OUT ending in .csv,
or "-"): id,lower,upper,size, the input of Google's MiniMalloc, the buffers
as 'simulate plan' reads them:
a MiniMalloc input keeps its ids and times; any other trace's allocations
get the trace's id (".k" added on the k-th reuse of an id) and the event
indexes of their alloc and free. MiniMalloc CSV has no devices: a trace that
uses several is refused.

Flags:
`

func convertCmd(ctx context.Context, e *env, args []string) error {
	var lenient bool
	var to string
	fs := newFlagSet(e, "simulate convert", convertUsage)
	fs.BoolVar(&lenient, "lenient", false, "skip bad events, count them and go on")
	fs.StringVarP(&to, "to", "t", "native", "output format: native (trace CSV) or minimalloc (MiniMalloc CSV)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("convert: want IN and OUT")
	}
	in, out := fs.Arg(0), fs.Arg(1)
	if err := checkOutputFile("convert: OUT", out, []string{in}); err != nil {
		return err
	}
	switch to {
	case "native":
		if lo := strings.ToLower(out); out != "-" && !strings.HasSuffix(lo, ".csv") && !strings.HasSuffix(lo, ".csv.gz") {
			return usagef("convert: %s: convert writes native CSV: want an OUT ending in .csv or .csv.gz, or - for standard output", out)
		}
	case "minimalloc":
		if lo := strings.ToLower(out); out != "-" && !strings.HasSuffix(lo, ".csv") {
			return usagef("convert: %s: --to minimalloc writes MiniMalloc CSV: want an OUT ending in .csv, or - for standard output", out)
		}
		return convertMiniMalloc(ctx, e, in, out, traces.Options{Lenient: lenient})
	default:
		return usagef("convert: --to %q: want native or minimalloc", to)
	}
	r, c, err := openTrace(ctx, e, in, traces.Options{Lenient: lenient})
	if err != nil {
		return err
	}
	defer c.Close()
	if out == "-" {
		w := traces.NewWriter(ctxWriter(ctx, e.stdout), r.Columns()...)
		if err := writeDeviceMemory(w, r); err != nil {
			return err
		}
		if err := copyTrace(w, r); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		reportSkipped(e, in, r)
		return nil
	}
	// Write beside OUT and rename, so that a failure leaves OUT as it was.
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName)
	// Create picks compression from the name: give the temporary OUT's suffix.
	name := tmpName + filepath.Ext(out)
	defer os.Remove(name)
	w, err := traces.Create(name, r.Columns()...)
	if err != nil {
		return err
	}
	err = writeDeviceMemory(w, r)
	if err == nil {
		err = copyTrace(w, r)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(name, out); err != nil {
		return err
	}
	reportSkipped(e, in, r)
	return nil
}

// reportSkipped notes on stderr the bad events a lenient reader skipped.
func reportSkipped(e *env, in string, r traces.FileReader) {
	if n := r.Skipped(); n > 0 {
		fmt.Fprintf(e.stderr, "simulate: %s: skipped %s (the first: %v)\n", in, plural(n, "bad event"), r.FirstSkipped())
	}
}

func copyTrace(w *traces.Writer, r traces.Reader) error {
	for r.Scan() {
		if err := w.Write(r.Event()); err != nil {
			return err
		}
	}
	return errors.Join(r.Err())
}
