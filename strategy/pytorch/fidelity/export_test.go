package fidelity_test

import (
	"bytes"
	"cmp"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
	"github.com/gpualloc/gpualloc/traces"
)

// exportEvents is how much of each bundled trace the self-test replays:
// enough for segments to be freed, reused and split many times over.
const exportEvents = 3000

// bundledHead returns the first n events of each bundled trace.
func bundledHead(t *testing.T, n int) map[string][]traces.Event {
	t.Helper()
	out := map[string][]traces.Event{}
	for _, b := range traces.Bundled() {
		r, err := b.Open()
		require.NoError(t, err)
		var evs []traces.Event
		for len(evs) < n && r.Scan() {
			evs = append(evs, r.Event())
		}
		require.NoError(t, r.Err())
		out[b.Name] = evs
	}
	return out
}

// spread gives each allocation a stream (of streams) and a device (of
// devices) drawn from its ID, and its free the same.
func spread(evs []traces.Event, streams, devices int) []traces.Event {
	out := make([]traces.Event, len(evs))
	for i, ev := range evs {
		h := ev.ID * 0x9e3779b97f4a7c15
		ev.Stream = (h >> 32) % uint64(streams)
		ev.Device = int32((h >> 40) % uint64(devices))
		out[i] = ev
	}
	return out
}

// export replays evs with the pytorch strategy configured by conf on
// devices of capacity bytes and returns the snapshot it records, keeping
// the last entries of each device (all for 0), written as a pickle and
// read back.
func export(t *testing.T, evs []traces.Event, conf string, capacity int64, entries int) (*snapshot.Snapshot, sim.Result) {
	t.Helper()
	c, err := pytorch.ParseConf(conf)
	require.NoError(t, err)
	var got *snapshot.Snapshot
	res, err := sim.Replay(traces.NewSliceReader("t", evs), sim.Config{
		Open:            func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(b, c) },
		Capacity:        capacity,
		SnapshotEntries: entries,
		Snapshot:        func(s *snapshot.Snapshot) error { got = s; return nil },
	})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, snapshot.Write(&buf, got, snapshot.WriteOptions{}))
	s, err := snapshot.Read(&buf, "export.pickle")
	require.NoError(t, err)
	return s, res
}

