package sim

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/traces"
)

// smallTrace has peak requested 6000 bytes at event 5.
func smallTrace() *traceBuilder {
	return newTrace().
		alloc(1, 1000).
		alloc(2, 3000).
		free(1).
		alloc(3, 1000).
		free(2).
		alloc(4, 5000).
		free(3).
		free(4)
}

func TestReplayExact(t *testing.T) {
	res, err := Replay(smallTrace().reader(), Config{Trace: "small", Open: openExact, Strategy: "exact", Verify: true})
	require.NoError(t, err)

	assert.Equal(t, "small", res.Trace)
	assert.Equal(t, "exact", res.Strategy.Spec)
	assert.Equal(t, "sim", res.Backend)
	assert.Equal(t, virtual.DefaultCapacity, res.CapacityBytes)
	assert.Equal(t, int64(8), res.Events)
	assert.Equal(t, int64(4), res.Allocs)
	assert.Equal(t, int64(4), res.Frees)
	assert.Equal(t, int64(6000), res.PeakRequestedBytes)
	assert.Equal(t, int64(6000), res.PeakAllocatedBytes)
	assert.Equal(t, int64(6000), res.PeakReservedBytes)
	assert.Equal(t, 1.0, res.Overhead)
	assert.Equal(t, 0.0, res.Fragmentation)
	assert.Equal(t, int64(4), res.DeviceMallocs)
	assert.Equal(t, int64(4), res.DeviceFrees)
	assert.Equal(t, int64(10000), res.DeviceMallocBytes)
	assert.Zero(t, res.CacheHits)
	assert.Zero(t, res.OOMs)
	assert.Positive(t, res.ElapsedNS)
	assert.Positive(t, res.EventsPerSec)

	require.Len(t, res.Devices, 1)
	dr := res.Devices[0]
	require.NotNil(t, dr.Stats)
	assert.Equal(t, int64(6000), dr.Stats.PeakReserved)
	assert.Equal(t, int64(0), dr.ReservedBytes)
}

func TestReplayCaching(t *testing.T) {
	res, err := Replay(smallTrace().reader(), Config{Open: openCache, Strategy: "cache", Verify: true})
	require.NoError(t, err)

	// Blocks of 1024, 4096 and 8192 bytes; block 1024 is reused at event 3.
	assert.Equal(t, int64(8), res.Events)
	assert.Equal(t, int64(6000), res.PeakRequestedBytes)
	assert.Equal(t, int64(1024+8192), res.PeakAllocatedBytes)
	assert.Equal(t, int64(1024+4096+8192), res.PeakReservedBytes)
	assert.Equal(t, int64(3), res.DeviceMallocs)
	assert.Zero(t, res.DeviceFrees)
	assert.Equal(t, int64(13312), res.DeviceMallocBytes)
	assert.Equal(t, int64(1), res.CacheHits)
	assert.InDelta(t, 13312.0/6000, res.Overhead, 1e-15)
	assert.InDelta(t, 1-6000.0/13312, res.Fragmentation, 1e-15)

	p := res.Series.Points()
	require.Len(t, p, 8)
	var reserved []int64
	for _, pt := range p {
		reserved = append(reserved, pt.Reserved.End)
	}
	assert.Equal(t, []int64{1024, 5120, 5120, 5120, 5120, 13312, 13312, 13312}, reserved)
}

func TestReplayUsesStreams(t *testing.T) {
	tr := newTrace().on(0, 7).alloc(1, 100).on(0, 9).alloc(2, 100).free(1).free(2)
	var a *cacheAlloc
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		al, err := openCache(b)
		a = al.(*cacheAlloc)
		return al, err
	}
	_, err := Replay(tr.reader(), Config{Open: open})
	require.NoError(t, err)
	assert.Equal(t, []uint64{7, 9}, a.streams)
}

// catAlloc is a cacheAlloc that learns categories.
type catAlloc struct {
	*cacheAlloc
	cats []gpualloc.Category
}

