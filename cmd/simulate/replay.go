package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

const replayUsage = `usage: simulate [flags] [TRACE...]

Replays each trace (native CSV, plain or gzip) through each strategy on a
virtual device and reports peak live, allocated and reserved bytes, overhead
against the lower bound (the peak of live requested bytes), fragmentation and
device calls. With no TRACE it replays the bundled sample traces.

Strategies: every -s spec; else the one the environment chooses
(GPUALLOC_POOL_TYPE, then MXNET_GPU_MEM_POOL_TYPE); else every built-in
strategy. 'simulate strategies' lists them with their parameters.

Commands: inspect, convert, gen, strategies ('simulate COMMAND -h').

Flags:
`

// replayFlags are the flags of a replay.
type replayFlags struct {
	strategies []string
	backend    string
	capacity   string
	format     string
	jobs       int
	lenient    bool
}

func replayCmd(ctx context.Context, e *env, args []string) error {
	var f replayFlags
	fs := newFlagSet(e, "simulate", replayUsage)
	fs.StringArrayVarP(&f.strategies, "strategy", "s", nil, "strategy `SPEC`, as round or round:cutoff=20 (repeatable; all = every registered strategy)")
	fs.StringVarP(&f.backend, "backend", "b", "sim", "backend: sim (the virtual device)")
	fs.StringVar(&f.capacity, "capacity", "80GiB", "virtual device `SIZE` (bytes, or units KiB, MiB, GiB, ... KB, MB, GB, ...)")
	fs.StringVarP(&f.format, "format", "f", "table", "output format: table, csv or json")
	fs.IntVarP(&f.jobs, "jobs", "j", 0, "replays to run at once (default: the number of cores)")
	fs.BoolVar(&f.lenient, "lenient", false, "skip bad events of a trace, count them and go on")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkFormat(f.format); err != nil {
		return err
	}
	if f.backend != "sim" {
		return usagef("unknown backend %q (known: sim)", f.backend)
	}
	capacity, err := gpualloc.ParseSize(f.capacity)
	if err != nil || capacity <= 0 {
		return usagef("--capacity %q: want a positive size such as 80GiB", f.capacity)
	}
	if f.jobs < 0 {
		return usagef("--jobs %d: want a positive number", f.jobs)
	}
	strategies, err := chooseStrategies(f.strategies, e.getenv, capacity)
	if err != nil {
		return err
	}
	inputs, err := traceInputs(fs.Args(), traces.Options{Lenient: f.lenient})
	if err != nil {
		return err
	}

	var jobs []sim.Job
	for _, in := range inputs {
		for _, p := range strategies {
			jobs = append(jobs, sim.Job{
				Open: in.open,
				Config: sim.Config{
					Trace:         in.name,
					Params:        p,
					Backend:       f.backend,
					Capacity:      capacity,
					SeriesBuckets: -1,
				},
			})
		}
	}
	out := sim.RunAll(ctx, jobs, f.jobs)

	var results []sim.Result
	var firstErr error
	for _, o := range out {
		if o.Err != nil {
			if firstErr == nil {
				firstErr = o.Err
			}
			continue
		}
		results = append(results, o.Result)
	}
	if len(results) > 0 {
		if err := writeResults(e.stdout, f.format, results); err != nil {
			return err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if f.lenient {
		for _, in := range inputs {
			if in.skipped > 0 {
				fmt.Fprintf(e.stderr, "simulate: %s: skipped %s (the first: %s)\n", in.name, plural(in.skipped, "bad event"), in.firstSkip)
			}
		}
	}
	return nil
}

// chooseStrategies resolves the -s specs, or the environment's choice, or
// every registered strategy, and checks that each opens.
func chooseStrategies(specs []string, getenv func(string) (string, bool), capacity int64) ([]*gpualloc.Params, error) {
	var chosen []*gpualloc.Params
	seen := map[string]bool{}
	add := func(p *gpualloc.Params) error {
		dev, err := sim.NewDevice(0, capacity)
		if err != nil {
			return err
		}
		if _, err := p.Open(dev); err != nil {
			return usagef("%v", err)
		}
		if !seen[p.String()] {
			seen[p.String()] = true
			chosen = append(chosen, p)
		}
		return nil
	}
	var names []string
	for _, s := range specs {
		if strings.EqualFold(strings.TrimSpace(s), "all") {
			names = append(names, gpualloc.Names()...)
			continue
		}
		names = append(names, s)
	}
	if len(specs) == 0 {
		if envSet(getenv, gpualloc.EnvPoolType) || envSet(getenv, gpualloc.EnvMXNetPoolType) {
			sel, err := gpualloc.Select("", getenv)
			if err != nil {
				return nil, usagef("%v", err)
			}
			return chosen, add(sel.Params)
		}
		names = gpualloc.Names()
	}
	for _, s := range names {
		sel, err := gpualloc.Select(s, getenv)
		if err != nil {
			return nil, usagef("%v", err)
		}
		if err := add(sel.Params); err != nil {
			return nil, err
		}
	}
	return chosen, nil
}

func envSet(getenv func(string) (string, bool), name string) bool {
	v, ok := getenv(name)
	return ok && strings.TrimSpace(v) != ""
}

// shortSpec is a full spec without the parameters at their defaults: what
// a person reading a table needs ("round", "round:cutoff=20").
func shortSpec(full string) string {
	sp, err := gpualloc.ParseSpec(full)
	if err != nil {
		return full
	}
	s, err := gpualloc.Lookup(sp.Name)
	if err != nil {
		return full
	}
	defaults := map[string]string{}
	for _, p := range s.Params {
		defaults[p.Name] = p.Default
	}
	short := gpualloc.Spec{Name: sp.Name}
	for _, kv := range sp.Params {
		if d, ok := defaults[kv.Key]; !ok || !sameValue(d, kv.Value) {
			short.Params = append(short.Params, kv)
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

func writeResults(w io.Writer, format string, results []sim.Result) error {
	switch format {
	case "json":
		return writeJSON(w, results)
	case "csv":
		return writeCSV(w, results)
	}
	t := newTable("TRACE", "STRATEGY", ">EVENTS", ">LOWER BOUND", ">PEAK ALLOCATED", ">PEAK RESERVED",
		">OVERHEAD", ">FRAG", ">FREE FRAG", ">DEVICE MALLOCS", ">DEVICE MALLOC BYTES", ">CACHE HITS", ">OOMS")
	for _, r := range results {
		t.add(r.Trace, shortSpec(r.Strategy), count(r.Events),
			gpualloc.FormatSize(r.PeakRequestedBytes), gpualloc.FormatSize(r.PeakAllocatedBytes), gpualloc.FormatSize(r.PeakReservedBytes),
			overhead(r), fragmentation(r), freeFragmentation(r), count(r.DeviceMallocs), gpualloc.FormatSize(r.DeviceMallocBytes),
			share(r.CacheHits, r.Allocs), count(r.OOMs))
	}
	return t.write(w)
}

// overhead is the reserved memory above the lower bound, as a percentage.
// A strategy that ran out of memory did not hold what the trace needed:
// its figure says nothing of its efficiency, and the table says "oom".
func overhead(r sim.Result) string {
	switch {
	case r.OOMs > 0:
		return "oom"
	case r.PeakRequestedBytes == 0:
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", (r.Overhead-1)*100)
}

// fragmentation is as overhead is, for GMLake's fragmentation.
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

// count formats n with thousands separators: 1,234,567.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeCSV writes rows of a struct type as CSV, one column per field with
// a JSON name, named and ordered as in the JSON output.
func writeCSV[T any](w io.Writer, rows []T) error {
	cw := csv.NewWriter(w)
	typ := reflect.TypeFor[T]()
	var head []string
	var fields []int
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || !typ.Field(i).IsExported() {
			continue
		}
		head = append(head, name)
		fields = append(fields, i)
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	rec := make([]string, len(fields))
	for _, r := range rows {
		v := reflect.ValueOf(r)
		for j, i := range fields {
			f := v.Field(i)
			if f.Kind() == reflect.Pointer {
				if f.IsNil() {
					rec[j] = "" // unknown, null in JSON
					continue
				}
				f = f.Elem()
			}
			switch f.Kind() {
			case reflect.Float64:
				rec[j] = strconv.FormatFloat(f.Float(), 'g', -1, 64)
			case reflect.Int, reflect.Int64, reflect.Int32:
				rec[j] = strconv.FormatInt(f.Int(), 10)
			case reflect.Bool:
				rec[j] = strconv.FormatBool(f.Bool())
			default:
				rec[j] = fmt.Sprint(f.Interface())
			}
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func checkFormat(f string) error {
	switch f {
	case "table", "csv", "json":
		return nil
	}
	return usagef("--format %q: want table, csv or json", f)
}
