package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/tabular"
	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/traces"
)

const planUsage = `usage: simulate plan [flags] TRACE...

Places every allocation of each trace at an offset in one address space,
knowing when each is freed (the offline plan that XLA and MindSpore's SOMAS
make for a whole graph), and reports the memory the placement needs
(offline_bytes) against the lower bound (peak_requested_bytes, the peak of
live requested bytes). A multi-device trace is one problem per device, one
row each.

It runs a portfolio of greedy heuristics (orders size, area, lifetime and
time x first fit and best fit) and, while the best is above the lower bound
(or --capacity), an exact search in the manner of MiniMalloc until
--time-limit. optimal is true when the placement is at the lower bound or
the search proved that no lower one exists; method names the heuristic
(ORDER/FIT) or "search".

A TRACE is a file in any format simulate reads, or a bundled trace by
name. A MiniMalloc CSV (id,lower,upper,size) keeps its ids and times. Any other
trace's buffers are its allocations: the id of the trace (".k" added on the
k-th reuse of an id), and the event indexes of the alloc and the free
(lower, upper: half-open; never freed: the number of events).

Flags:
`

// planRow is one problem's result, for simulate plan.
type planRow struct {
	Trace              string `json:"trace"`
	Device             int    `json:"device"`
	Buffers            int    `json:"buffers"`
	PeakRequestedBytes int64  `json:"peak_requested_bytes"`
	OfflineBytes       int64  `json:"offline_bytes"`
	Optimal            bool   `json:"optimal"`
	ElapsedNS          int64  `json:"elapsed_ns"`
	Method             string `json:"method"`
}

func planCmd(ctx context.Context, e *env, args []string) error {
	var (
		format, capacity, out string
		timeLimit             time.Duration
		lenient, noSearch     bool
	)
	var progressMode string
	fs := newFlagSet(e, "simulate plan", planUsage)
	fs.StringVar(&capacity, "capacity", "", "find a placement within `SIZE` (bytes, or units KiB, MiB, GiB, ...); exit 1 when none is found in the time limit")
	fs.DurationVar(&timeLimit, "time-limit", plan.DefaultTimeLimit, "`DURATION` for each problem: the heuristics and then the search")
	fs.BoolVar(&noSearch, "no-search", false, "the heuristics only")
	fs.StringVarP(&format, "format", "f", "table", "output format: table, csv or json")
	fs.StringVarP(&out, "out", "o", "", "write the placement to `FILE` as CSV id,lower,upper,size,offset (MiniMalloc's solution format); one trace of one device")
	fs.BoolVar(&lenient, "lenient", false, "skip bad events of a trace, count them and go on")
	addReadProgress(fs, &progressMode)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	var err error
	if e.readProgress, err = readProgressTo(progressMode, e.stderr); err != nil {
		return err
	}
	opts := plan.Options{TimeLimit: timeLimit, NoSearch: noSearch}
	if capacity != "" {
		c, err := parseSizeFlag("--capacity", capacity)
		if err != nil {
			return err
		}
		opts.Capacity = c
	}
	if timeLimit <= 0 {
		return usagef("--time-limit %v: want a positive duration such as 10s", timeLimit)
	}
	if fs.NArg() == 0 {
		return usagef("plan: want at least one TRACE")
	}
	if out != "" && fs.NArg() > 1 {
		return usagef("plan: -o writes the placement of one trace, got %d", fs.NArg())
	}
	if out != "" {
		if err := checkOutputFile("-o", out, fs.Args()); err != nil {
			return err
		}
	}
	var rows []planRow
	for _, path := range fs.Args() {
		probs, err := readProblems(ctx, e, path, traces.Options{Lenient: lenient})
		if err != nil {
			return err
		}
		if out != "" && len(probs) > 1 {
			return fmt.Errorf("%s: -o: the trace uses %d devices, and a placement file holds one", path, len(probs))
		}
		for _, p := range probs {
			sol, err := plan.Solve(ctx, p.Problem, opts)
			if err != nil {
				if errors.Is(err, plan.ErrNoPlacement) && len(probs) > 1 {
					return fmt.Errorf("%s: device %d: %w", path, p.Device, err)
				}
				return fmt.Errorf("%s: %w", path, err)
			}
			rows = append(rows, planRow{Trace: path, Device: p.Device, Buffers: len(p.Buffers),
				PeakRequestedBytes: sol.LowerBound, OfflineBytes: sol.Height, Optimal: sol.Optimal,
				ElapsedNS: int64(sol.Elapsed), Method: sol.Method})
			if out != "" {
				placed := sol.Placements(p.Problem)
				if err := writeFileVia(out, func(w io.Writer) error { return plan.WritePlacements(w, placed) }); err != nil {
					return err
				}
			}
		}
	}
	return writePlanRows(e, format, rows)
}