func (a *catAlloc) AllocCategory(size int64, stream uint64, c gpualloc.Category) (gpualloc.Block, error) {
	a.cats = append(a.cats, c)
	return a.AllocStream(size, stream)
}

func TestReplayUsesCategories(t *testing.T) {
	tr := newTrace().as(gpualloc.CategoryParameter).on(0, 7).alloc(1, 100).
		as(gpualloc.CategoryActivation).on(0, 9).alloc(2, 100).free(2).
		as(gpualloc.CategoryUnknown).alloc(3, 100).free(1).free(3)
	var a *catAlloc
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		c, err := openCache(b)
		a = &catAlloc{cacheAlloc: c.(*cacheAlloc)}
		return a, err
	}
	_, err := Replay(tr.reader(), Config{Open: open})
	require.NoError(t, err)
	assert.Equal(t, []gpualloc.Category{gpualloc.CategoryParameter, gpualloc.CategoryActivation, gpualloc.CategoryUnknown}, a.cats)
	assert.Equal(t, []uint64{7, 9, 9}, a.streams, "the stream goes with the category")

	// A strategy without categories never sees them.
	var c *cacheAlloc
	_, err = Replay(tr.reader(), Config{Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		al, err := openCache(b)
		c = al.(*cacheAlloc)
		return al, err
	}})
	require.NoError(t, err)
	assert.Equal(t, []uint64{7, 9, 9}, c.streams)
}

func TestReplayOOMContinues(t *testing.T) {
	tr := newTrace().
		alloc(1, 4096).
		alloc(2, 8192). // does not fit
		alloc(3, 4096).
		free(2). // skipped
		free(1).
		alloc(4, 8192).
		free(3).
		free(4)
	res, err := Replay(tr.reader(), Config{Open: openExact, Strategy: "exact", Capacity: 8192, Verify: true})
	require.NoError(t, err)
	assert.Equal(t, int64(8192), res.CapacityBytes)
	assert.Equal(t, int64(8), res.Events)
	assert.Equal(t, int64(4), res.Allocs)
	assert.Equal(t, int64(4), res.Frees)
	assert.Equal(t, int64(2), res.OOMs, "8192 bytes fit neither beside 4096 nor beside 4096 again")
	assert.Equal(t, int64(2), res.DeviceMallocs)
	assert.Equal(t, int64(2), res.DeviceFrees)
	// The lower bound is the trace's, failed allocations included.
	assert.Equal(t, int64(4096+8192+4096), res.PeakRequestedBytes)
	assert.Equal(t, int64(8192), res.PeakReservedBytes)
	assert.Equal(t, int64(2), res.Devices[0].OOMs)
	assert.Equal(t, int64(2), res.Devices[0].Stats.OOMs)
	// The device's figures follow the same rule as the Result's: with one
	// device they are the same.
	assert.Equal(t, res.PeakRequestedBytes, res.Devices[0].PeakRequestedBytes)
	assert.Equal(t, int64(0), res.Devices[0].RequestedBytes, "every allocation of the trace, failed ones too, was freed")
	// The allocator counts only what it served.
	assert.Equal(t, int64(4096+4096), res.Devices[0].Stats.PeakRequested)
}

// TestReplayOOMPerDevice checks that a failed allocation counts toward the
// lower bound of its own device and of no other.
func TestReplayOOMPerDevice(t *testing.T) {
	tr := newTrace().
		on(0, 0).alloc(1, 4096).
		on(1, 0).alloc(2, 4096).
		on(0, 0).alloc(3, 8192). // does not fit on device 0
		free(1).free(2).free(3)
	res, err := Replay(tr.reader(), Config{Open: openExact, Capacity: 8192, Verify: true})
	require.NoError(t, err)
	require.Len(t, res.Devices, 2)
	assert.Equal(t, int64(1), res.Devices[0].OOMs)
	assert.Equal(t, int64(4096+8192), res.Devices[0].PeakRequestedBytes)
	assert.Equal(t, int64(4096), res.Devices[1].PeakRequestedBytes)
	assert.Equal(t, int64(4096+4096+8192), res.PeakRequestedBytes)
}

