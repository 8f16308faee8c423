package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/tabular"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
	"github.com/gpualloc/gpualloc/traces"
)

const fidelityUsage = `usage: simulate fidelity [flags] SNAPSHOT...

Replays PyTorch memory snapshots (torch.cuda.memory._dump_snapshot files)
with the pytorch strategy, configured from each snapshot's
allocator_settings (torch_npu's rules for a snapshot that torch_npu wrote
on Ascend NPUs, whose blocks hold 32 bytes more than their requests) and
started from the segments and blocks rebuilt for the
start of its trace, and compares its decisions with the recorded ones: the
address of each alloc, the segments allocated (segment_alloc, or
segment_map with expandable segments) and freed, and the recorded out of
memory errors (oom). One row per file and device.

The figures of memory held from the device follow, as recorded (the
segments when the trace began, then its segment entries) and as replayed
by the strategy going on from its own decisions, as simulate -s pytorch
measures its replay of the same file: PEAK RESERVED, MALLOCS (device
allocations during the trace: segment_alloc entries and the pages of
segment_map entries against cudaMalloc and cuMemCreate calls), and MAX
RESERVED DIFF, the largest difference of reserved bytes between the two
after any alloc, free or oom.

The strategy replays each snapshot with the allocator settings it records
(the CONF of JSON and CSV), per device where its devices differ; the lines
after the table name the allocator compared with (ALLOCATOR in JSON and
CSV); PYTORCH_CUDA_ALLOC_CONF or else PYTORCH_ALLOC_CONF,
when set, replaces them, with the rules of the release that wrote each
snapshot, which standard error says; as simulate -s pytorch, it takes
nothing from PYTORCH_ALLOC_CONF for a snapshot of a release before 2.10,
which does not read it.

A file that is not a record of PyTorch's allocator (not a snapshot, a
snapshot whose trace does not fit its segments, or an export of another
strategy by simulate --snapshot) gets a row of its own saying why; the
other files are compared, and the exit status is 1. A record whose
blocks PyTorch's allocator could not have made (blocks finer than its
512 bytes: a patched build) is replayed from the strategy's own
decisions, with its figures and no DECISION RATE, and its note says why.

SEGMENT ALLOCS counts the recorded segment_alloc (and segment_map)
entries, SEGMENT MATCHES those the strategy took too; SEGMENT FREES the
recorded segment_free (and segment_unmap) entries, FREE MATCHES those the
strategy gave back too. MATCH RATE is (address matches + segment matches
+ free matches) / (allocs + segment allocs + segment frees) when the
strategy goes on from its own decisions, so that an early divergence moves
every later address. DECISION RATE is decision matches /
allocs when the strategy is made to hold the recorded state before each
alloc, so that each divergence counts once. A device with no alloc in its
trace (a state-only or legacy snapshot) has nothing to compare: its rates
are - (null in JSON, empty in CSV). The SEGMENT FREES and OOMS columns
show only when a snapshot records one. Rates are rounded down, so that 100.00% means all.

Flags:
`

// newFidelityAllocator makes the allocator that fidelity replays, and
// fidelityModels names the allocator it follows for a conf; tests may
// replace them.
var (
	newFidelityAllocator fidelity.NewFunc = fidelity.PyTorch
	fidelityModels                        = fidelity.Models
)

