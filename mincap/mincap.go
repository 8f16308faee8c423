// Package mincap finds the smallest device on which a strategy replays a
// trace without an allocation failing for want of memory: the figure
// behind simulate --min-capacity (min_capacity_bytes) and the smallest
// device of each row of simulate explain, a strategy's true footprint on
// a trace, as the offline plan (package plan) is the footprint of an
// allocator that knows the future. It sits above sim, whose replays it
// drives, beside package tune.
//
// A replay of the search is the replay that simulate --capacity makes: from
// the state the trace starts from, with the settings it records when the
// strategy is given no parameter (sim.Config.Start, see
// traces.Start). A device smaller than that start state restores
// only its segments that hold live blocks (the rest is cache PyTorch would
// have released, see package sim), and one too small even for those fails
// as an OOM does. Devices are never added up: each has its own capacity and its
// own smallest one.
package mincap

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// mib is the step of the search: capacities are whole MiB.
const mib = 1 << 20

// MaxCapacity is the capacity at which a search gives up: 16 TiB, a
// quarter of the address space that the virtual device gives an
// expandable segment.
const MaxCapacity = 1 << 44

// Options say what a search replays besides the events and the config.
type Options struct {
	// Caps gives each device's capacity: that of the devices the search
	// does not size, and that of the device it sizes in From. Nil means
	// the capacity that a replay of the config gives it (Config.Capacity,
	// else virtual.DefaultCapacity).
	Caps func(device int) int64
	// From is a replay of the events as the config says, each device of
	// capacity Caps, whose peaks start the search; nil, the search starts
	// from the device's capacity, or makes it first (Search).
	From *sim.Result
	// BisectOnly leaves out the probes below the bisection's answer and
	// the check of both sides (see Search): fewer replays, for a strategy
	// whose OOMs follow the capacity.
	BisectOnly bool
	// Events, when not nil, reads the trace anew for each replay of
	// SearchDevice, in place of its events (which may then be nil): a
	// trace that is not held in memory.
	Events func() traces.BatchReader
}

// Search returns the smallest capacity, a multiple of 1 MiB, that every
// device of the trace may have (one capacity for all, as simulate
// --capacity gives them) for a replay of events as cfg says (its Capacity
// aside) to have no OOM, with an OOM 1 MiB below. from is a replay of
// events as cfg says, at cfg.Capacity, whose peaks start the search; nil,
// Search makes it first, with one replay more. cfg.Start is the state the
// trace starts from, with its recorded settings (see sim.Config), as the
// reader of the trace reports it: events held in memory do not carry it.
//
// Policy. Below a device's peak of live requested bytes every strategy
// fails, so the search starts there: it doubles from the largest of the
// devices' peaks of reserved bytes in from (rounded up to 1 MiB) until a
// replay has no OOM, bisects between the highest capacity known to fail
// and that one, and then tries eight capacities spread evenly below the
// answer: a strategy whose OOMs do not follow the capacity (one that sizes
// its pool or releases its cache from the device's size, as MXNet's
// reserve does) may fit on one of them, and then the bisection goes on
// below it. The answer is always checked on both sides, by replay: no OOM
// at it, and an OOM 1 MiB below or a capacity below the lower bound. A
// smaller capacity without OOM may still exist for such a strategy,
// between the points tried. Search gives up with an error when a replay
// fails for another reason than memory, or when the strategy has an OOM
// even on a device of MaxCapacity bytes.
//
// Cost. Every step is a whole replay of events from memory, without a time
// series, one after the other: for a strategy whose OOMs follow the
// capacity, with R the peak reserved of from and P the peak requested, one
// replay to fit (more if R does not), about log2((R-P)/1 MiB) to bisect,
// up to eight probes and two checks; a probe that fits adds a bisection
// and eight probes more. Memory is that of one replay; events are read in
// place, not copied. ctx stops it between replays, and within one every
// sim.ProgressInterval events. The search's replays record no snapshot
// and keep no time series, whatever cfg asks.
func Search(ctx context.Context, events []traces.Event, cfg sim.Config, from *sim.Result) (int64, error) {
	cfg = probeConfig(cfg)
	open := inMemory(cfg.Trace, events)
	if from == nil {
		r, err := replay(ctx, open, cfg, nil)
		if err != nil && !isOutOfMemory(err) {
			return 0, err
		}
		if err == nil {
			from = &r
		}
	}
	fits := func(c int64) (bool, error) {
		return fitsAt(ctx, open, cfg, func(int) int64 { return c }, -1)
	}
	// The lower bound is the largest of the devices' peaks of live
	// requested bytes; the search starts from the largest of their peaks
	// of reserved bytes, never their sum.
	var need, peak int64
	start := capacityOf(cfg)
	if from != nil {
		for _, d := range from.Devices {
			need = max(need, d.PeakRequestedBytes)
			peak = max(peak, d.PeakReservedBytes)
		}
		if from.OOMs == 0 {
			start = 0
		}
	}
	return search(fits, cfg, need, peak, start, false)
}

