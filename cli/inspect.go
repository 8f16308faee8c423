package cli

import (
	"context"
	"fmt"
	"github.com/gpualloc/gpualloc/internal/tabular"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

const inspectUsage = `usage: simulate inspect [flags] TRACE...

Describes each trace: its events, the peak of live requested bytes (the
lower bound any strategy needs), its sizes, streams and devices. With no
TRACE it describes the bundled sample traces. A TRACE is read as simulate
reads it (simulate -h): a file in any of the four formats, - for standard
input, or the name of a bundled trace (a file of that name wins).

Flags:
`

// traceInfo describes a trace, for inspect.
type traceInfo struct {
	Trace         string `json:"trace"`
	Format        string `json:"format"`
	Events        int64  `json:"events"`
	Allocs        int64  `json:"allocs"`
	Frees         int64  `json:"frees"`
	Releases      int64  `json:"releases,omitempty"`
	PeakLiveBytes int64  `json:"peak_live_bytes"`
	PeakLive      int64  `json:"peak_live"` // most allocations live at once
	LiveAtEnd     int64  `json:"live_at_end"`
	DistinctSizes int64  `json:"distinct_sizes"`
	MinSize       int64  `json:"min_size"`
	MaxSize       int64  `json:"max_size"`
	MeanSize      int64  `json:"mean_size"`
	Streams       int64  `json:"streams"`
	Devices       int64  `json:"devices"`
	DurationUS    int64  `json:"duration_us"` // last time_us - first; 0 without timestamps
	Skipped       int64  `json:"skipped"`
	AllocFailures int64  `json:"alloc_failures"` // failed allocations the trace records, not events
}

func inspectCmd(ctx context.Context, e *env, args []string) error {
	var format string
	var lenient bool
	fs := newFlagSet(e, "simulate inspect", inspectUsage)
	fs.StringVarP(&format, "format", "f", "table", "output format: table, csv or json")
	fs.BoolVar(&lenient, "lenient", false, "skip bad events of a trace, count them and go on")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	inputs, err := traceInputs(fs.Args(), e.stdin, traces.Options{Lenient: lenient})
	if err != nil {
		return err
	}
	var infos []traceInfo
	for _, in := range inputs {
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := inspect(in)
		if err != nil {
			return err
		}
		infos = append(infos, info)
	}
	switch format {
	case "json":
		return tabular.WriteJSON(e.stdout, infos)
	case "csv":
		return tabular.WriteCSV(e.stdout, infos)
	}
	head := []string{"TRACE", "FORMAT", "EVENTS", "ALLOCS", "FREES", "PEAK LIVE", "PEAK LIVE ALLOCS",
		"DISTINCT SIZES", "MIN SIZE", "MAX SIZE", "STREAMS", "DEVICES", "DURATION"}
	right := []bool{false, false, true, true, true, true, true, true, true, true, true, true, true}
	count := tabular.Count
	var rows [][]string
	for _, i := range infos {
		dur := "-"
		if i.DurationUS > 0 {
			dur = duration(i.DurationUS)
		}
		rows = append(rows, []string{i.Trace, i.Format, count(i.Events), count(i.Allocs), count(i.Frees),
			gpualloc.FormatSize(i.PeakLiveBytes), count(i.PeakLive), count(i.DistinctSizes),
			gpualloc.FormatSize(i.MinSize), gpualloc.FormatSize(i.MaxSize), count(i.Streams), count(i.Devices), dur})
	}
	return tabular.Layout(e.stdout, head, right, rows)
}

// inspect reads a trace through and describes it. Its memory grows with the
// distinct sizes, streams and devices, not with the trace's length.
func inspect(in *input) (traceInfo, error) {
	r, c, err := in.open()
	if err != nil {
		return traceInfo{}, err
	}
	defer c.Close()
	info := traceInfo{Trace: in.name}
	if f, ok := r.(traces.FileReader); ok {
		info.Format = f.Format()
	}
	sizes := map[int64]struct{}{}
	streams := map[uint64]struct{}{}
	devices := map[int32]struct{}{}
	var live, liveBytes, total int64
	first, last := traces.NoTime, traces.NoTime
	for r.Scan() {
		ev := r.Event()
		info.Events++
		if ev.TimeUS != traces.NoTime {
			if first == traces.NoTime {
				first = ev.TimeUS
			}
			last = ev.TimeUS
		}
		if ev.Op == traces.OpRelease {
			info.Releases++
			continue
		}
		if ev.Op == traces.OpFree {
			info.Frees++
			live--
			liveBytes -= ev.Size
			continue
		}
		info.Allocs++
		live++
		liveBytes += ev.Size
		total += ev.Size
		info.PeakLive = max(info.PeakLive, live)
		info.PeakLiveBytes = max(info.PeakLiveBytes, liveBytes)
		sizes[ev.Size] = struct{}{}
		streams[ev.Stream] = struct{}{}
		devices[ev.Device] = struct{}{}
		if info.MinSize == 0 || ev.Size < info.MinSize {
			info.MinSize = ev.Size
		}
		info.MaxSize = max(info.MaxSize, ev.Size)
	}
	if err := r.Err(); err != nil {
		return traceInfo{}, err
	}
	if f, ok := r.(traces.FileReader); ok {
		info.Skipped = f.Skipped()
		info.AllocFailures = f.AllocFailures()
	}
	info.LiveAtEnd = live
	info.DistinctSizes = int64(len(sizes))
	info.Streams = int64(len(streams))
	info.Devices = int64(len(devices))
	if info.Allocs > 0 {
		info.MeanSize = total / info.Allocs
	}
	if first != traces.NoTime {
		info.DurationUS = last - first
	}
	return info, nil
}

// duration formats microseconds for people: "90 µs", "12.5 ms", "2.84 s".
func duration(us int64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%d µs", us)
	case us < 1e6:
		return fmt.Sprintf("%.3g ms", float64(us)/1e3)
	case us < 1e9:
		return fmt.Sprintf("%.3g s", float64(us)/1e6)
	}
	return fmt.Sprintf("%.0f s", float64(us)/1e6)
}
