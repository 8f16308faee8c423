package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/internal/tabular"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/tune"
)

const tuneUsage = `usage: simulate tune [flags] TRACE

Searches PyTorch's allocator settings (expandable_segments,
max_split_size_mb, roundup_power2_divisions and, with --memory-fraction,
garbage_collection_threshold, and their combinations) for the lowest peak
of reserved memory with which the pytorch strategy replays TRACE without
running out of memory on a device of --capacity bytes. The search is coarse
to fine: a grid first, then each setting's neighbours from the best, then
max_split_size_mb to the MiB; the trace is decoded once and the settings of
each round replay in parallel.

It prints the line to paste, PYTORCH_CUDA_ALLOC_CONF=... (for a snapshot
that torch_npu wrote, which replays with torch_npu's rules,
PYTORCH_NPU_ALLOC_CONF=...; JSON: paste), with --memory-fraction the call
that sets the fraction in the program, which PyTorch reads from no
variable (torch.cuda.set_per_process_memory_fraction(F); JSON:
paste_call), and when other
values of max_split_size_mb tried give the same peak, their range (JSON:
max_split_size_mb_range, [lowest, highest]); then the figures it
gives against PyTorch's defaults and, for a PyTorch snapshot that records
other settings, against those ("as recorded": the run's own, named on
standard error), and the Pareto front of the settings
tried: those that no other beats on peak reserved memory without making
more device allocations. Replaying TRACE with that value
(PYTORCH_CUDA_ALLOC_CONF=... simulate -s pytorch TRACE; -s
pytorch:device=npu for torch_npu's) gives exactly the same figures. On a
trace of several devices each device has the capacity,
and the peaks are the largest device's (the figures of simulate's row of
that device), never their sum.

TRACE is a file, or the name of a bundled trace (dynamic, training, ...).
A PyTorch snapshot is replayed from the allocator's state when its trace
began, as simulate replays it. Without --capacity each device is the one
the trace records, as in simulate (a PyTorch snapshot with an
out-of-memory error, one that simulate --snapshot wrote, or a trace that
simulate convert made of one), else 80GiB.

Flags:
`

// tuneResult is tune's output, -f json's object. Its peaks are each
// device's, the largest of a trace of several devices (Devices), each of
// capacity CapacityBytes: never their sum.
type tuneResult struct {
	Trace string `json:"trace"`
	// Paste is the line to set: Conf in the variable that the allocator
	// replayed reads (PYTORCH_NPU_ALLOC_CONF for torch_npu's, else
	// PYTORCH_CUDA_ALLOC_CONF; tune.Report.Line).
	Paste string `json:"paste"`
	// PasteCall is the Python call that sets the memory fraction of the
	// replays beside Paste (torch.cuda.set_per_process_memory_fraction(F),
	// torch.npu's for torch_npu's; tune.Report.Call), with
	// --memory-fraction; PyTorch reads no fraction from the variable.
	PasteCall                string      `json:"paste_call,omitempty"`
	Conf                     string      `json:"conf"`
	PeakReservedBytes        int64       `json:"peak_reserved_bytes"`
	DefaultPeakReservedBytes int64       `json:"default_peak_reserved_bytes"`
	DeviceMallocs            int64       `json:"device_mallocs"`
	DefaultDeviceMallocs     int64       `json:"default_device_mallocs"`
	PeakRequestedBytes       int64       `json:"peak_requested_bytes"`
	CapacityBytes            int64       `json:"capacity_bytes"`
	MemoryFraction           float64     `json:"memory_fraction"`
	Tried                    int         `json:"tried"`
	Front                    []tunePoint `json:"front"`
	DefaultOOMs              int64       `json:"default_ooms"`
	// The baseline of the settings the trace records, when they are not
	// PyTorch's defaults (a PyTorch snapshot's allocator_settings).
	RecordedConf              string `json:"recorded_conf,omitempty"`
	RecordedPeakReservedBytes int64  `json:"recorded_peak_reserved_bytes,omitempty"`
	RecordedDeviceMallocs     int64  `json:"recorded_device_mallocs,omitempty"`
	RecordedOOMs              int64  `json:"recorded_ooms,omitempty"`
	// MaxSplitSizeMBRange is the plateau of max_split_size_mb around
	// Conf's, [lowest, highest], when other values tried give the same
	// peaks (tune.Report.SplitRange); Conf's is one the ranking picked.
	MaxSplitSizeMBRange []int64 `json:"max_split_size_mb_range,omitempty"`
	// Devices is the number of devices of the trace.
	Devices int `json:"-"`
}

// tunePoint is a setting of the Pareto front.
type tunePoint struct {
	Conf              string `json:"conf"`
	PeakReservedBytes int64  `json:"peak_reserved_bytes"`
	DeviceMallocs     int64  `json:"device_mallocs"`
}