func TestReplayOOMFreeThenReuse(t *testing.T) {
	// The slot of a failed alloc is free again after its (skipped) free.
	tr := newTrace().alloc(1, 100).free(1).alloc(2, 100).free(2)
	tr.events[0].Size, tr.events[1].Size = 1<<20, 1<<20
	res, err := Replay(tr.reader(), Config{Open: openExact, Capacity: 4096})
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.OOMs)
	assert.Equal(t, int64(1), res.DeviceMallocs)
	assert.Equal(t, int64(1<<20), res.PeakRequestedBytes, "the failed alloc counts in the lower bound")
}

func TestReplayReleaseAndRetry(t *testing.T) {
	// The cache gives back its 4096 bytes when 8192 do not fit beside them:
	// reserved drops to 0 within event 2, then rises to 8192.
	tr := newTrace().alloc(1, 4096).free(1).alloc(2, 6000).free(2)
	res, err := Replay(tr.reader(), Config{Open: openCache, Capacity: 8192, Verify: true})
	require.NoError(t, err)
	assert.Zero(t, res.OOMs)
	assert.Equal(t, int64(2), res.DeviceMallocs)
	assert.Equal(t, int64(1), res.DeviceFrees)
	assert.Equal(t, int64(8192), res.PeakReservedBytes)
	assert.Zero(t, res.CacheHits)
	p := res.Series.Points()
	require.Len(t, p, 4)
	assert.Equal(t, Range{Min: 0, Max: 8192, End: 8192, MaxEvent: 2, MaxTimeUS: 20}, p[2].Reserved)
	assert.Equal(t, int64(1), res.Devices[0].Stats.Retries)
}

func TestReplayMultiDevice(t *testing.T) {
	tr := newTrace().
		on(0, 0).alloc(1, 1000).
		on(1, 0).alloc(2, 3000).
		on(0, 0).alloc(3, 2000). // device 0: 3000, total 6000
		free(1).
		on(1, 0).alloc(4, 500). // device 1: 3500, total 5500
		free(2).
		on(2, 0).alloc(5, 4000). // device 2: 4000, total 6500
		free(3).free(4).free(5)
	var devs []*virtual.Device
	newBackend := func(i int) (gpualloc.Backend, error) {
		d, err := virtual.New(virtual.Options{Index: i, Capacity: 1 << 20})
		devs = append(devs, d)
		return d, err
	}
	res, err := Replay(tr.reader(), Config{Open: openExact, NewBackend: newBackend, Verify: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), res.CapacityBytes, "from MemInfo")
	assert.Equal(t, int64(6500), res.PeakRequestedBytes)
	assert.Equal(t, int64(6500), res.PeakReservedBytes)
	assert.Equal(t, int64(5), res.DeviceMallocs)
	assert.Equal(t, int64(5), res.DeviceFrees)

	require.Len(t, res.Devices, 3)
	for i, want := range []struct{ allocs, peak int64 }{{2, 3000}, {2, 3500}, {1, 4000}} {
		dr := res.Devices[i]
		assert.Equal(t, i, dr.Device)
		assert.Equal(t, want.allocs, dr.Allocs, "device %d", i)
		assert.Equal(t, want.allocs, dr.Frees, "device %d", i)
		assert.Equal(t, want.peak, dr.PeakRequestedBytes, "device %d", i)
		assert.Equal(t, want.peak, dr.PeakReservedBytes, "device %d", i)
		assert.Equal(t, want.peak, devs[i].Stats().PeakUsed, "device %d", i)
		assert.Equal(t, i, devs[i].Index())
	}
}

