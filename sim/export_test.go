package sim_test

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/viewercheck"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	_ "github.com/gpualloc/gpualloc/strategy/all"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
	"github.com/gpualloc/gpualloc/traces"
)

// A shaped trace is a bundled trace cut after max events, its allocations
// spread over devices and streams by a hash of their ids (an allocation's
// free stays on its device and stream).
type shaped struct {
	r                traces.Reader
	n, max           int
	devices, streams uint64
	ev               traces.Event
}

func (s *shaped) Scan() bool {
	if s.n >= s.max || !s.r.Scan() {
		return false
	}
	s.n++
	s.ev = s.r.Event()
	h := s.ev.ID * 0x9e3779b97f4a7c15
	if s.devices > 1 {
		s.ev.Device = int32((h >> 40) % s.devices)
	}
	if s.streams > 1 {
		s.ev.Stream = (h >> 20) % s.streams
	}
	return true
}

func (s *shaped) Event() traces.Event { return s.ev }
func (s *shaped) Err() error          { return s.r.Err() }

// A shape says how to cut and spread a bundled trace.
type shape struct {
	trace            string
	events           int
	devices, streams uint64
}

func (sh shape) String() string {
	return fmt.Sprintf("%s[:%d],%ddev,%dstreams", sh.trace, sh.events, max(sh.devices, 1), max(sh.streams, 1))
}

func (sh shape) open(t testing.TB) traces.Reader {
	t.Helper()
	b, ok := traces.LookupBundled(sh.trace)
	require.True(t, ok, sh.trace)
	r, err := b.Open()
	require.NoError(t, err)
	return &shaped{r: r, max: sh.events, devices: sh.devices, streams: sh.streams}
}

