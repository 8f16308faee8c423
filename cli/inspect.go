package cli

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"

	"github.com/gpualloc/gpualloc/internal/tabular"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

const inspectUsage = `usage: simulate inspect [flags] TRACE...

Describes each trace: its events, the peak of live requested bytes (the
lower bound any strategy needs), its sizes, streams and devices. A trace of
several devices is described whole (DEVICE all) and then device by device,
each with its own lower bound. A PyTorch snapshot with private memory pools
(CUDA graphs, torch.cuda.MemPool: a segment_pool_id other than (0, 0)) gets
a line per pool of each device: its segments and reserved bytes, and how
many trace entries fall in it (PyTorch's entries do not name their pool;
none means that the trace says nothing of it); JSON lists every pool of a
snapshot under "pools". A PyTorch snapshot gets a line naming the release
that wrote it, as inferred from what it records (the keys of its
allocator_settings, time_us), or torch_npu for a snapshot of Ascend NPUs,
and why (pytorch_version and pytorch_version_why in JSON and CSV): the
release whose rules simulate -s pytorch replays it with. With no TRACE it describes the bundled sample
traces. A TRACE is read as simulate reads it (simulate -h): a file in any of
the four formats, - for standard input, or the name of a bundled trace (a
file of that name wins).

Flags:
`

// traceInfo describes a trace, for inspect.
//
// A trace of several devices is described whole and then device by device:
// Device is nil on the first, the index of the device on the others (left
// out of JSON when nil), whose figures are that device's alone (Skipped,
// counted for the whole trace, is 0 there; AllocFailures are the device's
// own, and add up to the whole's).
type traceInfo struct {
	Trace         string `json:"trace"`
	Device        *int   `json:"device,omitempty"`
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
	// PyTorchVersion is the release of PyTorch that wrote a snapshot, as
	// inferred from what it records ("2.8"), or "torch_npu" for a snapshot
	// of Ascend NPUs; PyTorchVersionWhy says what shows it. Both are on
	// a snapshot's first row alone, "" elsewhere.
	PyTorchVersion    string `json:"pytorch_version,omitempty"`
	PyTorchVersionWhy string `json:"pytorch_version_why,omitempty"`
	// Pools are the memory pools of a PyTorch snapshot, on its first row
	// (see traces.PoolInfo); not in CSV.
	Pools []poolInfo `json:"pools,omitempty"`
}

// poolInfo is a memory pool of a PyTorch snapshot's device.
type poolInfo struct {
	Device        int       `json:"device"`
	Pool          [2]uint64 `json:"pool"` // segment_pool_id; (0, 0) for the default pools
	Segments      int64     `json:"segments"`
	ReservedBytes int64     `json:"reserved_bytes"`
	TraceEntries  int64     `json:"trace_entries"`
}

func inspectCmd(ctx context.Context, e *env, args []string) error {
	var format, progressMode string
	var lenient bool
	fs := newFlagSet(e, "simulate inspect", inspectUsage)
	fs.StringVarP(&format, "format", "f", "table", "output format: table, csv or json")
	fs.BoolVar(&lenient, "lenient", false, "skip bad events of a trace, count them and go on")
	addReadProgress(fs, &progressMode)
	addTempDir(fs, e)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkFormat(format); err != nil {
		return err
	}
	inputs, err := readInputs(ctx, e, fs.Args(), lenient, progressMode)
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
		infos = append(infos, info...)
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
	perDevice := slices.ContainsFunc(infos, func(i traceInfo) bool { return i.Device != nil })
	if perDevice {
		head = slices.Insert(head, 1, "DEVICE")
		right = slices.Insert(right, 1, true)
	}
	count := tabular.Count
	var rows [][]string
	for _, i := range infos {
		dur := "-"
		if i.DurationUS > 0 {
			dur = duration(i.DurationUS)
		}
		row := []string{i.Trace, i.Format, count(i.Events), count(i.Allocs), count(i.Frees),
			gpualloc.FormatSize(i.PeakLiveBytes), count(i.PeakLive), count(i.DistinctSizes),
			gpualloc.FormatSize(i.MinSize), gpualloc.FormatSize(i.MaxSize), count(i.Streams), count(i.Devices), dur}
		if perDevice {
			d := "all"
			if i.Device != nil {
				d = strconv.Itoa(*i.Device)
			}
			row = slices.Insert(row, 1, d)
		}
		rows = append(rows, row)
	}
	if err := tabular.Layout(e.stdout, head, right, rows); err != nil {
		return err
	}
	for _, i := range infos {
		switch {
		case i.PyTorchVersion == "torch_npu":
			fmt.Fprintf(e.stdout, "%s: written by torch_npu: %s\n", i.Trace, i.PyTorchVersionWhy)
		case i.PyTorchVersion != "":
			fmt.Fprintf(e.stdout, "%s: PyTorch %s: %s\n", i.Trace, i.PyTorchVersion, i.PyTorchVersionWhy)
		}
	}
	return writePools(e.stdout, infos)
}