func TestReplaySparseDevices(t *testing.T) {
	tr := newTrace().on(5, 0).alloc(1, 10).on(2, 0).alloc(2, 10).free(1).free(2)
	res, err := Replay(tr.reader(), Config{Open: openExact})
	require.NoError(t, err)
	require.Len(t, res.Devices, 2)
	assert.Equal(t, 2, res.Devices[0].Device)
	assert.Equal(t, 5, res.Devices[1].Device)

	tr = newTrace().on(virtual.MaxIndex+1, 0).alloc(1, 10)
	_, err = Replay(tr.reader(), Config{Open: openExact})
	assert.ErrorContains(t, err, "device index 65536 out of range")
	tr = newTrace().on(-1, 0).alloc(1, 10)
	_, err = Replay(tr.reader(), Config{Open: openExact})
	assert.ErrorContains(t, err, "device index -1 out of range")
}

func TestReplayEmpty(t *testing.T) {
	res, err := Replay(newSliceReader(nil), Config{Open: openExact, Strategy: "exact"})
	require.NoError(t, err)
	assert.Zero(t, res.Events)
	assert.Zero(t, res.PeakReservedBytes)
	assert.Zero(t, res.Overhead)
	assert.Zero(t, res.Fragmentation)
	assert.Zero(t, res.EventsPerSec)
	assert.Empty(t, res.Devices)
	assert.Zero(t, res.Series.Len())
	assert.Empty(t, res.Series.Points())
	_, err = json.Marshal(res)
	require.NoError(t, err)
}

func TestResultJSON(t *testing.T) {
	res, err := Replay(smallTrace().reader(), Config{Open: openCache, Strategy: "cache"})
	require.NoError(t, err)
	data, err := json.Marshal(res)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{
		"alloc_device_ns_mean", "alloc_hit_ns_mean",
		"allocs", "at_peak_cached_bytes", "at_peak_fragmented_bytes", "at_peak_live_bytes", "at_peak_rounding_bytes",
		"backend", "cache_hits", "capacity_bytes", "device_call_ns_total", "device_frees",
		"device_full_allocs", "device_malloc_bytes", "device_mallocs", "device_maps", "device_time_ns_est", "device_unmaps", "elapsed_ns", "events",
		"events_per_sec", "fragmentation", "free_fragmentation", "frees", "largest_free_bytes",
		"live_at_end", "live_bytes_at_end", "min_capacity_bytes", "offline_bytes", "ooms", "overhead",
		"peak_allocated_bytes", "peak_requested_bytes", "peak_reserved_bytes",
		"releases", "skipped", "start_reserved_bytes", "start_segments", "strategy", "trace",
	}
	assert.Equal(t, want, keys)
	assert.Equal(t, 13312.0, m["peak_reserved_bytes"])
	assert.Equal(t, "cache", m["strategy"])
}

func TestReplayLenientReader(t *testing.T) {
	r := lenientReader{sliceReader: smallTrace().reader(), name: "train.csv", skipped: 3}
	res, err := Replay(r, Config{Open: openExact})
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.Skipped)
	assert.Equal(t, "train.csv", res.Trace, "name from the reader")
}

func TestReplayReaderError(t *testing.T) {
	r := smallTrace().reader()
	r.events = r.events[:3]
	readErr := errors.New("train.csv:5: free of unknown id 9")
	r.err = readErr
	res, err := Replay(r, Config{Open: openExact})
	assert.Same(t, readErr, err, "reader errors come back as they are")
	assert.Equal(t, int64(3), res.Events, "partial result")
}

// buggyAlloc frees blocks with the wrong size, which the virtual device
// catches.
type buggyAlloc struct{ exactAlloc }

func (a *buggyAlloc) Free(b gpualloc.Block) error {
	if b.Size > 2000 {
		b.Size--
	}
	return a.exactAlloc.Free(b)
}