func params(t testing.TB, spec string) *gpualloc.Params {
	t.Helper()
	sel, err := gpualloc.Select(spec, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	return sel
}

// export replays the shaped trace with spec and returns the result, the
// snapshot and its file, which it holds to the viewer's rules: a window of
// entries need not start from an empty allocator, a whole trace must.
func export(t *testing.T, sh shape, spec string, capacity int64, entries int) (sim.Result, *snapshot.Snapshot, []byte) {
	t.Helper()
	var s *snapshot.Snapshot
	res, err := sim.Replay(sh.open(t), sim.Config{
		Params: params(t, spec), Capacity: capacity, SeriesBuckets: -1, SnapshotEntries: entries,
		Snapshot: func(x *snapshot.Snapshot) error { s = x; return nil },
	})
	require.NoError(t, err, "%s with %s", sh, spec)
	var b bytes.Buffer
	require.NoError(t, snapshot.Write(&b, s, snapshot.WriteOptions{}))
	// Streamed, through a spill file, the snapshot is the same bytes.
	var streamed bytes.Buffer
	_, err = sim.Replay(sh.open(t), sim.Config{
		Params: params(t, spec), Capacity: capacity, SeriesBuckets: -1, SnapshotEntries: entries, SnapshotTemp: t.TempDir(),
		SnapshotStream: func(x *snapshot.Stream) error { return snapshot.WriteStream(&streamed, x, snapshot.WriteOptions{}) },
	})
	require.NoError(t, err, "%s with %s, streamed", sh, spec)
	require.Equal(t, b.Bytes(), streamed.Bytes(), "%s with %s, streamed", sh, spec)
	require.NoError(t, viewercheck.Check(b.Bytes(), viewercheck.Options{Complete: entries == 0}), "%s with %s, %d entries", sh, spec, entries)
	back, err := snapshot.Read(bytes.NewReader(b.Bytes()), "export.pickle")
	require.NoError(t, err)
	if !sameSnapshot(s, back) {
		t.Fatalf("%s with %s: the file does not read back as written", sh, spec)
	}
	if entries > 0 {
		for d := range s.NumTraces() {
			require.LessOrEqual(t, s.Trace(d).Len(), entries, "device %d", d)
		}
	}
	return res, s, b.Bytes()
}

// replayExport replays an exported snapshot, read by the traces package,
// with spec, and compares the figures with the original replay's: they are
// the same for a whole trace without failed allocations (a failed
// allocation is an oom entry, which the reader does not replay). On several
// devices, the peaks of the sums over devices depend on how the devices'
// events interleave, which a snapshot keeps only in their times: events of
// the same microsecond come back in device order. There the figures of
// each device, and the counts, are the same. The reader takes a
// segment_free that no allocation of its own follows for a release of the
// cache (torch.cuda.empty_cache), which a strategy that gives memory back
// to the device at a free (unpooled) makes at every such free: the replay
// of its export has those release events too, which release nothing, so
// events are counted without releases.
func replayExport(t *testing.T, data []byte, spec string, capacity int64, want sim.Result) {
	t.Helper()
	r, err := traces.NewReader(bytes.NewReader(data), "export.pickle", traces.Options{})
	require.NoError(t, err)
	got, err := sim.Replay(r, sim.Config{Params: params(t, spec), Capacity: capacity, SeriesBuckets: -1})
	require.NoError(t, err)
	type figures struct {
		Events, Allocs, Frees, PeakRequested, PeakAllocated, PeakReserved int64
		Mallocs, Frees_, MallocBytes, Maps, Unmaps, Hits, OOMs            int64
		Devices                                                           []sim.DeviceResult
	}
	// A strategy that gives a segment back on a free (unpooled) writes
	// segment_free entries that no malloc follows, which the reader takes
	// for cache releases, as PyTorch would have made them; the strategy
	// has nothing cached to release then. Releases are left out.
	fig := func(r sim.Result) figures {
		devs := append([]sim.DeviceResult(nil), r.Devices...)
		for i := range devs {
			devs[i].Stats, devs[i].Releases = nil, 0
		}
		return figures{r.Events - r.Releases, r.Allocs, r.Frees, r.PeakRequestedBytes, r.PeakAllocatedBytes, r.PeakReservedBytes,
			r.DeviceMallocs, r.DeviceFrees, r.DeviceMallocBytes, r.DeviceMaps, r.DeviceUnmaps, r.CacheHits, r.OOMs, devs}
	}
	w, g := fig(want), fig(got)
	if len(want.Devices) > 1 {
		w.PeakRequested, w.PeakAllocated, w.PeakReserved = 0, 0, 0
		g.PeakRequested, g.PeakAllocated, g.PeakReserved = 0, 0, 0
	}
	require.Equal(t, w, g, "replay of the export")
}

// TestExportEveryStrategy exports a replay of every registered strategy on
// the start of each bundled trace, on one device and on three with several
// streams, on a device that runs out, and in a window of entries.
func TestExportEveryStrategy(t *testing.T) {
	shapes := []shape{
		{trace: "training", events: 3000},
		{trace: "transformer-cpu", events: 3000, devices: 3, streams: 2},
		{trace: "resnet18-cpu", events: 3000, streams: 3},
		{trace: "dynamic", events: 3000, devices: 2},
	}
	for _, name := range gpualloc.Names() {
		t.Run(name, func(t *testing.T) {
			for i, sh := range shapes {
				res, _, data := export(t, sh, name, 0, 0)
				require.Zero(t, res.OOMs)
				replayExport(t, data, name, 0, res)
				if i == 1 {
					export(t, sh, name, 0, 500)
				}
			}
			// A device far too small: failed allocations and releases.
			sh := shape{trace: "training", events: 3000, devices: 2}
			res, s, _ := export(t, sh, name, 600<<20, 0)
			require.Positive(t, res.OOMs, "the capacity forces failures")
			ooms := 0
			for d := range s.NumTraces() {
				for _, e := range s.Trace(d).All() {
					if e.Action == snapshot.OutOfMemory {
						ooms++
						require.LessOrEqual(t, e.Addr, uint64(600<<20), "device_free")
					}
				}
			}
			require.EqualValues(t, res.OOMs, ooms)
			export(t, sh, name, 600<<20, 100)
		})
	}
}

// pytorchSettings are the settings of the pytorch strategy under which its
// exports are checked.
var pytorchSettings = []string{
	"pytorch",
	"pytorch:max_split_size_mb=20",
	"pytorch:max_split_size_mb=64,max_non_split_rounding_mb=40",
	"pytorch:roundup_power2_divisions=4",
	"pytorch:roundup_power2_divisions=1:1;64:8;256:2;>:1",
	"pytorch:garbage_collection_threshold=0.6,memory_fraction=0.05",
	"pytorch:expandable_segments=true",
	"pytorch:expandable_segments=true,roundup_power2_divisions=8",
}

// TestExportPyTorch exports replays of the pytorch strategy under many
// settings, shapes and capacities, and runs the fidelity check on each
// whole export: it must match every address and decision, every segment
// allocated and freed, and every failed allocation.
func TestExportPyTorch(t *testing.T) {
	shapes := []shape{
		{trace: "training", events: 4000},
		{trace: "dynamic", events: 4000, streams: 2},
		{trace: "transformer-cpu", events: 4000, devices: 2, streams: 3},
		{trace: "resnet18-cpu", events: 4000},
	}
	for _, spec := range pytorchSettings {
		t.Run(spec, func(t *testing.T) {
			compared := 0
			for _, sh := range shapes {
				for _, capacity := range []int64{0, 1 << 30} {
					res, s, data := export(t, sh, spec, capacity, 0)
					if res.OOMs == 0 {
						replayExport(t, data, spec, capacity, res)
					}
					if capacity == 0 {
						export(t, sh, spec, capacity, 300)
					}
					fr, err := fidelity.Run(s, sh.String(), fidelity.Options{New: fidelity.PyTorch})
					require.NoError(t, err, "%s with %s", sh, spec)
					for _, r := range fr {
						assert.Equal(t, r.Allocs, r.AddressMatches, "%s with %s: %+v", sh, spec, r.Mismatches)
						assert.Equal(t, r.Allocs, r.DecisionMatches, "%s with %s", sh, spec)
						assert.Equal(t, r.SegmentAllocs, r.SegmentMatches, "%s with %s", sh, spec)
						assert.Equal(t, r.SegmentFrees, r.SegmentFreeMatches, "%s with %s", sh, spec)
						assert.Equal(t, r.OOMs, r.OOMMatches, "%s with %s", sh, spec)
						assert.Positive(t, r.Allocs)
					}
					compared++
				}
			}
			require.Positive(t, compared, "fidelity ran on no export")
		})
	}
}

// sameSnapshot reports whether a and b hold the same, their traces
// compared entry by entry, however each holds them.
func sameSnapshot(a, b *snapshot.Snapshot) bool {
	if a.NumTraces() != b.NumTraces() || !reflect.DeepEqual(a.Segments, b.Segments) || !reflect.DeepEqual(a.AllocatorSettings, b.AllocatorSettings) ||
		!reflect.DeepEqual(a.Frames, b.Frames) || !reflect.DeepEqual(a.Stacks, b.Stacks) {
		return false
	}
	for d := range a.NumTraces() {
		if !reflect.DeepEqual(a.Trace(d).Entries(), b.Trace(d).Entries()) {
			return false
		}
	}
	return true
}
