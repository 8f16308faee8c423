package report

import (
	"encoding/csv"
	"fmt"
	"github.com/gpualloc/gpualloc/internal/tabular"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// WriteJSON writes results as a JSON array in the result schema, one object
// per trace × strategy, indented: the report's summary.json and the output
// of simulate -f json.
func WriteJSON(w io.Writer, results []sim.Result) error {
	return tabular.WriteJSON(w, results)
}

// WriteCSV writes results as CSV with a header: one column per field of
// the result schema, named and ordered as in the JSON, an unknown value
// (null in JSON) empty. It is the report's summary.csv and the output of
// simulate -f csv.
func WriteCSV(w io.Writer, results []sim.Result) error {
	return tabular.WriteCSV(w, results)
}

// TimeSeriesHeader is the header of the report's timeseries.csv. Each row
// is one bucket of a replay's [sim.Series]: the events event..last_event
// (indexes from 0) of the trace, at time_us..last_time_us (empty when the
// trace has no timestamps). requested, allocated and reserved are the
// largest values within the bucket, so that no peak is lost, and the *_min
// columns the smallest. While a trace has fewer events than the series has
// buckets, each row is one event; reserved's range then spans the event
// from just before it, as a strategy may give memory back and take it again
// within one event (see [sim.Series]).
var TimeSeriesHeader = []string{
	"trace", "strategy", "event", "time_us", "requested", "allocated", "reserved",
	"last_event", "last_time_us", "requested_min", "allocated_min", "reserved_min",
}

// WriteTimeSeries writes the series of results as CSV, rows in the order
// of results and then of events, with [TimeSeriesHeader]. Results without
// a series have no rows.
func WriteTimeSeries(w io.Writer, results []sim.Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(TimeSeriesHeader); err != nil {
		return err
	}
	num := func(n int64) string { return strconv.FormatInt(n, 10) }
	tm := func(t int64) string {
		if t == traces.NoTime {
			return ""
		}
		return num(t)
	}
	rec := make([]string, len(TimeSeriesHeader))
	for _, r := range results {
		for _, p := range r.Series.All() {
			rec = append(rec[:0], tabular.TextCell(r.Trace), tabular.TextCell(r.Strategy.Spec), num(p.First), tm(p.FirstTimeUS),
				num(p.Requested.Max), num(p.Allocated.Max), num(p.Reserved.Max),
				num(p.Last), tm(p.LastTimeUS),
				num(p.Requested.Min), num(p.Allocated.Min), num(p.Reserved.Min))
			if err := cw.Write(rec); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// A Table is a summary of results for people: column heads, which columns
// are numbers (aligned right), rows of formatted cells, and notes that
// explain marks in the cells and what the rows cannot say.
type Table struct {
	Head  []string
	Right []bool
	Rows  [][]string
	Notes []string
}

// Write lays the table out in aligned columns, as simulate prints it,
// and its notes below it, one a line.
func (t Table) Write(w io.Writer) error {
	if err := tabular.Layout(w, t.Head, t.Right, t.Rows); err != nil {
		return err
	}
	for _, n := range t.Notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

// CapacityMark follows the peak reserved bytes of a result whose strategy
// met the device's capacity (see sim.Result.DeviceFullAllocs).
const CapacityMark = "*"

// SummaryTable formats results as the table simulate prints: trace,
// strategy (its [ShortSpec], or its label in a sweep: see [SweepLabels]),
// the device when some result is one device's ("all" on the rows of sums,
// empty on the rows of traces of one device),
// events, lower bound, peaks, overhead as a ratio (peak reserved / lower
// bound, "1.47×", as in JSON and the figures), fragmentation as a
// percentage, the split of peak reserved (see [SplitHead]), device calls,
// cache hits and OOMs; and,
// when a result was timed (see sim.Config.MeasureTime), the mean time of an
// alloc served from the cache and of one that called the device, and the
// total time of device calls; the memory held when the trace began, when
// some result starts from a recorded state; the offline plan's bytes and the minimum
// capacity when results have them. A peak reserved that depends on the
// capacity carries [CapacityMark]; the notes say what the mark means, and
// which traces end with allocations never freed (not a memory snapshot's,
// whose live allocations at its end were in use when it was taken: see
// sim.Result.MidRun).
func SummaryTable(results []sim.Result) Table {
	t := Table{
		Head: []string{"TRACE", "STRATEGY", "EVENTS", "LOWER BOUND", "PEAK ALLOCATED", "PEAK RESERVED",
			"OVERHEAD", "FRAG", "FREE FRAG", SplitHead, "DEVICE MALLOCS", "DEVICE MALLOC BYTES", "CACHE HITS", "OOMS"},
		Right: []bool{false, false, true, true, true, true, true, true, true, true, true, true, true, true},
	}
	labels := SweepLabels(strategiesOf(results))
	marked := false
	var leaks []string
	seen := map[string]bool{}
	for _, r := range results {
		reserved := gpualloc.FormatSize(r.PeakReservedBytes)
		if r.DeviceFullAllocs > 0 {
			reserved += CapacityMark
			marked = true
		}
		if r.LiveAtEnd > 0 && !r.MidRun && r.Device == nil && !seen[r.Trace] {
			// A snapshot's live allocations at its end were in use when
			// it was taken: no note. Any other trace's were never freed,
			// which the user can check against the program. The row of
			// the whole trace counts every device's, as live_at_end does.
			seen[r.Trace] = true
			them := "them"
			if r.LiveAtEnd == 1 {
				them = "it"
			}
			leaks = append(leaks, fmt.Sprintf("%s: %s (%s) never freed: every strategy's peak counts %s; if the program frees %s, the trace was cut short",
				r.Trace, plural(r.LiveAtEnd, "allocation"), gpualloc.FormatSize(r.LiveBytesAtEnd), them, them))
		}
		t.Rows = append(t.Rows, []string{r.Trace, labels[r.Strategy.Spec], tabular.Count(r.Events),
			gpualloc.FormatSize(r.PeakRequestedBytes), gpualloc.FormatSize(r.PeakAllocatedBytes), reserved,
			overheadCell(r), fragmentation(r), freeFragmentation(r), splitCell(r), tabular.Count(r.DeviceMallocs), gpualloc.FormatSize(r.DeviceMallocBytes),
			share(r.CacheHits, r.Allocs), tabular.Count(r.OOMs)})
	}
	if slices.ContainsFunc(results, func(r sim.Result) bool { return r.Device != nil }) {
		// Rows of single devices (sim.Result.PerDevice): which device, or
		// "all" for the sums; empty on the rows of traces of one device,
		// which have no rows of devices to tell apart.
		several := map[string]bool{}
		for _, r := range results {
			if r.Device != nil {
				several[r.Trace] = true
			}
		}
		t.Head = slices.Insert(t.Head, 2, "DEVICE")
		t.Right = slices.Insert(t.Right, 2, true)
		for i, r := range results {
			d := ""
			switch {
			case r.Device != nil:
				d = strconv.Itoa(*r.Device)
			case several[r.Trace]:
				d = "all"
			}
			t.Rows[i] = slices.Insert(t.Rows[i], 2, d)
		}
	}
	if marked {
		t.Notes = append(t.Notes, CapacityMark+" the strategy met the device's capacity (it released its cache or retried because the device was full): its figures change with --capacity")
	}
	t.Notes = append(t.Notes, leaks...)
	t.Notes = append(t.Notes, splitNote)
	if slices.ContainsFunc(results, func(r sim.Result) bool { return r.DeviceCallNSTotal != nil }) {
		t.Head = append(t.Head, "ALLOC HIT", "ALLOC DEVICE", "DEVICE TIME")
		t.Right = append(t.Right, true, true, true)
		for i, r := range results {
			t.Rows[i] = append(t.Rows[i], meanNS(r.AllocHitNSMean, r.CacheHits),
				meanNS(r.AllocDeviceNSMean, r.Allocs-r.CacheHits-r.OOMs), totalNS(r.DeviceCallNSTotal))
		}
	}
	addStartColumns(&t, results)
	addReferenceColumns(&t, results)
	markRefused(&t, results, labels)
	return t
}

// markRefused empties the figures of the rows of variants that refused
// their parameters (sim.Result.Refused), which were not replayed: "-" in
// every column of figures but OOMS, which says "refused", and a note for
// each that gives its error.
func markRefused(t *Table, results []sim.Result, labels map[string]string) {
	first := slices.Index(t.Head, "EVENTS")
	ooms := slices.Index(t.Head, "OOMS")
	seen := map[string]bool{}
	for i, r := range results {
		if r.Refused == "" {
			continue
		}
		for j := first; j < len(t.Rows[i]); j++ {
			t.Rows[i][j] = "-"
		}
		t.Rows[i][ooms] = "refused"
		note := labels[r.Strategy.Spec] + " refused its settings, not replayed: " + r.Refused
		if !seen[note] {
			seen[note] = true
			t.Notes = append(t.Notes, note)
		}
	}
}

// addStartColumns adds the memory held when the trace began (a trace that
// starts from a recorded state: see traces.Start) when some result
// has any: its bytes and segments, which the device calls do not count.
func addStartColumns(t *Table, results []sim.Result) {
	if !slices.ContainsFunc(results, func(r sim.Result) bool { return r.StartSegments != 0 || r.StartReservedBytes != 0 }) {
		return
	}
	t.Head = append(t.Head, "START RESERVED", "START SEGMENTS")
	t.Right = append(t.Right, true, true)
	for i, r := range results {
		t.Rows[i] = append(t.Rows[i], gpualloc.FormatSize(r.StartReservedBytes), tabular.Count(r.StartSegments))
	}
}

// meanNS formats a mean time in nanoseconds over n calls, "-" when it was
// not measured or there were no calls.
func meanNS(ns *float64, n int64) string {
	if ns == nil || n == 0 {
		return "-"
	}
	return time.Duration(math.Round(*ns)).String()
}

// totalNS formats a total time, rounded to the microsecond.
func totalNS(ns *int64) string {
	if ns == nil {
		return "-"
	}
	return time.Duration(*ns).Round(time.Microsecond).String()
}

// overheadCell is the overhead as the figures write it (see
// overheadRatio). A strategy that ran out of memory did not hold what the
// trace needed: its figure says nothing of its efficiency, and the table
// says "oom".
func overheadCell(r sim.Result) string {
	if r.OOMs > 0 {
		return "oom"
	}
	return overheadRatio(r)
}

// plural formats a count of things: "1 allocation", "2 allocations".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return tabular.Count(n) + " " + thing + "s"
}

// fragmentation is as overheadPercent is, for GMLake's fragmentation.
func fragmentation(r sim.Result) string {
	switch {
	case r.OOMs > 0:
		return "oom"
	case r.PeakReservedBytes == 0:
		return "-"
	}
	return percent(r.Fragmentation)
}

// freeFragmentation is the free space's fragmentation at peak reserved,
// "-" for strategies that do not report their free space.
func freeFragmentation(r sim.Result) string {
	if r.FreeFragmentation == nil {
		return "-"
	}
	return percent(*r.FreeFragmentation)
}

func percent(f float64) string { return fmt.Sprintf("%.1f%%", f*100) }

func share(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return percent(float64(n) / float64(of))
}

// ShortSpec is a strategy's spec without the parameters at their
// defaults, what a person reading a table or a legend needs: "round",
// "round:cutoff=20". It reads the defaults that the strategy carries
// (sim.Strategy.Params); a strategy that carries none (known only by its
// spec) is its spec as it is.
func ShortSpec(s sim.Strategy) string {
	if !slices.ContainsFunc(s.Params, func(p sim.StrategyParam) bool { return p.Default != "" }) {
		return s.Spec
	}
	short := gpualloc.Spec{Name: s.Name}
	for _, p := range s.Params {
		if p.Default == "" || !sameValue(p.Default, p.Value) {
			short.Params = append(short.Params, gpualloc.KeyValue{Key: p.Key, Value: p.Value})
		}
	}
	return short.String()
}

// sameValue reports whether two parameter values are the same, as sizes
// ("4KiB" and "4096") or as text.
func sameValue(a, b string) bool {
	if a == b {
		return true
	}
	x, err1 := gpualloc.ParseSize(a)
	y, err2 := gpualloc.ParseSize(b)
	return err1 == nil && err2 == nil && x == y
}
