package tune

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/internal/replaytest"
	"github.com/gpualloc/gpualloc/sim"
)

func TestConf(t *testing.T) {
	for _, tc := range []struct {
		s    Setting
		want string
	}{
		{Setting{}, ""},
		{Setting{ExpandableSegments: true}, "expandable_segments:True"},
		{Setting{MaxSplitMB: 128, Divisions: 4, GCThreshold: 0.8, ExpandableSegments: true},
			"max_split_size_mb:128,roundup_power2_divisions:4,garbage_collection_threshold:0.8,expandable_segments:True"},
	} {
		assert.Equal(t, tc.want, tc.s.Conf())
	}
}

func TestAdjacent(t *testing.T) {
	assert.Equal(t, []int64{4096}, adjacent(splitLadder, 0), "unlimited is the top of the ladder")
	assert.Equal(t, []int64{96, 192}, adjacent(splitLadder, 128))
	assert.Equal(t, []int64{24}, adjacent(splitLadder, 20))
	assert.Equal(t, []int64{96, 128}, adjacent(splitLadder, 100), "between rungs")
	assert.Equal(t, []int64{1}, adjacent(divisionsLadder, 0))
	assert.Equal(t, []float64{0.9}, adjacent(gcLadder, 0.95))
}

func TestFront(t *testing.T) {
	trial := func(peak, mallocs, ooms int64) *Trial {
		return &Trial{Setting: Setting{MaxSplitMB: peak}, Result: sim.Result{PeakReservedBytes: peak, DeviceMallocs: mallocs, OOMs: ooms}}
	}
	ranked := []*Trial{trial(10, 50, 0), trial(10, 60, 0), trial(12, 40, 0), trial(13, 45, 0), trial(15, 10, 0), trial(5, 1, 3)}
	got := (&tuner{}).front(ranked)
	var peaks []int64
	for _, tr := range got {
		peaks = append(peaks, tr.Result.PeakReservedBytes)
	}
	assert.Equal(t, []int64{10, 12, 15}, peaks)
}

// TestRunBundled tunes the bundled dynamic trace: the setting found is
// never worse than PyTorch's defaults, is the best of every setting tried,
// and the search went past the coarse grid.
func TestRunBundled(t *testing.T) {
	events := replaytest.BundledEvents(t, "dynamic")
	rep, err := Run(context.Background(), "dynamic", events, Options{})
	require.NoError(t, err)
	assert.Zero(t, rep.Best.Result.OOMs)
	assert.LessOrEqual(t, rep.Best.Result.PeakReservedBytes, rep.Default.Result.PeakReservedBytes)
	assert.Equal(t, Setting{}, rep.Default.Setting)
	assert.Greater(t, rep.Tried, 24, "the fine search tried neighbours")
	require.NotEmpty(t, rep.Front)
	assert.Equal(t, rep.Best, rep.Front[0], "the best is the front's lowest peak")
	assert.Equal(t, int64(virtual.DefaultCapacity), rep.Capacity)

	// On a device just the size of that peak, under a memory fraction
	// (which brings garbage_collection_threshold into the search), a
	// setting without OOM is still found.
	small := rep.Best.Result.PeakReservedBytes
	rep2, err := Run(context.Background(), "dynamic", events, Options{Capacity: small, MemoryFraction: 1})
	require.NoError(t, err)
	assert.Zero(t, rep2.Best.Result.OOMs)
	assert.LessOrEqual(t, rep2.Best.Result.PeakReservedBytes, small)
	t.Logf("at %d bytes: best %q peak %d; defaults peak %d with %d OOMs; %d tried",
		small, rep2.Best.Setting.Conf(), rep2.Best.Result.PeakReservedBytes,
		rep2.Default.Result.PeakReservedBytes, rep2.Default.Result.OOMs, rep2.Tried)
}