// SearchDevice returns the smallest capacity of device d, a multiple of 1
// MiB, on which a replay of events as cfg says (its Capacity aside) has no
// OOM on d, with one 1 MiB below (or a capacity below d's peak of live
// requested bytes, where every allocator fails), the other devices of the
// capacities o.Caps gives: the figure of one device of a trace of several,
// which never adds up the devices. Its policy, its cost and cfg.Start are
// those of Search, o.BisectOnly aside; it makes no replay first when
// o.From is nil, and starts from d's capacity.
func SearchDevice(ctx context.Context, events []traces.Event, cfg sim.Config, d int, o Options) (int64, error) {
	cfg = probeConfig(cfg)
	open := o.Events
	if open == nil {
		open = inMemory(cfg.Trace, events)
	}
	caps := o.Caps
	if caps == nil {
		c := capacityOf(cfg)
		caps = func(int) int64 { return c }
	}
	fits := func(c int64) (bool, error) {
		return fitsAt(ctx, open, cfg, func(dev int) int64 {
			if dev == d {
				return c
			}
			return caps(dev)
		}, d)
	}
	var need, peak int64
	start := caps(d)
	if o.From != nil {
		dr := deviceOf(o.From, d)
		need, peak = max(need, dr.PeakRequestedBytes), dr.PeakReservedBytes
		if dr.OOMs == 0 {
			start = 0
		}
	}
	return search(fits, cfg, need, peak, start/mib*mib, o.BisectOnly)
}

// search is the policy of Search: fits says whether a capacity fits, need
// is the lower bound (the peak of live requested bytes), peak the peak
// reserved that the search starts from, start a capacity known to fail
// (0: none).
func search(fits func(int64) (bool, error), cfg sim.Config, need, peak, start int64, bisectOnly bool) (int64, error) {
	name := cfg.Strategy
	if cfg.Params != nil {
		name = cfg.Params.Strategy()
	}
	// fail is a capacity known to fail: below the lower bound, or tried.
	fail := max((need+mib-1)/mib*mib-mib, 0)
	ok := max((peak+mib-1)/mib*mib, fail+mib, start)
	for {
		f, err := fits(ok)
		if err != nil {
			return 0, err
		}
		if f {
			break
		}
		fail = ok
		if ok >= MaxCapacity {
			return 0, fmt.Errorf("%s: %s: OOM even on a device of %s", cfg.Trace, name, gpualloc.FormatSize(ok))
		}
		ok = min(ok*2, MaxCapacity)
	}
	bisect := func() error {
		for ok-fail > mib {
			mid := fail + (ok-fail)/mib/2*mib
			f, err := fits(mid)
			if err != nil {
				return err
			}
			if f {
				ok = mid
			} else {
				fail = mid
			}
		}
		return nil
	}
	if err := bisect(); err != nil {
		return 0, err
	}
	if bisectOnly {
		return ok, nil
	}
	// Probes below the answer, for strategies not monotone in capacity.
	lower := (need + mib - 1) / mib * mib
	for again := true; again; {
		again = false
		prevFail := lower - mib
		for k := int64(1); k <= 8 && ok-lower > 2*mib; k++ {
			c := lower + (ok-lower)*k/9/mib*mib
			if c <= prevFail || c >= ok-mib {
				continue
			}
			f, err := fits(c)
			if err != nil {
				return 0, err
			}
			if !f {
				prevFail = c
				continue
			}
			ok, fail, again = c, prevFail, true
			if err := bisect(); err != nil {
				return 0, err
			}
			break
		}
	}
	// Both sides.
	if f, err := fits(ok); err != nil || !f {
		return 0, fmt.Errorf("%s: %s: min capacity %d does not hold on a second replay (err %v)", cfg.Trace, name, ok, err)
	}
	if ok-mib >= need && ok > mib { // a device of 0 bytes is none to try
		if f, err := fits(ok - mib); err != nil || f {
			return 0, fmt.Errorf("%s: %s: min capacity %d: no OOM 1 MiB below (err %v)", cfg.Trace, name, ok, err)
		}
	}
	return ok, nil
}