func tuneCmd(ctx context.Context, e *env, args []string) error {
	var format, capacityText, progressMode string
	var opts tune.Options
	var lenient bool
	fs := newFlagSet(e, "simulate tune", tuneUsage)
	fs.StringVar(&capacityText, "capacity", "", "device `SIZE` (bytes, or units KiB, MiB, GiB, ... KB, MB, GB, ...; default: the size the trace records, else 80GiB)")
	fs.Float64Var(&opts.MemoryFraction, "memory-fraction", 0, "replay under torch.cuda.set_per_process_memory_fraction(`F`), F in (0, 1], and search garbage_collection_threshold too")
	fs.StringVarP(&format, "format", "f", "table", "output format: table or json")
	fs.IntVarP(&opts.Workers, "jobs", "j", 0, "replays to run at once (default: the number of cores)")
	fs.BoolVar(&lenient, "lenient", false, "skip bad events of the trace, count them and go on")
	addReadProgress(fs, &progressMode)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if format != "table" && format != "json" {
		return usagef("--format %q: want table or json", format)
	}
	var err error
	if capacityText == "" {
		opts.Capacity = virtual.DefaultCapacity
	} else if opts.Capacity, err = parseSizeFlag("--capacity", capacityText); err != nil {
		return err
	}
	if fs.Changed("memory-fraction") && !(opts.MemoryFraction > 0 && opts.MemoryFraction <= 1) {
		return usagef("--memory-fraction %v: want a number in (0, 1]; leave the flag out for no fraction", opts.MemoryFraction)
	}
	if opts.Workers < 0 {
		return usagef("--jobs %d: want a positive number", opts.Workers)
	}
	if fs.NArg() != 1 {
		return usagef("tune: want one TRACE, have %d", fs.NArg())
	}
	inputs, err := readInputs(ctx, e, fs.Args(), lenient, progressMode)
	if err != nil {
		return err
	}
	in := inputs[0]
	events, recorded, start, err := readEvents(in)
	if err != nil {
		return err
	}
	opts.Start = start
	if !fs.Changed("capacity") && recorded != nil {
		// Each device replays on the memory the trace records for it,
		// as simulate replays it.
		opts.Capacity, opts.Memory = 0, recorded
	}
	rep, err := tune.Run(ctx, in.name, events, opts)
	if err != nil {
		return err
	}
	if rep.Best.Result.OOMs > 0 {
		conf := rep.Line(rep.Best.Setting)
		if rep.Best.Setting.Conf() == "" {
			conf = "PyTorch's defaults"
		}
		device := gpualloc.FormatSize(rep.Capacity)
		if rep.MemoryFraction > 0 {
			device += fmt.Sprintf(" under memory fraction %g", rep.MemoryFraction)
		}
		return fmt.Errorf("%s: every setting tried runs out of memory on a device of %s (the fewest OOMs, %d, with %s)",
			in.name, device, rep.Best.Result.OOMs, conf)
	}
	res := tuneResult{
		Trace: rep.Trace, Paste: rep.Line(rep.Best.Setting), PasteCall: rep.Call(), Conf: rep.Best.Setting.Conf(),
		PeakReservedBytes: tune.PeakReserved(rep.Best.Result), DefaultPeakReservedBytes: tune.PeakReserved(rep.Default.Result),
		DeviceMallocs: rep.Best.Result.DeviceMallocs, DefaultDeviceMallocs: rep.Default.Result.DeviceMallocs,
		DefaultOOMs: rep.Default.Result.OOMs, PeakRequestedBytes: tune.PeakRequested(rep.Best.Result),
		CapacityBytes: rep.Capacity, MemoryFraction: rep.MemoryFraction, Tried: rep.Tried,
		Devices: len(rep.Best.Result.Devices),
	}
	if rep.Recorded != nil {
		res.RecordedConf = rep.RecordedConf
		res.RecordedPeakReservedBytes = tune.PeakReserved(rep.Recorded.Result)
		res.RecordedDeviceMallocs = rep.Recorded.Result.DeviceMallocs
		res.RecordedOOMs = rep.Recorded.Result.OOMs
		fmt.Fprintf(e.stderr, "simulate: %s: the \"as recorded\" baseline replays with the allocator settings that it records (%s)\n", in.name, rep.RecordedConf)
	}
	if rep.SplitRange != [2]int64{} {
		res.MaxSplitSizeMBRange = rep.SplitRange[:]
	}
	for _, t := range rep.Front {
		res.Front = append(res.Front, tunePoint{t.Setting.Conf(), tune.PeakReserved(t.Result), t.Result.DeviceMallocs})
	}
	if format == "json" {
		return tabular.WriteJSON(e.stdout, res)
	}
	writeTune(e.stdout, res)
	if in.skipped > 0 {
		fmt.Fprintf(e.stderr, "simulate: %s: skipped %s (the first: %s)\n", in.name, plural(in.skipped, "bad event"), in.firstSkip)
	}
	return nil
}

