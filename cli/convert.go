package cli

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

const convertUsage = `usage: simulate convert [flags] IN OUT

Converts a trace in any format simulate reads (or a bundled trace, by
name) to the native CSV format: OUT ends in .csv, or in .csv.gz for gzip,
or is "-" for standard output (or ends in .pickle: below); any other name
is refused. OUT is replaced only once the whole trace has been read without
error (written under a temporary name beside it, then renamed); an OUT
that is a symbolic link replaces the file the link leads to, and the link
stays; a character device or a FIFO is written through. The memory of each device that IN records (a PyTorch snapshot with
an out-of-memory error) is kept, in "# device_memory DEVICE BYTES"
comments, so that OUT replays on the same devices.

With --to minimalloc it writes a MiniMalloc CSV instead (OUT ending in .csv,
or "-"): id,lower,upper,size, the input of Google's MiniMalloc, the buffers
as 'simulate plan' reads them. A MiniMalloc input keeps its ids and times;
any other trace's allocations get the trace's id (".k" added on the k-th
reuse of an id) and the event indexes of their alloc and free. MiniMalloc
CSV has no devices: a trace that uses several is refused.

With an OUT ending in .pickle, IN must be a PyTorch memory snapshot, and
convert writes it again as one (pickle protocol 4, the opcodes PyTorch's
memory viewer reads), frames included unless --no-frames is given.
--snapshot-entries N keeps the last N trace entries of each device, as
PyTorch's ring buffer (_record_memory_history(max_entries=N)) does: the
segments stay the state after the last entry, so the viewer walks back
over the kept entries without error, and blocks allocated before them show
as allocated from the start. That is how a snapshot too big for the viewer
(about 500 MB and up) becomes one it opens.

Flags:
`

func convertCmd(ctx context.Context, e *env, args []string) error {
	var lenient, noFrames bool
	var to, progressMode string
	var entries int
	fs := newFlagSet(e, "simulate convert", convertUsage)
	fs.IntVar(&entries, "snapshot-entries", 0, "with a .pickle OUT: keep the last N trace entries of each device (0: all)")
	fs.BoolVar(&noFrames, "no-frames", false, "with a .pickle OUT: leave out the stacks of entries, blocks and segments")
	fs.StringVar(&progressMode, "progress", "auto", "with a .pickle OUT: show how much of IN is read, once a read takes 2 s: auto (on a terminal), always or never")
	fs.BoolVar(&lenient, "lenient", false, "skip bad events, count them and go on")
	fs.StringVarP(&to, "to", "t", "native", "output format: native (trace CSV) or minimalloc (MiniMalloc CSV)")
	addTempDir(fs, e)
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
	if strings.HasSuffix(strings.ToLower(out), ".pickle") {
		if entries < 0 {
			return usagef("convert: --snapshot-entries %d: want 0 or more", entries)
		}
		if err := checkProgress(progressMode); err != nil {
			return err
		}
		var stderr io.Writer
		if showProgress(progressMode, e.stderr) {
			stderr = e.stderr
		}
		return convertSnapshot(ctx, in, e.stdin, out, entries, noFrames, stderr, e.tempDir)
	}
	if entries != 0 || noFrames {
		return usagef("convert: --snapshot-entries and --no-frames want an OUT ending in .pickle")
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
		if err := writeNative(ctxWriter(ctx, e.stdout), r); err != nil {
			return err
		}
		reportSkipped(e, in, r)
		return nil
	}
	// Write beside OUT and rename, so that a failure leaves OUT as it was.
	err = writeFileVia(ctx, out, func(f io.Writer) error {
		var zw *gzip.Writer
		if strings.HasSuffix(strings.ToLower(out), ".gz") {
			zw = gzip.NewWriter(f)
			f = zw
		}
		if err := writeNative(ctxWriter(ctx, f), r); err != nil {
			return err
		}
		if zw != nil {
			return zw.Close()
		}
		return nil
	})
	if err != nil {
		return err
	}
	reportSkipped(e, in, r)
	return nil
}