func TestReplayAllocatorErrorAborts(t *testing.T) {
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) { return &buggyAlloc{exactAlloc{b: b}}, nil }
	res, err := Replay(smallTrace().reader(), Config{Trace: "small", Strategy: "buggy:x=1", Open: open})
	require.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	assert.EqualError(t, err, "small: buggy: event 4: free of 3000 bytes (id 2, device 0): "+
		"virtual: device 0: free of 0x7f4000000400 with size 2999, allocated with size 3000: invalid free")
	assert.Equal(t, int64(4), res.Events, "events before the failing one")
}

// shortAlloc hands out blocks smaller than asked for.
type shortAlloc struct{ nopAlloc }

func (a *shortAlloc) Alloc(size int64) (gpualloc.Block, error) {
	b, err := a.nopAlloc.Alloc(size)
	b.Size = size / 2
	return b, err
}

func TestReplayShortBlock(t *testing.T) {
	open := func(gpualloc.Backend) (gpualloc.Allocator, error) { return &shortAlloc{}, nil }
	_, err := Replay(smallTrace().reader(), Config{Open: open})
	assert.ErrorContains(t, err, "event 0: alloc of 1000 bytes (id 1, device 0): block of 500 bytes")
}

// liarAlloc counts every allocation as a cache hit.
type liarAlloc struct{ exactAlloc }

func (a *liarAlloc) Alloc(size int64) (gpualloc.Block, error) {
	b, err := a.exactAlloc.Alloc(size)
	if err == nil {
		a.CountAlloc(0, 0, true)
	}
	return b, err
}

func TestReplayVerify(t *testing.T) {
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) { return &liarAlloc{exactAlloc{b: b}}, nil }
	_, err := Replay(smallTrace().reader(), Config{Open: open})
	require.NoError(t, err, "without Verify, the allocator's Stats are not looked at")
	_, err = Replay(smallTrace().reader(), Config{Open: open, Verify: true})
	assert.EqualError(t, err, "event 0: alloc of 1000 bytes (id 1, device 0): allocator's Stats.Allocs is 2, the replay measured 1")
}

func TestReplayInconsistentTrace(t *testing.T) {
	tr := newTrace().alloc(1, 100)
	bad := append(slices.Clone(tr.events), tr.events[0]) // the slot is in use
	_, err := Replay(newSliceReader(bad), Config{Open: openExact})
	assert.ErrorContains(t, err, "event 1: alloc of 100 bytes (id 1, device 0): slot 0 is already in use")

	free := tr.events[0]
	free.Op = traces.OpFree
	_, err = Replay(newSliceReader([]traces.Event{free}), Config{Open: openExact})
	assert.ErrorContains(t, err, "event 0: free of 100 bytes (id 1, device 0): free of slot 0, which holds no allocation")

	free.Size = 99
	_, err = Replay(newSliceReader([]traces.Event{tr.events[0], free}), Config{Open: openExact})
	assert.ErrorContains(t, err, "free of 99 bytes, allocated with 100")
}

func TestReplayConfigErrors(t *testing.T) {
	_, err := Replay(newSliceReader(nil), Config{})
	assert.ErrorContains(t, err, "no strategy")
	_, err = Replay(newSliceReader(nil), Config{Open: openExact, Capacity: -1})
	assert.ErrorContains(t, err, "negative capacity")

	failing := func(gpualloc.Backend) (gpualloc.Allocator, error) { return nil, errors.New("bad parameter") }
	_, err = Replay(smallTrace().reader(), Config{Open: failing, Trace: "t"})
	assert.EqualError(t, err, "t: event 0: alloc of 1000 bytes (id 1, device 0): device 0: bad parameter")

	noBackend := func(int) (gpualloc.Backend, error) { return nil, errors.New("no such GPU") }
	_, err = Replay(smallTrace().reader(), Config{Open: openExact, NewBackend: noBackend})
	assert.EqualError(t, err, "event 0: alloc of 1000 bytes (id 1, device 0): device 0: no such GPU")
}

// closingBackend records that it was closed.
type closingBackend struct {
	*virtual.Device
	closed *int
}

func (c closingBackend) Close() error { *c.closed++; return nil }