// readProblems reads the trace at path into one problem per device: a
// MiniMalloc CSV with its ids and times, any other trace as plan.FromTrace
// makes it. A trace without allocations is one empty problem of device 0.
func readProblems(ctx context.Context, e *env, path string, opts traces.Options) ([]plan.DeviceProblem, error) {
	r, c, err := openTrace(ctx, e, path, opts)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var probs []plan.DeviceProblem
	if p, ok := plan.FromMiniMalloc(r); ok {
		probs = []plan.DeviceProblem{{Problem: p}}
	} else if probs, err = plan.FromTrace(r); err != nil {
		return nil, err
	}
	reportSkipped(e, path, r)
	if len(probs) == 0 {
		probs = []plan.DeviceProblem{{}}
	}
	return probs, nil
}

// writeFileVia writes the file at path with write, beside it first and
// then renamed, so that a failure leaves path as it was.
func writeFileVia(path string, write func(w io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = write(tmp)
	if err == nil {
		err = tmp.Chmod(0o644) // as a file os.Create makes, not the temporary's 0600
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func writePlanRows(e *env, format string, rows []planRow) error {
	switch format {
	case "json":
		return tabular.WriteJSON(e.stdout, rows)
	case "csv":
		return tabular.WriteCSV(e.stdout, rows)
	}
	multi := false
	for _, r := range rows {
		multi = multi || r.Device != 0
	}
	head := []string{"TRACE", "BUFFERS", "LOWER BOUND", "OFFLINE", "GAP", "OPTIMAL", "METHOD", "TIME"}
	right := []bool{false, true, true, true, true, false, false, true}
	if multi {
		head = append([]string{"TRACE", "DEVICE"}, head[1:]...)
		right = append([]bool{false, true}, right[1:]...)
	}
	var cells [][]string
	for _, r := range rows {
		gap := "-"
		if r.PeakRequestedBytes > 0 {
			gap = fmt.Sprintf("+%.2f%%", 100*float64(r.OfflineBytes-r.PeakRequestedBytes)/float64(r.PeakRequestedBytes))
		}
		opt := "no"
		if r.Optimal {
			opt = "yes"
		}
		c := []string{r.Trace, tabular.Count(int64(r.Buffers)), gpualloc.FormatSize(r.PeakRequestedBytes),
			gpualloc.FormatSize(r.OfflineBytes), gap, opt, r.Method, time.Duration(r.ElapsedNS).Round(time.Microsecond).String()}
		if multi {
			c = append([]string{r.Trace, fmt.Sprint(r.Device)}, c[1:]...)
		}
		cells = append(cells, c)
	}
	return tabular.Layout(e.stdout, head, right, cells)
}

// convertMiniMalloc writes the trace at in as a MiniMalloc CSV to out
// ("-": standard output).
func convertMiniMalloc(ctx context.Context, e *env, in, out string, opts traces.Options) error {
	probs, err := readProblems(ctx, e, in, opts)
	if err != nil {
		return err
	}
	if len(probs) > 1 {
		return fmt.Errorf("%s: the trace uses %d devices, and a MiniMalloc CSV holds one", in, len(probs))
	}
	if out == "-" {
		return plan.WriteProblem(e.stdout, probs[0].Problem)
	}
	return writeFileVia(out, func(w io.Writer) error { return plan.WriteProblem(w, probs[0].Problem) })
}