// convertSnapshot writes the PyTorch snapshot in ("-": stdin) as one
// again at out, keeping the last entries of each device's trace (all if 0)
// and, unless noFrames, the stacks; progress, if not nil, shows the read's
// progress.
func convertSnapshot(ctx context.Context, in string, stdin io.Reader, out string, entries int, noFrames bool, progress io.Writer, tempDir string) error {
	var s *snapshot.Snapshot
	if in == "-" {
		var err error
		if s, err = readSnapshotFrom(ctx, waitingReader(ctx, stdin), "stdin", -1, progress, noFrames, tempDir); err != nil {
			return err
		}
	} else {
		if _, ok := bundledByName(in); ok {
			return fmt.Errorf("%s: a bundled trace, not a PyTorch snapshot: an OUT ending in .pickle needs a snapshot, the file torch.cuda.memory._dump_snapshot writes", in)
		}
		f, err := openTraceFile(ctx, in)
		if err != nil {
			return err
		}
		defer f.Close()
		if s, err = readSnapshotProgress(ctx, f, in, progress, noFrames, tempDir); err != nil {
			return err
		}
		f.Close()
	}
	cut := cutSnapshot(s, entries, noFrames)
	return writeFileVia(ctx, out, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if err := snapshot.WriteStream(ctxWriter(ctx, bw), cut, snapshot.WriteOptions{Protocol: 4}); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// cutSnapshot returns s with the last entries of each device's trace (all
// if entries is 0), as PyTorch's ring buffer keeps them, and without the
// stacks if noFrames: a stream that reads the entries it keeps from s as
// it is written, holding none of them. The segments, the state after the
// last entry, stay: a suffix of a trace that fits them fits them too.
//
// PyTorch's viewer fails to load a snapshot whose entries have categories
// but none "unknown": when the cut leaves such entries, the last device's
// window ends, as a replay's export does, with a "snapshot" entry of
// category "unknown" in place of its oldest entry.
func cutSnapshot(s *snapshot.Snapshot, entries int, noFrames bool) *snapshot.Stream {
	from := make([]int, s.NumTraces()) // the first entry kept of each trace
	cats, unknown := false, false
	for d := range from {
		t := s.Trace(d)
		if entries > 0 && t.Len() > entries {
			from[d] = t.Len() - entries
		}
		for i := from[d]; i < t.Len(); i++ {
			c := t.At(i).Category
			cats = cats || c != ""
			unknown = unknown || c == gpualloc.CategoryUnknown.String()
		}
	}
	closing, last := -1, snapshot.TraceEntry{} // the device that ends with last
	if cats && !unknown {
		for d := len(from) - 1; d >= 0; d-- {
			t := s.Trace(d)
			if t.Len() == from[d] {
				continue
			}
			if entries > 0 && t.Len()-from[d] == entries {
				from[d]++
			}
			closing = d
			last = snapshot.TraceEntry{Action: snapshot.TakeSnapshot, TimeUS: t.At(t.Len() - 1).TimeUS, Category: gpualloc.CategoryUnknown.String()}
			break
		}
	}
	st := &snapshot.Stream{Segments: s.Segments, Devices: len(from), AllocatorSettings: s.AllocatorSettings,
		Frames: s.Frames, Stacks: s.Stacks}
	if noFrames {
		st.Frames, st.Stacks = nil, nil
	}
	st.Entries = func(d int, yield func(*snapshot.TraceEntry) bool) error {
		t := s.Trace(d)
		for i := from[d]; i < t.Len(); i++ {
			if e := t.At(i); !yield(&e) {
				return t.Err()
			}
		}
		if err := t.Err(); err != nil {
			return err // entries not read back from the read's temporary file
		}
		if d == closing {
			e := last
			yield(&e)
		}
		return nil
	}
	return st
}

// reportSkipped notes on stderr the bad events a lenient reader skipped.
func reportSkipped(e *env, in string, r traces.FileReader) {
	if n := r.Skipped(); n > 0 {
		fmt.Fprintf(e.stderr, "simulate: %s: skipped %s (the first: %v)\n", in, plural(n, "bad event"), r.FirstSkipped())
	}
}

// writeNative writes the trace r reads to out in the native format: the
// devices' memory it records, then its events.
func writeNative(out io.Writer, r traces.FileReader) error {
	w := traces.NewWriter(out, r.Columns()...)
	if err := writeDeviceMemory(w, r); err != nil {
		return err
	}
	if err := copyTrace(w, r); err != nil {
		return err
	}
	return w.Flush()
}

func copyTrace(w *traces.Writer, r traces.Reader) error {
	for r.Scan() {
		if err := w.Write(r.Event()); err != nil {
			return err
		}
	}
	return errors.Join(r.Err())
}