// writePools writes a line per memory pool of the snapshots that have a
// private pool: its segments and reserved bytes, and whether the trace says
// anything of it.
func writePools(w io.Writer, infos []traceInfo) error {
	for _, i := range infos {
		if !slices.ContainsFunc(i.Pools, func(p poolInfo) bool { return p.Pool != [2]uint64{} }) {
			continue
		}
		for _, p := range i.Pools {
			what := "default pools"
			if p.Pool != [2]uint64{} {
				what = fmt.Sprintf("private pool (%d, %d)", p.Pool[0], p.Pool[1])
			}
			entries := tabular.Count(p.TraceEntries) + " trace entries"
			switch p.TraceEntries {
			case 0:
				entries = "no trace entry: the trace says nothing of it"
			case 1:
				entries = "1 trace entry"
			}
			if _, err := fmt.Fprintf(w, "%s: device %d: %s: %s, %s reserved; %s\n", i.Trace, p.Device, what,
				plural(p.Segments, "segment"), gpualloc.FormatSize(p.ReservedBytes), entries); err != nil {
				return err
			}
		}
	}
	return nil
}

// inspect reads a trace through and describes it, and, for a trace of
// several devices, each device alone (see infoRows). Its memory grows with
// the distinct sizes, streams and devices, not with the trace's length.
func inspect(in *input) ([]traceInfo, error) {
	r, c, err := in.open()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	all := newInfoAcc(in.name, nil)
	if f, ok := r.(traces.FileReader); ok {
		all.info.Format = f.Format()
	}
	var devs []*infoAcc // by device index
	for r.Scan() {
		ev := r.Event()
		all.add(&ev)
		d := int(ev.Device)
		if d >= len(devs) {
			devs = append(devs, make([]*infoAcc, d+1-len(devs))...)
		}
		if devs[d] == nil {
			index := d
			devs[d] = newInfoAcc(in.name, &index)
			devs[d].info.Format = all.info.Format
		}
		devs[d].add(&ev)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if f, ok := r.(traces.FileReader); ok {
		all.info.Skipped = f.Skipped()
		all.info.AllocFailures = f.AllocFailures()
	}
	if f, ok := r.(interface{ DeviceAllocFailures(int32) int64 }); ok {
		for d, acc := range devs {
			if acc != nil {
				acc.info.AllocFailures = f.DeviceAllocFailures(int32(d))
			}
		}
	}
	out := []traceInfo{all.done()}
	if sr, ok := r.(interface{ Snapshot() *snapshot.Snapshot }); ok && sr.Snapshot() != nil {
		s := sr.Snapshot()
		out[0].PyTorchVersion, out[0].PyTorchVersionWhy = s.Release()
	}
	if pr, ok := r.(interface{ Pools() []traces.PoolInfo }); ok {
		for _, p := range pr.Pools() {
			out[0].Pools = append(out[0].Pools, poolInfo{p.Device, p.Pool, p.Segments, p.ReservedBytes, p.Entries})
		}
	}
	if out[0].Devices > 1 {
		for _, d := range devs {
			if d != nil {
				out = append(out, d.done())
			}
		}
	}
	return out, nil
}

// infoAcc gathers the description of a trace, or of one of its devices.
type infoAcc struct {
	info            traceInfo
	sizes           map[int64]struct{}
	streams         map[uint64]struct{}
	devices         map[int32]struct{}
	live, liveBytes int64
	// total sums the sizes of every allocation in 128 bits, hi and lo, so
	// that the mean is exact however many large allocations there are.
	totalHi, totalLo uint64
	first, last      int64
}

func newInfoAcc(name string, device *int) *infoAcc {
	return &infoAcc{info: traceInfo{Trace: name, Device: device}, sizes: map[int64]struct{}{}, streams: map[uint64]struct{}{},
		devices: map[int32]struct{}{}, first: traces.NoTime, last: traces.NoTime}
}

func (a *infoAcc) add(ev *traces.Event) {
	info := &a.info
	info.Events++
	if ev.TimeUS != traces.NoTime {
		if a.first == traces.NoTime {
			a.first = ev.TimeUS
		}
		a.last = ev.TimeUS
	}
	if ev.Op == traces.OpRelease {
		info.Releases++
		return
	}
	if ev.Op == traces.OpFree {
		info.Frees++
		a.live--
		a.liveBytes -= ev.Size
		return
	}
	info.Allocs++
	a.live++
	a.liveBytes += ev.Size
	var carry uint64
	a.totalLo, carry = bits.Add64(a.totalLo, uint64(ev.Size), 0)
	a.totalHi += carry
	info.PeakLive = max(info.PeakLive, a.live)
	info.PeakLiveBytes = max(info.PeakLiveBytes, a.liveBytes)
	a.sizes[ev.Size] = struct{}{}
	a.streams[ev.Stream] = struct{}{}
	a.devices[ev.Device] = struct{}{}
	if info.MinSize == 0 || ev.Size < info.MinSize {
		info.MinSize = ev.Size
	}
	info.MaxSize = max(info.MaxSize, ev.Size)
}

func (a *infoAcc) done() traceInfo {
	info := a.info
	info.LiveAtEnd = a.live
	info.DistinctSizes = int64(len(a.sizes))
	info.Streams = int64(len(a.streams))
	info.Devices = int64(len(a.devices))
	if info.Allocs > 0 {
		// Sizes are below 2^63, so totalHi < Allocs and the quotient fits.
		mean, _ := bits.Div64(a.totalHi, a.totalLo, uint64(info.Allocs))
		info.MeanSize = int64(mean)
	}
	if a.first != traces.NoTime {
		info.DurationUS = a.last - a.first
	}
	return info
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