func TestRunErrors(t *testing.T) {
	_, err := Run(context.Background(), "x", nil, Options{Capacity: -1})
	assert.EqualError(t, err, "tune: negative capacity -1")
	_, err = Run(context.Background(), "x", nil, Options{MemoryFraction: 2})
	assert.EqualError(t, err, "tune: memory fraction 2: want a number in (0, 1], or 0 for none")
	// A cap that rounds to nothing is no "no cap".
	_, err = Run(context.Background(), "x", nil, Options{MemoryFraction: 1e-300})
	assert.EqualError(t, err, "tune: memory fraction 1e-300 of 80.0 GiB caps reserved memory at 0 B, under PyTorch's smallest segment (2.00 MiB): every allocation fails whatever the setting")
	_, err = Run(context.Background(), "x", nil, Options{Capacity: 1 << 30, MemoryFraction: 0.001})
	assert.ErrorContains(t, err, "caps reserved memory at 1.02 MiB")
}

// TestRankEachDevice: on a trace of several devices, a setting ranks by
// the largest device's peak, which a device of the capacity must hold,
// not by the peak of the devices' sum.
func TestRankEachDevice(t *testing.T) {
	trial := func(split, sum int64, peaks ...int64) *Trial {
		r := sim.Result{PeakReservedBytes: sum}
		for d, p := range peaks {
			r.Devices = append(r.Devices, sim.DeviceResult{Device: d, PeakReservedBytes: p})
		}
		return &Trial{Setting: Setting{MaxSplitMB: split}, Result: r}
	}
	even := trial(32, 100, 50, 50)  // 50 on each device
	uneven := trial(64, 90, 80, 10) // less in all, 80 on one device
	all := &tuner{}
	assert.Equal(t, -1, all.compare(even, uneven))
	assert.Equal(t, int64(50), PeakReserved(even.Result))
	assert.Equal(t, int64(80), PeakReserved(uneven.Result))
	got := all.front([]*Trial{even, uneven})
	require.Len(t, got, 1)
	assert.Equal(t, even.Setting, got[0].Setting)
	// Ranked for device 1 alone, its own peak decides, and the front is
	// of its figures.
	one := 1
	dev1 := &tuner{opts: Options{Device: &one}}
	assert.Equal(t, 1, dev1.compare(even, uneven))
	got = dev1.front([]*Trial{uneven, even})
	require.Len(t, got, 1)
	assert.Equal(t, uneven.Setting, got[0].Setting)
	// An OOM on another device does not count against device 1.
	uneven.Result.Devices[0].OOMs, uneven.Result.OOMs = 2, 2
	assert.Equal(t, 1, dev1.compare(even, uneven))
	assert.Equal(t, -1, all.compare(even, uneven))
	// One device: its peak is the trace's.
	assert.Equal(t, int64(7), PeakReserved(sim.Result{PeakReservedBytes: 7, Devices: []sim.DeviceResult{{PeakReservedBytes: 7}}}))
}

// TestSplitRange: the plateau of max_split_size_mb around the best value
// is the run of values tried, the other settings as the best's, that give
// its peaks; a value between that gives another breaks it, and other
// settings and unlimited are no part of it.
func TestSplitRange(t *testing.T) {
	tr := &tuner{seen: map[Setting]*Trial{}}
	add := func(s Setting, peak, ooms int64) *Trial {
		x := &Trial{Setting: s, Result: sim.Result{PeakReservedBytes: peak, OOMs: ooms}}
		tr.seen[s] = x
		return x
	}
	for _, ms := range []int64{20, 24, 48, 64, 100, 128, 512} {
		add(Setting{MaxSplitMB: ms}, 10, 0)
	}
	add(Setting{MaxSplitMB: 32}, 11, 0)   // breaks the plateau below 48
	add(Setting{MaxSplitMB: 1024}, 10, 2) // the peak, with OOMs
	add(Setting{}, 10, 0)                 // unlimited: no finite value
	add(Setting{MaxSplitMB: 768, Divisions: 2}, 10, 0)
	best := tr.seen[Setting{MaxSplitMB: 100}]
	assert.Equal(t, [2]int64{48, 512}, tr.splitRange(best))

	// A value alone gives no range; nor does unlimited.
	lone := add(Setting{MaxSplitMB: 96, ExpandableSegments: true}, 5, 0)
	assert.Equal(t, [2]int64{}, tr.splitRange(lone))
	assert.Equal(t, [2]int64{}, tr.splitRange(tr.seen[Setting{}]))
}
