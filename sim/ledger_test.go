package sim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	_ "github.com/gpualloc/gpualloc/strategy/all"
	"github.com/gpualloc/gpualloc/traces"
)

// breakdownSpecs are the strategies the split at the peak is checked on:
// every registered one at its defaults, and the variants that map virtual
// memory.
func breakdownSpecs() []string {
	specs := gpualloc.Names()
	return append(specs, "pytorch:expandable_segments=true", "gmlake:frag_limit=0", "pytorch:garbage_collection_threshold=0.5")
}

func resolveSpec(t *testing.T, spec string) *gpualloc.Params {
	t.Helper()
	sp, err := gpualloc.ParseSpec(spec)
	require.NoError(t, err)
	p, err := gpualloc.Resolve(sp, nil)
	require.NoError(t, err)
	return p
}

// recount counts, from scratch, the cached bytes of device d: the bytes of
// the device allocations in its ledger that no live block of the replay
// overlaps (through any of their ranges); and the bytes of the live blocks
// that overlap none.
func recount(e *engine, d *device) (cached, orphan int64) {
	recs := d.led.recs
	var ranges []int32
	for id := range recs {
		if recs[id].end != 0 {
			ranges = append(ranges, int32(id))
		}
	}
	slices.SortFunc(ranges, func(a, b int32) int { return cmp.Compare(recs[a].start, recs[b].start) })
	held := map[int32]bool{}
	for _, s := range e.slots {
		if s.state != slotLive || int(s.dev) != d.index || s.span == spanOwn {
			continue // a block that fills a region of its own holds it, and the region has no record
		}
		lo, hi := s.block.Addr, s.block.End()
		i, _ := slices.BinarySearchFunc(ranges, lo, func(id int32, a uint64) int { return cmp.Compare(recs[id].start, a) })
		in := false
		for i = max(i-1, 0); i < len(ranges) && recs[ranges[i]].start < hi; i++ {
			if r := recs[ranges[i]]; r.end > lo {
				held[r.owner], in = true, true
			}
		}
		if !in {
			orphan += s.block.Size
		}
	}
	for id, r := range recs {
		if (r.kind == recRegion || r.kind == recMemory) && !held[int32(id)] {
			cached += r.size
		}
	}
	return cached, orphan
}

// bruteSplit is the split of device d's reserved bytes (all devices' when
// d is nil) counted from scratch.
func bruteSplit(e *engine, d *device) split {
	var s split
	var handed, reserved int64
	for _, sl := range e.slots {
		if sl.state == slotLive && (d == nil || int(sl.dev) == d.index) {
			s.live += sl.size
			handed += sl.block.Size
		}
	}
	for _, dv := range e.devs {
		if dv != nil && (d == nil || dv == d) {
			c, o := recount(e, dv)
			s.cached += max(c-o, 0)
			reserved += dv.reserved
		}
	}
	s.rounding = handed - s.live
	s.fragmented = reserved - handed - s.cached
	return s
}

// replaySteps replays events event by event, calling check after each,
// and returns the result.
func replaySteps(t *testing.T, events []traces.Event, cfg Config, check func(e *engine, n int)) Result {
	t.Helper()
	r := traces.NewSliceReader("t", events)
	e, err := newEngine(r, cfg)
	require.NoError(t, err)
	defer e.close()
	for n := range events {
		require.NoError(t, e.step(&events[n], int64(n)))
		if check != nil {
			check(e, n)
		}
	}
	e.res.Events = int64(len(events))
	e.finish(r)
	return e.res
}

// checkSplit checks the split of one row: it adds up to the row's peak,
// every part at least 0, and it is want, the split counted from scratch
// after the first event after which reserved memory stood at its peak.
func checkSplit(t *testing.T, what string, peak int64, got, want split, wantKnown bool) {
	t.Helper()
	require.Equal(t, peak, got.live+got.rounding+got.fragmented+got.cached, "%s: the parts add up to the peak", what)
	for _, v := range []int64{got.live, got.rounding, got.fragmented, got.cached} {
		require.GreaterOrEqual(t, v, int64(0), "%s: %+v", what, got)
	}
	if wantKnown {
		require.Equal(t, want, got, "%s", what)
	}
}

func splitOf(r Result) split {
	return split{r.AtPeakLiveBytes, r.AtPeakRoundingBytes, r.AtPeakFragmentedBytes, r.AtPeakCachedBytes}
}

