package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

const snapshotUsage = `
With --snapshot DIR it also writes, for every replay, a PyTorch memory
snapshot of what the strategy did into DIR (made if missing), which
PyTorch's memory viewer (pytorch.org/memory_viz) opens: the trace of
allocs, frees, device allocations and frees, maps and unmaps and failed
allocations, per device and stream, the segments and blocks after the last
event, and the strategy's settings. When the trace is a PyTorch snapshot,
each alloc, its frees and its block carry the frames that the trace
records for that allocation, each stack written once. Each file is named
TRACE.STRATEGY[.KEY-VALUE...].HASH.pickle: the trace's file name without
its extensions, the strategy, the parameters that differ from their
defaults, and 8 hex digits of a hash of the trace's name and the full spec,
so that no two replays share a name; characters other than letters,
digits, '.', '_', '+' and '-' become '_'. --snapshot-entries N keeps only
the last N entries of each device's trace, as PyTorch's
_record_memory_history(max_entries=N) does. The trace entries wait in a
temporary file in DIR, about 13 bytes each, while the replay runs.
`

// snapshotFlags are the flags that export replays as PyTorch snapshots.
type snapshotFlags struct {
	dir     string
	entries int
}

func (f *snapshotFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.dir, "snapshot", "", "write a PyTorch memory snapshot of every replay into `DIR` (see above for the names)")
	fs.IntVar(&f.entries, "snapshot-entries", 0, "keep the last `N` trace entries per device in each snapshot (default: all)")
}

// check validates the flags and makes the directory, checking that a file
// can be written in it.
func (f *snapshotFlags) check(fs *pflag.FlagSet) error {
	if fs.Changed("snapshot-entries") {
		if f.entries <= 0 {
			return usagef("--snapshot-entries %d: want a positive number of entries", f.entries)
		}
		if f.dir == "" {
			return usagef("--snapshot-entries needs --snapshot DIR")
		}
	}
	if fs.Changed("snapshot") && f.dir == "" {
		return usagef("--snapshot: want a directory")
	}
	if f.dir == "" {
		return nil
	}
	if err := os.MkdirAll(f.dir, 0o777); err != nil {
		return fmt.Errorf("--snapshot %s: %w", f.dir, unwrapPath(err))
	}
	tmp, err := os.CreateTemp(f.dir, ".snapshot-*")
	if err != nil {
		return fmt.Errorf("--snapshot %s: cannot write there: %w", f.dir, unwrapPath(err))
	}
	tmp.Close()
	os.Remove(tmp.Name())
	return nil
}

// unwrapPath drops the operation and path of an *os.PathError, which the
// message names already.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// writer returns the function that writes the snapshot of the replay of
// trace with p as it reads its entries, or nil when no snapshot is asked
// for. The replay spills the entries into the snapshot's directory (see
// sim.Config.SnapshotTemp), which needs the room for the file anyway.
func (f *snapshotFlags) writer(trace string, p *gpualloc.Params) func(*snapshot.Stream) error {
	if f.dir == "" {
		return nil
	}
	path := filepath.Join(f.dir, snapshotName(trace, p))
	return func(s *snapshot.Stream) error { return writeSnapshot(path, s) }
}

// writeSnapshot writes s into the file path, through a temporary file in
// the same directory renamed at the end (see atomicFile), so that no reader
// (nor a replay of the same trace and spec writing at the same time) sees
// half a file.
func writeSnapshot(path string, s *snapshot.Stream) error {
	out, err := createAtomic(context.Background(), path)
	if err != nil {
		return fmt.Errorf("writing %w", err)
	}
	defer out.Abort()
	w := bufio.NewWriterSize(out, 1<<16)
	err = snapshot.WriteStream(w, s, snapshot.WriteOptions{})
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := out.Commit(); err != nil {
		return fmt.Errorf("writing %w", err)
	}
	return nil
}

// maxNamePart bounds the readable part of a snapshot's file name, which
// keeps names within the 255 bytes that filesystems allow.
const maxNamePart = 180

// snapshotName returns the file name of the snapshot of the replay of trace
// with p: TRACE.STRATEGY[.KEY-VALUE...].HASH.pickle, as snapshotUsage says.
func snapshotName(trace string, p *gpualloc.Params) string {
	base := filepath.Base(trace)
	if i := strings.IndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	parts := []string{base, p.Strategy()}
	defaults := map[string]string{}
	if st, err := gpualloc.Lookup(p.Strategy()); err == nil {
		for _, q := range st.Params {
			defaults[q.Name] = q.Default
		}
	}
	for _, kv := range p.Spec().Params {
		if d, ok := defaults[kv.Key]; !ok || d != kv.Value {
			parts = append(parts, kv.Key+"-"+kv.Value)
		}
	}
	name := safeName(strings.Join(parts, "."))
	if len(name) > maxNamePart {
		name = name[:maxNamePart]
	}
	sum := sha256.Sum256([]byte(trace + "\x00" + p.String()))
	return name + "." + hex.EncodeToString(sum[:4]) + ".pickle"
}

// safeName replaces the characters that are not safe in a file name on
// every filesystem, and a leading '.', by '_'.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '+' || c == '-' || c == '.' && i > 0
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}