func TestReplayClosesBackends(t *testing.T) {
	closed := 0
	newBackend := func(i int) (gpualloc.Backend, error) {
		d, err := virtual.New(virtual.Options{Index: i, Capacity: 1 << 20})
		return closingBackend{d, &closed}, err
	}
	tr := newTrace().alloc(1, 10).on(1, 0).alloc(2, 10)
	_, err := Replay(tr.reader(), Config{Open: openExact, NewBackend: newBackend})
	require.NoError(t, err)
	assert.Equal(t, 2, closed)
}

func TestReplayContextCanceled(t *testing.T) {
	tr := newTrace()
	for i := range uint64(ProgressInterval) {
		tr.alloc(i, 1).free(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := ReplayContext(ctx, tr.reader(), Config{Open: openNop})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(ProgressInterval), res.Events)
}

func TestReplayProgress(t *testing.T) {
	r := smallTrace().reader()
	r.reps = ProgressInterval/8 + 1
	var calls []int64
	res, err := Replay(r, Config{Open: openNop, Progress: func(n int64) { calls = append(calls, n) }})
	require.NoError(t, err)
	assert.Equal(t, []int64{ProgressInterval, res.Events}, calls)
}

func TestReplayStrategyFromParams(t *testing.T) {
	gpualloc.Register(gpualloc.Strategy{
		Name:    "simtest-exact",
		Summary: "every alloc a device allocation (sim's tests)",
		Params:  []gpualloc.Param{{Name: "page", Default: "4096", Doc: "unused"}},
		New: func(b gpualloc.Backend, p *gpualloc.Params) (gpualloc.Allocator, error) {
			if _, err := p.Size("page"); err != nil {
				return nil, err
			}
			return openExact(b)
		},
	})
	p, err := gpualloc.Resolve(gpualloc.Spec{Name: "SimTest-Exact"}, nil)
	require.NoError(t, err)
	res, err := Replay(smallTrace().reader(), Config{Params: p})
	require.NoError(t, err)
	assert.Equal(t, Strategy{Spec: "simtest-exact:page=4096", Name: "simtest-exact",
		Params: []StrategyParam{{Key: "page", Value: "4096", Default: "4096"}}}, res.Strategy, "the structure, defaults included")
	assert.Equal(t, int64(6000), res.PeakReservedBytes)

	p, err = gpualloc.Resolve(gpualloc.Spec{Name: "simtest-exact", Params: []gpualloc.KeyValue{{Key: "page", Value: "x"}}}, nil)
	require.NoError(t, err)
	_, err = Replay(smallTrace().reader(), Config{Params: p, Trace: "t"})
	assert.EqualError(t, err, "t: simtest-exact: event 0: alloc of 1000 bytes (id 1, device 0): device 0: simtest-exact: page=x: not a size: want bytes or a number with a unit such as MiB")
}

// specAlloc reports its spec.
type specAlloc struct{ nopAlloc }

func (specAlloc) Spec() string { return "spec:k=v" }

func TestReplayStrategyFromSpecer(t *testing.T) {
	open := func(gpualloc.Backend) (gpualloc.Allocator, error) { return &specAlloc{}, nil }
	res, err := Replay(smallTrace().reader(), Config{Open: open})
	require.NoError(t, err)
	assert.Equal(t, Strategy{Spec: "spec:k=v", Name: "spec", Params: []StrategyParam{{Key: "k", Value: "v"}}}, res.Strategy)
}

func TestStrategyJSON(t *testing.T) {
	p, err := gpualloc.Select("naive:page=8KiB", nil)
	require.NoError(t, err)
	s := StrategyOf(p)
	assert.Equal(t, Strategy{Spec: "naive:page=8KiB,large_round=2097152,reserve=5", Name: "naive", Params: []StrategyParam{
		{Key: "page", Value: "8KiB", Default: "4096"},
		{Key: "large_round", Value: "2097152", Default: "2097152"},
		{Key: "reserve", Value: "5", Default: "5"},
	}}, s)
	b, err := json.Marshal(Result{Trace: "t", Strategy: s})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"strategy":"naive:page=8KiB,large_round=2097152,reserve=5"`, "the schema's string")
	var back Result
	require.NoError(t, json.Unmarshal(b, &back))
	want := s
	want.Params = slices.Clone(s.Params)
	for i := range want.Params {
		want.Params[i].Default = "" // not in the JSON
	}
	assert.Equal(t, want, back.Strategy)
}

// TestReplayAllocsNothingPerEvent checks that the replay loop allocates
// nothing per event: a trace ten times longer, with the same live
// allocations, costs the same number of allocations.
func TestReplayAllocsNothingPerEvent(t *testing.T) {
	tr := newTrace()
	for i := range uint64(100) {
		tr.alloc(i, int64(1+i*100))
	}
	for i := range uint64(100) {
		tr.free(i)
	}
	for i := range tr.events {
		tr.events[i].Device = int32(i % 3)
	}
	allocs := func(reps int) float64 {
		return testing.AllocsPerRun(5, func() {
			r := tr.reader()
			r.reps = reps
			res, err := Replay(r, Config{Open: openNop, NewBackend: newNullBackend, SeriesBuckets: 64})
			if err != nil || res.Events != int64(reps*len(tr.events)) {
				t.Fatal(res.Events, err)
			}
		})
	}
	short, long := allocs(100), allocs(1000)
	assert.Equal(t, short, long, "allocations of a replay of %d events and of %d", 100*len(tr.events), 1000*len(tr.events))

	// The same with the allocator talking to the counting wrapper, with
	// and without timing.
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) { return &exactAlloc{b: b}, nil }
	measure := false
	allocs = func(reps int) float64 {
		return testing.AllocsPerRun(5, func() {
			r := tr.reader()
			r.reps = reps
			if _, err := Replay(r, Config{Open: open, NewBackend: newNullBackend, Verify: true, MeasureTime: measure}); err != nil {
				t.Fatal(err)
			}
		})
	}
	short, long = allocs(100), allocs(1000)
	assert.Equal(t, short, long)
	measure = true
	short, long = allocs(100), allocs(1000)
	assert.Equal(t, short, long, "with MeasureTime")
}

func TestReplayMeasureTime(t *testing.T) {
	res, err := Replay(smallTrace().reader(), Config{Open: openCache, Strategy: "cache"})
	require.NoError(t, err)
	assert.Nil(t, res.AllocHitNSMean)
	assert.Nil(t, res.AllocDeviceNSMean)
	assert.Nil(t, res.DeviceCallNSTotal)
	js, err := json.Marshal(res)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"alloc_hit_ns_mean":null,"alloc_device_ns_mean":null,"device_call_ns_total":null`)

	// A backend whose every call takes a known time.
	var clock slowBackend
	newBackend := func(int) (gpualloc.Backend, error) {
		d, err := virtual.New(virtual.Options{Capacity: 1 << 30})
		clock.Backend = d
		return &clock, err
	}
	res, err = Replay(smallTrace().reader(), Config{Open: openCache, Strategy: "cache", NewBackend: newBackend, MeasureTime: true})
	require.NoError(t, err)
	require.NotNil(t, res.AllocHitNSMean)
	require.NotNil(t, res.AllocDeviceNSMean)
	require.NotNil(t, res.DeviceCallNSTotal)
	// Three device mallocs, one cache hit (see TestReplayCaching).
	assert.Equal(t, int64(3), clock.calls)
	assert.GreaterOrEqual(t, *res.DeviceCallNSTotal, 3*slowCall.Nanoseconds())
	assert.GreaterOrEqual(t, *res.AllocDeviceNSMean, float64(slowCall.Nanoseconds()))
	assert.Less(t, *res.AllocHitNSMean, *res.AllocDeviceNSMean)
}