// readEvents decodes the trace of in, and returns with its events the
// memory of its devices that it records (sim.CapacityReporter), nil when
// it records none; and the state the trace starts from (traces.Start),
// nil for none.
func readEvents(in *input) ([]traces.Event, sim.CapacityReporter, *traces.Start, error) {
	r, c, err := in.open()
	if err != nil {
		return nil, nil, nil, err
	}
	events, err := traces.ReadAll(r)
	if c != nil {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	return events, recordedMemory(r, events), traces.StartOf(r), err
}

// recordedMemory returns r as the sim.CapacityReporter of the devices of
// events when it records the memory of one of them, else nil.
func recordedMemory(r traces.Reader, events []traces.Event) sim.CapacityReporter {
	cr, ok := r.(sim.CapacityReporter)
	if !ok {
		return nil
	}
	seen := map[int32]bool{}
	for i := range events {
		d := events[i].Device
		if !seen[d] {
			seen[d] = true
			if cr.DeviceCapacity(int(d)) > 0 {
				return cr
			}
		}
	}
	return nil
}

// writeTune writes tune's result as text.
func writeTune(w io.Writer, r tuneResult) {
	fmt.Fprintln(w, r.Paste)
	if r.PasteCall != "" {
		fmt.Fprintf(w, "  plus %s in the program\n", r.PasteCall)
	}
	if r.Conf == "" {
		fmt.Fprintln(w, "  (PyTorch's defaults are the best setting found)")
	}
	if len(r.MaxSplitSizeMBRange) == 2 {
		fmt.Fprintf(w, "  max_split_size_mb from %d to %d gives the same peak reserved (every value tried in that range)\n",
			r.MaxSplitSizeMBRange[0], r.MaxSplitSizeMBRange[1])
	}
	if r.Devices > 1 {
		fmt.Fprintf(w, "\n%s, on %d devices of %s each, %d settings tried (peaks: the largest device's):\n", r.Trace, r.Devices, gpualloc.FormatSize(r.CapacityBytes), r.Tried)
	} else {
		fmt.Fprintf(w, "\n%s, on a device of %s, %d settings tried:\n", r.Trace, gpualloc.FormatSize(r.CapacityBytes), r.Tried)
	}
	rows := [][]string{
		{"this setting", gpualloc.FormatSize(r.PeakReservedBytes), tabular.Count(r.DeviceMallocs), "0"},
		{"PyTorch's defaults", gpualloc.FormatSize(r.DefaultPeakReservedBytes), tabular.Count(r.DefaultDeviceMallocs), tabular.Count(r.DefaultOOMs)},
	}
	if r.RecordedConf != "" {
		rows = append(rows, []string{"as recorded (" + r.RecordedConf + ")", gpualloc.FormatSize(r.RecordedPeakReservedBytes),
			tabular.Count(r.RecordedDeviceMallocs), tabular.Count(r.RecordedOOMs)})
	}
	rows = append(rows, []string{"lower bound (peak live bytes)", gpualloc.FormatSize(r.PeakRequestedBytes), "", ""})
	layoutIndented(w, []string{"", "PEAK RESERVED", "DEVICE MALLOCS", "OOMS"}, []bool{false, true, true, true}, rows)
	if r.DefaultOOMs == 0 && r.PeakReservedBytes < r.DefaultPeakReservedBytes {
		fmt.Fprintf(w, "  peak reserved: %.1f%% less than with PyTorch's defaults\n", 100*(1-float64(r.PeakReservedBytes)/float64(r.DefaultPeakReservedBytes)))
	}
	if r.RecordedConf != "" && r.RecordedOOMs == 0 && r.PeakReservedBytes < r.RecordedPeakReservedBytes {
		fmt.Fprintf(w, "  peak reserved: %.1f%% less than with the settings recorded\n", 100*(1-float64(r.PeakReservedBytes)/float64(r.RecordedPeakReservedBytes)))
	}
	fmt.Fprintf(w, "\nPareto front, peak reserved against device mallocs (no OOM):\n")
	rows = rows[:0]
	for _, p := range r.Front {
		conf := p.Conf
		if conf == "" {
			conf = "(PyTorch's defaults)"
		}
		rows = append(rows, []string{gpualloc.FormatSize(p.PeakReservedBytes), tabular.Count(p.DeviceMallocs), conf})
	}
	variable, _, _ := strings.Cut(r.Paste, "=")
	layoutIndented(w, []string{"PEAK RESERVED", "DEVICE MALLOCS", variable}, []bool{true, true, false}, rows)
}

// layoutIndented lays a table out as tabular.Layout does, each line two
// spaces in.
func layoutIndented(w io.Writer, head []string, right []bool, rows [][]string) {
	var b strings.Builder
	tabular.Layout(&b, head, right, rows)
	for line := range strings.Lines(b.String()) {
		fmt.Fprintln(w, "  "+strings.TrimRight(line, " \n"))
	}
}