func fidelityCmd(ctx context.Context, e *env, args []string) error {
	var format, progressMode string
	var mismatches int
	fs := newFlagSet(e, "simulate fidelity", fidelityUsage)
	fs.StringVarP(&format, "format", "f", "table", "output format: table, csv or json")
	fs.IntVar(&mismatches, "mismatches", fidelity.DefaultMaxMismatches, "mismatches to list per snapshot and device")
	addReadProgress(fs, &progressMode)
	addTempDir(fs, e)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	progress, err := readProgressTo(progressMode, e.stderr)
	if err != nil {
		return err
	}
	if format != "table" && format != "json" && format != "csv" {
		return usagef("-f %s: the format is table, csv or json", format)
	}
	if fs.NArg() == 0 {
		return usagef("fidelity: no SNAPSHOT")
	}
	if mismatches <= 0 {
		mismatches = -1
	}
	if err := checkReadOnce(fs.Args()); err != nil {
		return err
	}
	// Every file can be read, before any work. A regular file is opened
	// again when its turn comes; one that can be read only once (a FIFO,
	// a device) stays open from here, so that it is opened once.
	held := make([]*os.File, fs.NArg())
	defer func() {
		for _, f := range held {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, path := range fs.Args() {
		f, err := openSnapshotFile(ctx, path)
		if err != nil {
			return err
		}
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			f.Close()
			continue
		}
		held[i] = f
	}
	var conf *envConf
	for _, k := range []string{pytorch.EnvCUDAConf, pytorch.EnvConf} { // as PyTorch 2.10 reads them
		if v, ok := e.getenv(k); ok && strings.TrimSpace(v) != "" {
			conf = &envConf{k, strings.TrimSpace(v)}
			fmt.Fprintf(e.stderr, "simulate: fidelity: the allocator replays with %s=%s, not with the settings each snapshot records\n", k, conf.value)
			break
		}
	}
	var results []*fidelity.Result
	failed := 0
	for i, path := range fs.Args() {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := held[i]
		held[i] = nil
		r, err := fidelityFile(ctx, path, f, mismatches, conf, progress, e.stderr, e.tempDir)
		if err != nil {
			// The file's own row says why; the others are compared.
			failed++
			r = []*fidelity.Result{{File: path, Error: strings.TrimPrefix(oneLine(err.Error()), path+": "), Mismatches: []fidelity.Mismatch{}}}
		}
		results = append(results, r...)
	}
	switch format {
	case "json":
		err = tabular.WriteJSON(e.stdout, results)
	case "csv":
		rows := make([]fidelity.Result, len(results))
		for i, r := range results {
			rows[i] = *r
		}
		err = tabular.WriteCSV(e.stdout, rows)
	default:
		err = fidelityTable(e, results)
	}
	if err == nil && failed > 0 {
		err = fmt.Errorf("fidelity: %d of %d files could not be compared (see their rows)", failed, fs.NArg())
	}
	return err
}

// fidelityTable writes results as a table, then their notes and first
// mismatches.
func fidelityTable(e *env, results []*fidelity.Result) error {
	ooms, frees := false, false
	for _, r := range results {
		ooms = ooms || r.OOMs > 0
		frees = frees || r.SegmentFrees > 0
	}
	head := []string{"FILE", "DEVICE", "ALLOCS", "ADDRESS MATCHES", "DECISION MATCHES", "SEGMENT ALLOCS", "SEGMENT MATCHES"}
	if frees {
		head = append(head, "SEGMENT FREES", "FREE MATCHES")
	}
	if ooms {
		head = append(head, "OOMS", "OOM MATCHES")
	}
	head = append(head, "MATCH RATE", "DECISION RATE", "PEAK RESERVED REC", "PEAK RESERVED REPLAY", "MALLOCS REC", "MALLOCS REPLAY", "MAX RESERVED DIFF")
	right := make([]bool, len(head))
	for i := 1; i < len(right); i++ {
		right[i] = true
	}
	count := tabular.Count
	var rows [][]string
	size := gpualloc.FormatSize
	for _, r := range results {
		if r.Error != "" {
			row := []string{r.File, "-"}
			for len(row) < len(head) {
				row = append(row, "-")
			}
			rows = append(rows, row)
			continue
		}
		row := []string{r.File, strconv.Itoa(r.Device), count(r.Allocs), count(r.AddressMatches), count(r.DecisionMatches),
			count(r.SegmentAllocs), count(r.SegmentMatches)}
		if frees {
			row = append(row, count(r.SegmentFrees), count(r.SegmentFreeMatches))
		}
		if ooms {
			row = append(row, count(r.OOMs), count(r.OOMMatches))
		}
		match, decision := "-", "-"
		if r.MatchRate != nil {
			match = percentDown(r.AddressMatches+r.SegmentMatches+r.SegmentFreeMatches, r.Allocs+r.SegmentAllocs+r.SegmentFrees)
		}
		if r.DecisionRate != nil {
			decision = percentDown(r.DecisionMatches, r.Allocs)
		}
		rows = append(rows, append(row, match, decision, size(r.RecordedPeakReservedBytes), size(r.ReplayedPeakReservedBytes),
			count(r.RecordedDeviceMallocs), count(r.ReplayedDeviceMallocs), size(r.MaxReservedDiffBytes)))
	}
	if err := tabular.Layout(e.stdout, head, right, rows); err != nil {
		return err
	}
	// The allocator each file was compared with, once per file (per
	// device where its devices differ).
	first := true
	for i, r := range results {
		if r.Error != "" || r.Allocator == "" {
			continue
		}
		if i > 0 && results[i-1].File == r.File && results[i-1].Allocator == r.Allocator {
			continue
		}
		if first {
			fmt.Fprintln(e.stdout)
			first = false
		}
		if i+1 < len(results) && results[i+1].File == r.File && results[i+1].Allocator != r.Allocator {
			fmt.Fprintf(e.stdout, "%s device %d: compared with %s\n", r.File, r.Device, r.Allocator)
			continue
		}
		fmt.Fprintf(e.stdout, "%s: compared with %s\n", r.File, r.Allocator)
	}
	notes := false
	for _, r := range results {
		if r.Note == "" && r.Error == "" {
			continue
		}
		if !notes {
			fmt.Fprintln(e.stdout)
			notes = true
		}
		if r.Error != "" {
			fmt.Fprintf(e.stdout, "%s: not compared: %s\n", r.File, r.Error)
			continue
		}
		fmt.Fprintf(e.stdout, "%s device %d: %s\n", r.File, r.Device, r.Note)
	}
	for _, r := range results {
		if len(r.Mismatches) == 0 {
			continue
		}
		fmt.Fprintf(e.stdout, "\n%s device %d: first mismatches\n", r.File, r.Device)
		for _, m := range r.Mismatches {
			fmt.Fprintf(e.stdout, "  %s\n", m)
		}
	}
	return nil
}

// percentDown writes n/d as a percentage with two decimals, rounded down,
// so that only n == d shows 100.00%.
func percentDown(n, d int64) string {
	h := n * 10000 / d
	return fmt.Sprintf("%d.%02d%%", h/100, h%100)
}

// fidelityFile reads and replays one snapshot, showing the read's progress
// on progress if not nil; its errors name the file.
func fidelityFile(ctx context.Context, path string, f *os.File, mismatches int, env *envConf, progress, stderr io.Writer, tempDir string) ([]*fidelity.Result, error) {
	if f == nil {
		var err error
		if f, err = openSnapshotFile(ctx, path); err != nil {
			return nil, err
		}
	}
	defer f.Close()
	s, err := readSnapshotProgress(ctx, f, path, progress, true, tempDir)
	if err != nil {
		return nil, err
	}
	if name, ok := s.AllocatorSettings.Strategy(); ok && name != "pytorch" {
		return nil, fmt.Errorf("%s: an export of the simulator's %s strategy, not a record of PyTorch's caching allocator", path, name)
	}
	v, _ := s.PyTorchVersion()
	given := env.of(path, v, stderr)
	r, err := fidelity.Run(s, path, fidelity.Options{New: newFidelityAllocator, MaxMismatches: mismatches, Conf: given})
	if err != nil {
		return nil, fmt.Errorf("%s: not a record of PyTorch's caching allocator: %w", path, err)
	}
	if given != nil {
		for _, x := range r {
			x.Conf = env.value // as given: the release is the allocator's, below
		}
	}
	// The allocator compared with, of the release the file points to
	// where the conf names none (see snapshot.Snapshot.PyTorchVersion).
	for _, x := range r {
		conf := x.Conf
		if v != "" && !strings.Contains(conf, "version:") {
			conf = strings.TrimPrefix(conf+",version:"+v, ",")
		}
		x.Allocator = fidelityModels(conf)
	}
	return r, nil
}

// openSnapshotFile opens the snapshot file at path; the name of a bundled
// trace that no file has gets an error saying what fidelity needs.
func openSnapshotFile(ctx context.Context, path string) (*os.File, error) {
	f, err := openInputCtx(ctx, path)
	if _, bundled := traces.LookupBundled(path); bundled && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: a bundled trace, not a PyTorch snapshot: fidelity needs a snapshot, the file torch.cuda.memory._dump_snapshot writes", path)
	}
	return f, err
}

// An envConf is the variable that gives fidelity PyTorch's settings and
// its value.
type envConf struct{ name, value string }

// of returns the settings that the allocator replays the snapshot at
// path, which release v of PyTorch wrote ("" for none known), with (nil:
// those it records), as simulate -s pytorch takes them (see sim.Config's
// Params): PYTORCH_ALLOC_CONF is not read for a snapshot that a release
// before 2.10 wrote (pytorch/pytorch#183387), which a line on w then
// says, and the settings given replay with the rules of that release.
func (c *envConf) of(path, v string, w io.Writer) *string {
	if c == nil {
		return nil
	}
	conf := c.value
	if ver, err := pytorch.ParseVersion(v); err == nil {
		if c.name == pytorch.EnvConf && !ver.ReadsEnvConf() {
			fmt.Fprintf(w, "simulate: fidelity: %s: PyTorch %s, which wrote it, does not read %s (pytorch/pytorch#183387): compared with the settings it records\n", path, v, c.name)
			return nil
		}
		if _, named := snapshot.ConfValue(conf, "version"); !named {
			conf = strings.TrimPrefix(conf+",version:"+v, ",")
		}
	}
	return &conf
}
