package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"

	"github.com/gpualloc/gpualloc/dataset"
	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

const parquetUsage = `
With --parquet FILE it also writes every event of every replay as one
Parquet file, for pandas, Polars or DuckDB: a row per event and replay,
replays in the order of the table, each with trace, device, strategy (its
full spec, as the table gives it), index (the event's index among its
device's events), time_us (-1 where the trace records no time), action
(alloc, free or release), size, address (the allocation's address where the
trace names it by one, as a PyTorch snapshot does, else 0), site (the call
site explain names, where a PyTorch snapshot records stacks, else ""), and
live_bytes, allocated_bytes and reserved_bytes of the event's device after
it: the replay's memory curve, event by event. Each replay's rows wait in a
temporary file (in --temp-dir) until the replays end; the file is written
whole, and not at all when a replay fails.
`

// eventsOut is --parquet FILE: the events of every replay, each replay's
// rows written apart while it runs (replays run at once) and joined in the
// order of the jobs at the end, so that the file is the same whatever -j.
type eventsOut struct {
	path    string
	tempDir string
	parts   []*eventsPart // by job
}

// An eventsPart is the rows of one replay, in a temporary file.
type eventsPart struct {
	out *eventsOut
	f   *os.File
	w   *dataset.EventWriter
	row dataset.Event // the row being written, its strings reused

	index []int64 // events seen so far, by device

	// The reader's stacks (traces.StackReporter), and the site of each
	// stack as found (named[i] says that sites[i] is set).
	frames []snapshot.Frame
	stacks [][]int32
	sites  []string
	named  []bool
}

// attach makes job write its events: its Open makes the part's file, its
// Config observes each event, and the closer of its trace ends the part.
func (o *eventsOut) attach(job *sim.Job) {
	p := &eventsPart{out: o}
	o.parts = append(o.parts, p)
	open := job.Open
	trace := job.Config.Trace
	job.Open = func() (traces.Reader, io.Closer, error) {
		r, c, err := open()
		if err != nil {
			return r, c, err
		}
		if err := p.start(trace, r); err != nil {
			if c != nil {
				c.Close()
			}
			return nil, nil, err
		}
		return r, closers{c, p}, nil
	}
	job.Config.Observe = p.observe
}

// start makes the part's temporary file.
func (p *eventsPart) start(trace string, r traces.Reader) error {
	f, err := os.CreateTemp(p.out.tempDir, ".gpualloc-events-*.parquet")
	if err != nil {
		return fmt.Errorf("--parquet %s: a temporary file: %w", p.out.path, unwrapPathErr(err))
	}
	temps.Store(f.Name(), struct{}{})
	p.f, p.w = f, dataset.NewEventWriter(f)
	p.row = dataset.Event{Trace: trace} // Strategy is set by write
	p.frames, p.stacks = traces.StacksOf(r)
	return nil
}

// observe writes event n's row.
func (p *eventsPart) observe(n int64, ev *traces.Event, after sim.DeviceBytes) error {
	d := int(ev.Device)
	if d >= len(p.index) {
		p.index = append(p.index, make([]int64, d+1-len(p.index))...)
	}
	r := &p.row
	r.Device, r.Index = ev.Device, p.index[d]
	p.index[d]++
	r.TimeUS, r.Action, r.Size = ev.TimeUS, ev.Op.String(), ev.Size
	if ev.TimeUS == traces.NoTime {
		r.TimeUS = -1
	}
	r.Address = 0
	if a, hex := ev.HexID(); hex {
		r.Address = a
	}
	r.Site = p.site(ev.Stack)
	r.Live, r.Allocated, r.Reserved = after.Requested, after.Allocated, after.Reserved
	if err := p.w.Write(r); err != nil {
		return fmt.Errorf("--parquet %s: %w", p.out.path, err)
	}
	return nil
}

// site returns the call site of stack, as explain names it (the first
// frame of the program's own Python code), or "" when the trace records
// none or no frame is the program's.
func (p *eventsPart) site(stack uint32) string {
	if stack == 0 || int(stack) >= len(p.stacks) {
		return ""
	}
	if int(stack) >= len(p.named) {
		p.sites = append(p.sites, make([]string, len(p.stacks)-len(p.sites))...)
		p.named = append(p.named, make([]bool, len(p.stacks)-len(p.named))...)
	}
	if !p.named[stack] {
		frames := make([]snapshot.Frame, 0, len(p.stacks[stack]))
		for _, i := range p.stacks[stack] {
			if int(i) < len(p.frames) {
				frames = append(frames, p.frames[i])
			}
		}
		if f, ok := explain.Site(frames); ok {
			p.sites[stack] = explain.FormatFrame(f)
		}
		p.named[stack] = true
	}
	return p.sites[stack]
}

// Close ends the part when its replay ends: the file's footer is written,
// and the file kept for write.
func (p *eventsPart) Close() error {
	if p.w == nil {
		return nil
	}
	if err := p.w.Close(); err != nil {
		return fmt.Errorf("--parquet %s: %w", p.out.path, err)
	}
	return nil
}

// write joins the parts, in the order of the jobs, into the output file,
// written whole (see createAtomic). Each row's strategy is the spec its
// replay's result gives (a PyTorch snapshot replayed by pytorch given no
// parameter names the settings it records), as the table and the JSON
// name it.
func (o *eventsOut) write(ctx context.Context, results []sim.JobResult) error {
	f, err := createAtomic(ctx, o.path)
	if err != nil {
		return fmt.Errorf("--parquet %w", err)
	}
	defer f.Abort()
	w := dataset.NewEventWriter(f)
	buf := make([]dataset.Event, 1024)
	for i, p := range o.parts {
		if p.f == nil {
			continue // a replay that did not start
		}
		if err := p.copyTo(w, results[i].Result.Strategy.Spec, buf); err != nil {
			return fmt.Errorf("--parquet %s: %w", o.path, err)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("--parquet %s: %w", o.path, err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("--parquet %w", err)
	}
	return nil
}

// copyTo writes the part's rows to w, a batch at a time, with strategy as
// their strategy.
func (p *eventsPart) copyTo(w *dataset.EventWriter, strategy string, buf []dataset.Event) error {
	fi, err := p.f.Stat()
	if err != nil {
		return err
	}
	pf, err := parquet.OpenFile(p.f, fi.Size())
	if err != nil {
		return fmt.Errorf("reading back %s: %w", p.f.Name(), err)
	}
	r := parquet.NewGenericReader[dataset.Event](pf)
	defer r.Close()
	for {
		n, err := r.Read(buf)
		for i := range buf[:n] {
			buf[i].Strategy = strategy
			if err := w.Write(&buf[i]); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading back %s: %w", p.f.Name(), err)
		}
	}
}

// remove removes the parts' temporary files.
func (o *eventsOut) remove() {
	for _, p := range o.parts {
		if p.f != nil {
			p.f.Close()
			os.Remove(p.f.Name())
			temps.Delete(p.f.Name())
		}
	}
}

// closers closes each of its closers that is not nil, in order, and
// returns the first error.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if c == nil {
			continue
		}
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
