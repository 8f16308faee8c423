package cli

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/gpualloc/gpualloc/internal/tabular"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
	"github.com/gpualloc/gpualloc/strategy/pytorch/snapshot"
)

const fidelityUsage = `usage: simulate fidelity [flags] SNAPSHOT...

Replays PyTorch memory snapshots (torch.cuda.memory._dump_snapshot files)
with the pytorch strategy, configured from each snapshot's
allocator_settings and started from the segments and blocks rebuilt for the
start of its trace, and compares its decisions with the recorded ones: the
address of each alloc and the size of each segment_alloc. The match rate is
(address matches + segment matches) / (allocs + segment allocs).

Flags:
`

// newFidelityAllocator makes the allocator that fidelity replays; tests
// may replace it.
var newFidelityAllocator fidelity.NewFunc = fidelity.PyTorch

func fidelityCmd(ctx context.Context, e *env, args []string) error {
	var format string
	var mismatches int
	fs := newFlagSet(e, "simulate fidelity", fidelityUsage)
	fs.StringVarP(&format, "format", "f", "table", "output format: table or json")
	fs.IntVar(&mismatches, "mismatches", fidelity.DefaultMaxMismatches, "mismatches to list per snapshot")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if format != "table" && format != "json" {
		return usagef("-f %s: the format is table or json", format)
	}
	if fs.NArg() == 0 {
		return usagef("fidelity: no SNAPSHOT")
	}
	if mismatches <= 0 {
		mismatches = -1
	}
	var results []*fidelity.Result
	for _, path := range fs.Args() {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := fidelityFile(path, mismatches)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if format == "json" {
		return tabular.WriteJSON(e.stdout, results)
	}
	head := []string{"FILE", "ALLOCS", "ADDRESS MATCHES", "SEGMENT ALLOCS", "SEGMENT MATCHES", "MATCH RATE"}
	right := []bool{false, true, true, true, true, true}
	count := tabular.Count
	var rows [][]string
	for _, r := range results {
		rows = append(rows, []string{r.File, count(r.Allocs), count(r.AddressMatches), count(r.SegmentAllocs),
			count(r.SegmentMatches), strconv.FormatFloat(100*r.MatchRate, 'f', 2, 64) + "%"})
	}
	if err := tabular.Layout(e.stdout, head, right, rows); err != nil {
		return err
	}
	for _, r := range results {
		if len(r.Mismatches) == 0 {
			continue
		}
		fmt.Fprintf(e.stdout, "\n%s: first mismatches\n", r.File)
		for _, m := range r.Mismatches {
			fmt.Fprintf(e.stdout, "  %s\n", m)
		}
	}
	return nil
}

// fidelityFile reads and replays one snapshot; its errors name the file.
func fidelityFile(path string, mismatches int) (*fidelity.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := snapshot.Read(f, path)
	if err != nil {
		return nil, err
	}
	r, err := fidelity.Run(s, path, fidelity.Options{New: newFidelityAllocator, MaxMismatches: mismatches})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