// slowCall is how long each call of a slowBackend takes at least.
const slowCall = 2 * time.Millisecond

// slowBackend is a backend whose Malloc and Free sleep for slowCall.
type slowBackend struct {
	gpualloc.Backend
	calls int64
}

func (b *slowBackend) Malloc(size int64) (uint64, error) {
	b.calls++
	time.Sleep(slowCall)
	return b.Backend.Malloc(size)
}

func (b *slowBackend) Free(addr uint64, size int64) error {
	b.calls++
	time.Sleep(slowCall)
	return b.Backend.Free(addr, size)
}

// freeSpaceCache is cacheAlloc reporting its cached blocks as free space.
type freeSpaceCache struct{ *cacheAlloc }

func (a freeSpaceCache) FreeSpace() (largest, total int64) {
	for size, blocks := range a.free {
		if len(blocks) > 0 {
			largest = max(largest, size)
			total += size * int64(len(blocks))
		}
	}
	return largest, total
}

func TestReplayFreeSpaceAtPeak(t *testing.T) {
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) {
		a, err := openCache(b)
		return freeSpaceCache{a.(*cacheAlloc)}, err
	}
	// Reserved peaks at event 4 (1024 + 4096 + 8192 bytes) with the 1024
	// and 4096 blocks cached; later events free more, but the peak stays.
	tr := newTrace().alloc(1, 1000).alloc(2, 4000).free(1).free(2).alloc(3, 8000).free(3).alloc(4, 100).free(4)
	res, err := Replay(tr.reader(), Config{Open: open, Verify: true})
	require.NoError(t, err)
	assert.Equal(t, int64(1024+4096+8192), res.PeakReservedBytes)
	require.NotNil(t, res.LargestFreeBytes)
	require.NotNil(t, res.FreeFragmentation)
	assert.Equal(t, int64(4096), *res.LargestFreeBytes)
	assert.InDelta(t, 1-4096.0/5120, *res.FreeFragmentation, 1e-15)

	// Without the interface the fields stay nil: null in JSON.
	res, err = Replay(newTrace().alloc(1, 1000).free(1).reader(), Config{Open: openCache})
	require.NoError(t, err)
	assert.Nil(t, res.LargestFreeBytes)
	assert.Nil(t, res.FreeFragmentation)
	js, err := json.Marshal(res)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"largest_free_bytes":null,"free_fragmentation":null`)
}

// The bytes of all device allocations, summed over a run, stay at 2^63-1
// rather than wrap; the allocator's own Meter agrees (Verify).
func TestDeviceMallocBytesSaturate(t *testing.T) {
	const big = 6_000_000_000_000_000_000
	tr := newTrace().alloc(1, big).free(1).alloc(2, big).free(2)
	res, err := Replay(tr.reader(), Config{Trace: "big", Open: openExact, Strategy: "exact", Verify: true, Capacity: 7 << 60})
	require.NoError(t, err)
	assert.Equal(t, int64(math.MaxInt64), res.DeviceMallocBytes)
	assert.Equal(t, int64(math.MaxInt64), res.Devices[0].DeviceMallocBytes)
	assert.Equal(t, int64(big), res.PeakReservedBytes)
}

// midRunReader is a reader that says whether its trace is a window of a
// running program.
type midRunReader struct {
	traces.Reader
	midRun bool
}

func (r midRunReader) MidRun() bool { return r.midRun }

// A replay of a memory snapshot says that the trace is a window of a run,
// so that what is live at its end is not taken for a leak.
func TestReplayMidRun(t *testing.T) {
	tr := newTrace().alloc(1, 1000)
	for _, want := range []bool{true, false} {
		res, err := Replay(midRunReader{tr.reader(), want}, Config{Trace: "t", Open: openExact, Strategy: "exact"})
		require.NoError(t, err)
		assert.Equal(t, want, res.MidRun)
		assert.Equal(t, int64(1), res.LiveAtEnd)
	}
}