// TestExports replays the bundled traces with the pytorch strategy under
// many settings, exports each replay as a snapshot, whole and as ring-buffer
// windows of several sizes, and checks that fidelity takes every recorded
// decision: each address, each segment allocated, mapped, freed and
// unmapped, each recorded OOM.
func TestExports(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the bundled traces")
	}
	heads := map[int]map[string][]traces.Event{exportEvents: bundledHead(t, exportEvents)}
	gcFrees := map[string]int64{}
	for _, tc := range []struct {
		name             string
		conf             string
		streams, devices int
		capacity         int64 // percent of the trace's peak of live bytes; 0: 80 GiB
		oom              bool  // the capacity forces out of memory
		// gc: garbage collection frees segments. The ages that it goes by
		// (lookups since a block was freed) are not in a snapshot, so that
		// only whole traces are replayed: a window starts with ages unknown.
		gc bool
		// trace: only this bundled trace, of events events (0:
		// exportEvents). mapFail: an allocation maps pages, is refused the
		// next ones, releases its cached pages and maps anew.
		trace   string
		events  int
		mapFail bool
	}{
		{name: "default", conf: ""},
		{name: "max_split", conf: "max_split_size_mb:40"},
		{name: "max_split_rounding", conf: "max_split_size_mb:20,max_non_split_rounding_mb:40"},
		{name: "divisions", conf: "roundup_power2_divisions:4"},
		{name: "divisions_list", conf: "roundup_power2_divisions:[1:2,64:8,>:4]"},
		{name: "gc", conf: "garbage_collection_threshold:0.6"}, // inert without a memory fraction, as in PyTorch
		{name: "gc_fraction", conf: "garbage_collection_threshold:0.4,memory_fraction:0.8", capacity: 150, gc: true},
		{name: "gc_max_split", conf: "garbage_collection_threshold:0.5,memory_fraction:0.9,max_split_size_mb:30", capacity: 140, gc: true},
		{name: "expandable", conf: "expandable_segments:True"},
		{name: "streams", conf: "", streams: 3},
		{name: "devices", conf: "max_split_size_mb:64", streams: 2, devices: 3},
		{name: "expandable_streams", conf: "expandable_segments:True", streams: 2, devices: 2},
		{name: "oom", conf: "", capacity: 75, oom: true},
		{name: "oom_max_split", conf: "max_split_size_mb:24", capacity: 75, oom: true},
		{name: "oom_expandable", conf: "expandable_segments:True", capacity: 75, oom: true},
		// A device of 40% of the peak: most large requests fail, many in
		// a row, each after its own release of cached segments.
		{name: "oom_tight", conf: "", capacity: 40, oom: true},
		{name: "oom_tight_max_split", conf: "max_split_size_mb:24", capacity: 40, oom: true},
		{name: "oom_tight_expandable", conf: "expandable_segments:True", capacity: 40, oom: true},
		{name: "map_fail", conf: "expandable_segments:True", capacity: 55, oom: true, trace: "dynamic", events: 20000, mapFail: true},
		{name: "map_fail_streams", conf: "expandable_segments:True", streams: 2, devices: 2, capacity: 25, oom: true, trace: "dynamic", events: 20000, mapFail: true},
		{name: "map_fail_loose", conf: "expandable_segments:True", capacity: 88, oom: true, trace: "training", events: 20000, mapFail: true},
		// A range reserved by an oom, whose first map the device refused,
		// is mapped only much later.
		{name: "map_fail_oom_range", conf: "expandable_segments:True", capacity: 91, oom: true, trace: "training", events: 20000, mapFail: true},
		{name: "map_fail_loose_streams", conf: "expandable_segments:True", streams: 2, devices: 2, capacity: 49, oom: true, trace: "training", events: 20000, mapFail: true},
	} {
		n := cmp.Or(tc.events, exportEvents)
		if heads[n] == nil {
			heads[n] = bundledHead(t, n)
		}
		for name, evs := range heads[n] {
			if tc.trace != "" && name != tc.trace {
				continue
			}
			evs := spread(evs, max(tc.streams, 1), max(tc.devices, 1))
			capacity := peakLive(evs) * tc.capacity / 100
			for _, entries := range []int{0, 3000, 700, 60} {
				if tc.gc && entries > 0 {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%d", tc.name, name, entries), func(t *testing.T) {
					s, rep := export(t, evs, tc.conf, capacity, entries)
					res, err := fidelity.Run(s, "export.pickle", fidelity.Options{New: fidelity.PyTorch, MaxMismatches: 3})
					require.NoError(t, err)
					var ooms, frees int64
					for _, r := range res {
						t.Logf("device %d: addresses %d/%d decisions %d/%d segments %d/%d segment frees %d/%d ooms %d/%d; %d live and %d segments at the start",
							r.Device, r.AddressMatches, r.Allocs, r.DecisionMatches, r.Allocs, r.SegmentMatches, r.SegmentAllocs,
							r.SegmentFreeMatches, r.SegmentFrees, r.OOMMatches, r.OOMs, r.InitialLive, r.InitialSegs)
						assert.Equal(t, r.Allocs, r.DecisionMatches, "device %d", r.Device)
						if entries > 0 && midAlloc(s.Trace(r.Device).Entries()) {
							// The window begins inside an allocation that
							// the device refused pages: running free from
							// its start, the strategy does not know the
							// attempt, which the record follows.
							continue
						}
						require.Empty(t, r.Mismatches, "device %d", r.Device)
						assert.Equal(t, r.Allocs, r.AddressMatches, "device %d", r.Device)
						assert.Equal(t, r.SegmentAllocs, r.SegmentMatches, "device %d", r.Device)
						assert.Equal(t, r.SegmentFrees, r.SegmentFreeMatches, "device %d", r.Device)
						assert.Equal(t, r.OOMs, r.OOMMatches, "device %d", r.Device)
						assert.Zero(t, r.ExtraMallocs, "device %d", r.Device)
						ooms += r.OOMs
						frees += r.SegmentFrees
					}
					if tc.gc {
						gcFrees[tc.name] += frees
					}
					if tc.oom && entries == 0 {
						assert.Equal(t, rep.OOMs, ooms, "every failed allocation is a recorded oom")
						assert.Positive(t, ooms, "the capacity forces out of memory")
					}
					if tc.mapFail && entries == 0 {
						assert.True(t, mapFailed(s), "a segment_unmap follows a segment_map")
					}
				})
			}
		}
	}
	for name, n := range gcFrees {
		assert.Positive(t, n, "%s: garbage collection frees segments", name)
	}
}