func deviceSplitOf(d DeviceResult) split {
	return split{d.AtPeakLiveBytes, d.AtPeakRoundingBytes, d.AtPeakFragmentedBytes, d.AtPeakCachedBytes}
}

// breakdownTrace draws a trace of n events over devices: sizes spread
// evenly over their logarithm from 1 byte to 1 << maxLog, and a release
// of a device's cache now and then.
func breakdownTrace(rng *rand.Rand, n, devices, maxLog int) []traces.Event {
	tr := newTrace()
	var live []uint64
	id := uint64(0)
	for len(tr.events) < n {
		switch k := rng.IntN(100); {
		case k < 2:
			tr.events = append(tr.events, traces.Event{Op: traces.OpRelease, Device: int32(rng.IntN(devices)), TimeUS: tr.time})
		case len(live) > 0 && (k < 50 || len(live) >= 300):
			i := rng.IntN(len(live))
			tr.free(live[i])
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			id++
			tr.on(int32(rng.IntN(devices)), uint64(rng.IntN(2)))
			size := max(int64(1)<<rng.IntN(maxLog+1)+rng.Int64N(1<<rng.IntN(maxLog+1)), 1)
			tr.alloc(id, size)
			live = append(live, id)
		}
	}
	return tr.events
}

// TestBreakdownRandom checks the ledger against a count from scratch after
// every event, and the split at the peak of every row, for every strategy
// on random traces of one and of two devices, with capacities that some
// traces exceed (so that strategies release and retry, and fail).
func TestBreakdownRandom(t *testing.T) {
	for _, spec := range breakdownSpecs() {
		p := resolveSpec(t, spec)
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, 21))
			devices := 1 + int(seed%2)
			maxLog := []int{14, 22, 27, 29}[seed]
			capacity := []int64{0, 0, 8 << 30, 6 << 30}[seed]
			events := breakdownTrace(rng, 1500, devices, maxLog)
			t.Run(fmt.Sprintf("%s/seed=%d", spec, seed), func(t *testing.T) {
				cfg := Config{Params: p, Capacity: capacity, SeriesBuckets: -1}
				res := runBreakdown(t, events, cfg, true)
				if seed == 0 {
					require.Positive(t, res.PeakReservedBytes)
				}
			})
		}
	}
}

// runBreakdown replays events twice: once for the peaks, then event by
// event, counting the split from scratch after the first event after which
// each row's reserved memory is at its peak (and, with everyEvent, the
// cached bytes of every device after every event), and checks the result's
// rows against it.
func runBreakdown(t *testing.T, events []traces.Event, cfg Config, everyEvent bool) Result {
	t.Helper()
	first := replaySteps(t, events, cfg, nil)
	peaks := map[int]int64{}
	for _, d := range first.Devices {
		peaks[d.Device] = d.PeakReservedBytes
	}
	var want split
	wantDev := map[int]split{}
	known, knownDev := false, map[int]bool{}
	res := replaySteps(t, events, cfg, func(e *engine, n int) {
		if everyEvent {
			for _, d := range e.devs {
				if d != nil {
					d.resolve()
					if d.led.freshSize != 0 {
						d.led.flush()
					}
					c, o := recount(e, d)
					require.Equal(t, c, d.led.cached, "event %d: device %d's cached bytes", n, d.index)
					require.Equal(t, o, d.led.orphan, "event %d: device %d's bytes of blocks in no range", n, d.index)
				}
			}
		}
		if !known && e.reserved == first.PeakReservedBytes && e.reserved > 0 {
			want, known = bruteSplit(e, nil), true
		}
		for _, d := range e.devs {
			if d != nil && !knownDev[d.index] && d.reserved == peaks[d.index] && d.reserved > 0 {
				wantDev[d.index], knownDev[d.index] = bruteSplit(e, d), true
			}
		}
	})
	require.Equal(t, first.PeakReservedBytes, res.PeakReservedBytes)
	checkSplit(t, "all devices", res.PeakReservedBytes, splitOf(res), want, known)
	for _, d := range res.Devices {
		checkSplit(t, fmt.Sprintf("device %d", d.Device), d.PeakReservedBytes, deviceSplitOf(d), wantDev[d.Device], knownDev[d.Device])
	}
	for _, row := range res.PerDevice() {
		require.Equal(t, row.PeakReservedBytes, row.AtPeakLiveBytes+row.AtPeakRoundingBytes+row.AtPeakFragmentedBytes+row.AtPeakCachedBytes)
	}
	return res
}