// probeConfig returns cfg as the search's replays take it: no time series,
// no progress, no snapshot (a probe's replay is no export: the caller's
// stays the one it asked for).
func probeConfig(cfg sim.Config) sim.Config {
	cfg.SeriesBuckets = -1
	cfg.Progress = nil
	cfg.Snapshot = nil
	cfg.SnapshotStream = nil
	return cfg
}

// capacityOf returns the capacity of each device in a replay of cfg.
func capacityOf(cfg sim.Config) int64 {
	if cfg.Capacity > 0 {
		return cfg.Capacity
	}
	return virtual.DefaultCapacity
}

// A capsReader reads a trace, each device of the capacity caps gives it.
type capsReader struct {
	traces.BatchReader
	caps func(device int) int64
}

func (r capsReader) DeviceCapacity(dev int) int64 { return r.caps(dev) }

// inMemory returns the reads of events in memory, named name.
func inMemory(name string, events []traces.Event) func() traces.BatchReader {
	return func() traces.BatchReader { return traces.NewSliceReader(name, events) }
}

// replay replays the trace that open reads as cfg says, each device of
// capacity caps(d) (cfg's when caps is nil), from cfg.Start.
func replay(ctx context.Context, open func() traces.BatchReader, cfg sim.Config, caps func(int) int64) (sim.Result, error) {
	r := open()
	if caps != nil {
		cfg.Capacity = 0 // each device its own, from the reader
		return sim.ReplayContext(ctx, capsReader{r, caps}, cfg)
	}
	return sim.ReplayContext(ctx, r, cfg)
}

// fitsAt reports whether a replay with each device of capacity caps has no
// OOM on device d (on any device, d < 0). A replay that fails for want of
// memory, as one does on a device too small for the recorded start state,
// does not fit.
func fitsAt(ctx context.Context, open func() traces.BatchReader, cfg sim.Config, caps func(int) int64, d int) (bool, error) {
	if err := ctx.Err(); err != nil { // a short replay never looks
		return false, err
	}
	r, err := replay(ctx, open, cfg, caps)
	if err != nil {
		if isOutOfMemory(err) && ctx.Err() == nil {
			return false, nil
		}
		return false, err
	}
	if d < 0 {
		return r.OOMs == 0, nil
	}
	return deviceOf(&r, d).OOMs == 0, nil
}

// deviceOf returns the figures of device d in r (zero when d has none).
func deviceOf(r *sim.Result, d int) sim.DeviceResult {
	for _, dr := range r.Devices {
		if dr.Device == d {
			return dr
		}
	}
	return sim.DeviceResult{Device: d}
}

// isOutOfMemory reports whether a replay failed for want of memory.
func isOutOfMemory(err error) bool { return errors.Is(err, gpualloc.ErrOutOfMemory) }