// mapFailed reports whether a segment_unmap follows a segment_map in a
// trace of s: an allocation that mapped pages failed to map more.
func mapFailed(s *snapshot.Snapshot) bool {
	for d := range s.NumTraces() {
		tr := s.Trace(d)
		for i := 1; i < tr.Len(); i++ {
			if tr.Action(i-1) == snapshot.SegmentMap && tr.Action(i) == snapshot.SegmentUnmap {
				return true
			}
		}
	}
	return false
}

// midAlloc reports whether trace tr begins with the release of an
// allocation whose first entries it lacks: segment_unmap entries, then
// segment_map entries and the alloc.
func midAlloc(tr []snapshot.TraceEntry) bool {
	i := 0
	for i < len(tr) && tr[i].Action == snapshot.SegmentUnmap {
		i++
	}
	if i == 0 {
		return false
	}
	for i < len(tr) && tr[i].Action == snapshot.SegmentMap {
		i++
	}
	return i < len(tr) && (tr[i].Action == snapshot.Alloc || tr[i].Action == snapshot.OutOfMemory)
}

// peakLive returns the peak of live requested bytes of evs on one device.
func peakLive(evs []traces.Event) int64 {
	var live, peak int64
	for _, ev := range evs {
		if ev.Op == traces.OpAlloc {
			live += ev.Size
		} else {
			live -= ev.Size
		}
		peak = max(peak, live)
	}
	return peak
}

// TestWindowRebuild checks the start-state rebuild on windows of exports:
// the segments and blocks that InitialState rebuilds for a window (with the
// segment_alloc it implies, State.Fresh) are those that following the whole
// record up to the window's start gives, hidden tails included (blocks
// larger than their rounded request, which the window's entries do not
// record); and on windows of 1 to 40 entries, fidelity takes every decision.
func TestWindowRebuild(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the bundled traces")
	}
	tails, fresh := 0, 0
	for name, evs := range bundledHead(t, exportEvents) {
		for _, conf := range []string{"", "max_split_size_mb:40", "max_split_size_mb:20", "expandable_segments:True", "roundup_power2_divisions:4"} {
			full, _ := export(t, evs, conf, 0, 0)
			rules, err := full.AllocatorSettings.Rules()
			require.NoError(t, err)
			tr := full.Trace(0).Entries()
			// Short windows: every decision is PyTorch's, even where the
			// window's few entries leave a tail undecided (a tail no entry
			// of the window can see changes no decision in it).
			for n := 1; n <= 40; n++ {
				w := *full
				w.SetTraces(tr[len(tr)-n:])
				st, err := w.InitialState(0)
				require.NoError(t, err)
				if len(st.Fresh) > 0 {
					fresh++ // the window starts after a segment_alloc
				}
				res, err := fidelity.Run(&w, "w.pickle", fidelity.Options{New: fidelity.PyTorch})
				require.NoError(t, err)
				for _, r := range res {
					require.Empty(t, r.Mismatches, "%s %q, the last %d entries", name, conf, n)
					require.Equal(t, r.Allocs, r.DecisionMatches, "%s %q, the last %d entries", name, conf, n)
				}
			}
			for _, n := range []int{60, 300, 700, 1500, 2500} {
				start := len(tr) - n
				w := *full
				w.SetTraces(tr[start:])
				got, err := w.InitialState(0)
				require.NoError(t, err)
				if len(got.Fresh) > 0 {
					// The window starts at an alloc whose new segment's
					// segment_alloc it cut off.
					k := snapshot.NewTracker(got, rules)
					for i := range got.Fresh {
						require.NoError(t, k.Apply(&got.Fresh[i]))
					}
					got = k.State(0)
				}
				k := snapshot.NewTracker(&snapshot.State{}, rules)
				for i := range tr[:start] {
					require.NoError(t, k.Apply(&tr[i]))
				}
				want := k.State(0)
				require.Equal(t, want, got, "%s %q, the last %d entries", name, conf, n)
				for _, sg := range want.Segments {
					for _, b := range sg.Blocks {
						if b.Live() && b.Size > rules.RoundSize(b.RequestedSize) {
							tails++
						}
					}
				}
			}
		}
	}
	t.Logf("%d hidden tails rebuilt; %d windows start after a segment_alloc", tails, fresh)
	assert.Positive(t, tails, "the windows start with hidden tails")
}