// TestBreakdownBundled checks the split at the peak of every strategy on
// the bundled traces against a count from scratch.
func TestBreakdownBundled(t *testing.T) {
	if testing.Short() {
		t.Skip("replays every bundled trace twice per strategy")
	}
	for _, b := range traces.Bundled() {
		r, err := b.Open()
		require.NoError(t, err)
		events, err := traces.ReadAll(r)
		require.NoError(t, err)
		for _, spec := range breakdownSpecs() {
			p := resolveSpec(t, spec)
			t.Run(b.Name+"/"+spec, func(t *testing.T) {
				res := runBreakdown(t, events, Config{Params: p, SeriesBuckets: -1}, false)
				require.Positive(t, res.AtPeakLiveBytes)
			})
		}
	}
}

// TestBreakdownByHand checks the split on a trace small enough to count by
// hand: the cache strategy of the tests rounds to powers of two (at least
// 1 KiB), one device allocation per block, and keeps freed blocks.
func TestBreakdownByHand(t *testing.T) {
	tr := newTrace().alloc(1, 3000).alloc(2, 1000).free(1).alloc(3, 500)
	res, err := Replay(tr.reader(), Config{Open: openCache})
	require.NoError(t, err)
	// Peak reserved after the third alloc, which finds no free 1 KiB
	// block: 4096 + 1024 + 1024; live 1000 + 500 in two 1 KiB blocks, the
	// freed 4 KiB region cached.
	require.Equal(t, int64(6144), res.PeakReservedBytes)
	require.Equal(t, split{live: 1500, rounding: 548, cached: 4096}, splitOf(res))

	// The exact strategy of the tests holds one region per block of the
	// size asked for: everything is live.
	res, err = Replay(tr.reader(), Config{Open: openExact})
	require.NoError(t, err)
	require.Equal(t, split{live: 4000}, splitOf(res))
}

// TestBreakdownBlocksInNoRange checks the split where blocks lie in no
// device allocation: pytorch's expandable segments on a backend without
// virtual memory hand out addresses of their own, backed by pages that
// Malloc returned elsewhere.
func TestBreakdownBlocksInNoRange(t *testing.T) {
	p := resolveSpec(t, "pytorch:expandable_segments=true")
	events := breakdownTrace(rand.New(rand.NewPCG(7, 21)), 1500, 1, 24)
	res := runBreakdown(t, events, Config{Params: p, SeriesBuckets: -1, NewBackend: func(i int) (gpualloc.Backend, error) {
		d, err := virtual.New(virtual.Options{Index: i})
		return struct{ gpualloc.Backend }{d}, err // no virtual memory
	}}, true)
	require.Zero(t, res.DeviceMaps)
	// Every block lies in no range: the pages hold them, but which is
	// unknown, and what they do not fill counts as cached.
	require.Zero(t, res.AtPeakFragmentedBytes)
	require.Positive(t, res.AtPeakCachedBytes)
}

// TestBreakdownPendingOverflow checks the split when more blocks are
// handed out between two peaks than the pending list holds, so that the
// split looks at every slot: long-lived blocks handed out early, then
// cache hits past maxPending, then a new peak.
func TestBreakdownPendingOverflow(t *testing.T) {
	for _, spec := range []string{"bfc", "pytorch", "naive"} {
		t.Run(spec, func(t *testing.T) {
			tr := newTrace()
			for i := range uint64(40) {
				tr.alloc(i, int64(1+i)<<16)
			}
			for i := uint64(0); i < 40; i += 2 {
				tr.free(i)
			}
			for n := range uint64(3 * maxPending) {
				slot := 100 + n%7
				if n >= 7 {
					tr.free(slot)
				}
				tr.alloc(slot, int64(1+n%5)<<14)
			}
			tr.alloc(1000, 1<<30) // the peak
			tr.alloc(1001, 1<<12)
			res := runBreakdown(t, tr.events, Config{Params: resolveSpec(t, spec), SeriesBuckets: -1}, false)
			require.Positive(t, res.AtPeakLiveBytes)
		})
	}
}