// BenchmarkRun measures fidelity on an export of the first 3,000 events of
// the bundled dynamic trace (both replays, free-running and following the
// record), whole and as a window of its last 700 entries, whose start state
// is rebuilt: entries/s counts the trace entries compared.
func BenchmarkRun(b *testing.B) {
	t := &testing.T{}
	evs := bundledHead(t, exportEvents)["dynamic"]
	for _, entries := range []int{0, 700} {
		s, _ := export(t, evs, "", 0, entries)
		n := s.Trace(0).Len()
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := fidelity.Run(s, "b.pickle", fidelity.Options{New: fidelity.PyTorch}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// TestExportOOMReleases exports failures in a row on a device of 8 MiB:
// the first large request fails after its release gives back the cached
// small segment; two blocks freed then make another segment whole, which
// the second failure's release gives back. Fidelity takes each segment
// freed (or unmapped) where the record has it.
func TestExportOOMReleases(t *testing.T) {
	const csv = "op,id,size\n" +
		"alloc,1,1048576\nalloc,2,1048576\nalloc,3,1048576\nfree,3,\n" +
		"alloc,4,6291456\n" + // fails: a new segment of 20 MiB
		"free,1,\nfree,2,\n" +
		"alloc,5,6291456\n" + // fails again
		"alloc,6,1048576\nfree,6,\n"
	r, err := traces.NewReader(strings.NewReader(csv), "t", traces.Options{})
	require.NoError(t, err)
	evs, err := traces.ReadAll(r)
	require.NoError(t, err)
	for _, conf := range []string{"", "max_split_size_mb:24", "expandable_segments:True"} {
		t.Run(cmp.Or(conf, "default"), func(t *testing.T) {
			s, rep := export(t, evs, conf, 8<<20, 0)
			require.Equal(t, int64(2), rep.OOMs)
			res, err := fidelity.Run(s, "export.pickle", fidelity.Options{New: fidelity.PyTorch})
			require.NoError(t, err)
			require.Len(t, res, 1)
			r := res[0]
			require.Empty(t, r.Mismatches)
			assert.Equal(t, int64(2), r.OOMMatches)
			assert.Positive(t, r.SegmentFrees)
			assert.Equal(t, r.SegmentFrees, r.SegmentFreeMatches)
			assert.Equal(t, r.Allocs, r.DecisionMatches)
		})
	}
}

// TestExportMapFailure exports an allocation whose map fails partway, on a
// device of 100 MiB with expandable segments: the first four requests of
// 20 MiB map a page each and a small request maps a page of the small
// pool; with the second and third freed, a request of 100 MiB fails (its
// release unmaps them and the small page). A small request maps a page
// again, and the fourth block is freed: a request of 80 MiB then maps the
// two unmapped pages before the free one, is refused the page after it,
// releases every cached page, those just mapped included, and maps four
// pages anew. Fidelity takes each map, unmap and address where the record
// has them.
func TestExportMapFailure(t *testing.T) {
	const csv = "op,id,size\n" +
		"alloc,1,20971520\nalloc,2,20971520\nalloc,3,20971520\nalloc,4,20971520\n" +
		"alloc,5,524288\nfree,5,\nfree,2,\nfree,3,\n" +
		"alloc,6,104857600\n" + // fails
		"alloc,7,524288\nfree,7,\nfree,4,\n" +
		"alloc,8,83886080\n" + // maps two pages, fails, releases, maps four
		"free,8,\nfree,1,\n"
	r, err := traces.NewReader(strings.NewReader(csv), "t", traces.Options{})
	require.NoError(t, err)
	evs, err := traces.ReadAll(r)
	require.NoError(t, err)
	s, rep := export(t, evs, "expandable_segments:True", 100<<20, 0)
	require.Equal(t, int64(1), rep.OOMs)
	require.True(t, mapFailed(s), "a segment_unmap follows a segment_map")
	res, err := fidelity.Run(s, "export.pickle", fidelity.Options{New: fidelity.PyTorch})
	require.NoError(t, err)
	require.Len(t, res, 1)
	got := res[0]
	require.Empty(t, got.Mismatches)
	assert.Equal(t, got.Allocs, got.AddressMatches)
	assert.Equal(t, got.Allocs, got.DecisionMatches)
	assert.Equal(t, got.SegmentAllocs, got.SegmentMatches)
	assert.Equal(t, got.SegmentFrees, got.SegmentFreeMatches)
	assert.Equal(t, int64(1), got.OOMMatches)
	assert.Zero(t, got.ExtraMallocs)
}
