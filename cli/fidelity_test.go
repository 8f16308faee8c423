package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
)

var pkSettings = pk.Dict{{K: "PYTORCH_CUDA_ALLOC_CONF", V: ""}, {K: "max_split_size", V: -1}, {K: "garbage_collection_threshold", V: 0.0},
	{K: "expandable_segments", V: false}, {K: "roundup_power2_divisions", V: pk.Dict{{K: "1", V: 0}, {K: "2", V: 0}}}}

func pkEntry(action string, addr uint64, size int64) pk.Dict {
	return pk.Entry(action, addr, size, 0, -1)
}

func pkPickle(v pk.Dict) []byte { return pk.Encode(v, pk.Options{Proto: 4, Memo: true}) }

const (
	fA0 uint64 = 0x7f0000000000 // a small segment, 2 MiB
	fL0 uint64 = 0x7f0001000000 // a large segment, 20 MiB, allocated in the trace
)

// fidelitySnapshot is a snapshot whose trace starts with two blocks live in
// a small segment: it frees one and reuses its block, takes a large segment,
// frees the other and allocates 300 bytes at last, recorded at lastAddr
// (where PyTorch puts it: fA0; or elsewhere, for a mismatch).
func fidelitySnapshot(lastAddr uint64) []byte {
	var small []pk.Dict
	if lastAddr == fA0 {
		small = []pk.Dict{pk.Block(fA0, 512, 300, "active_allocated"), pk.Block(fA0+512, 512, 0, "inactive"),
			pk.Block(fA0+1024, 1024, 800, "active_allocated"), pk.Block(fA0+2048, 2<<20-2048, 0, "inactive")}
	} else {
		small = []pk.Dict{pk.Block(fA0, 1024, 0, "inactive"), pk.Block(fA0+1024, 1024, 800, "active_allocated"),
			pk.Block(fA0+2048, 512, 300, "active_allocated"), pk.Block(fA0+2560, 2<<20-2560, 0, "inactive")}
	}
	segs := []any{
		pk.Segment(0, fA0, 0, "small", small...),
		pk.Segment(0, fL0, 0, "large", pk.Block(fL0, 5<<20, 5<<20, "active_allocated"), pk.Block(fL0+5<<20, 15<<20, 0, "inactive")),
	}
	trace := []any{
		pkEntry("free_requested", fA0+1024, 600),
		pkEntry("free_completed", fA0+1024, 600),
		pkEntry("alloc", fA0+1024, 800),
		pkEntry("segment_alloc", fL0, 20<<20),
		pkEntry("alloc", fL0, 5<<20),
		pkEntry("free_requested", fA0, 1000),
		pkEntry("free_completed", fA0, 1000),
		pkEntry("alloc", lastAddr, 300),
	}
	return pkPickle(pk.Snapshot(segs, [][]any{trace}, pkSettings))
}

// fidelityFreesSnapshot is a snapshot with a max_split_size whose trace
// records a large segment given back, once its block is freed, before an
// alloc that PyTorch serves from the small segment's cache: no allocation
// made that release, which is the program's (an empty_cache recorded
// without frames), made at once, by fidelity as by a replay.
func fidelityFreesSnapshot() []byte {
	settings := append(pk.Dict(nil), pkSettings...)
	for i, kv := range settings {
		if kv.K == "max_split_size" {
			settings[i].V = 40 << 20
		}
	}
	segs := []any{pk.Segment(0, fA0, 0, "small", pk.Block(fA0, 512, 300, "active_allocated"), pk.Block(fA0+512, 512, 300, "active_allocated"),
		pk.Block(fA0+1024, 2<<20-1024, 0, "inactive"))}
	trace := []any{
		pkEntry("free_requested", fL0, 5<<20),
		pkEntry("free_completed", fL0, 5<<20),
		pkEntry("segment_free", fL0, 20<<20),
		pkEntry("alloc", fA0+512, 300),
	}
	return pkPickle(pk.Snapshot(segs, [][]any{trace}, settings))
}

// fidelityFiles are the test's snapshots, kept under testdata: -update
// rewrites them, and the test checks that they are what the encoder writes.
func fidelityFiles() map[string][]byte {
	bad := pkPickle(pk.Snapshot(nil, [][]any{{pkEntry("free_completed", fA0, 100)}}, nil))
	// torch.cuda.memory_snapshot(): a bare list of segments, one of them
	// expandable, with no history.
	exp := pk.Segment(0, fL0, 0, "large", pk.Block(fL0, 5<<20, 5<<20, "active_allocated"), pk.Block(fL0+5<<20, 15<<20, 0, "inactive"))
	for i, kv := range exp {
		if kv.K == "is_expandable" {
			exp[i].V = true
		}
	}
	legacy := pk.Encode([]any{pk.Segment(0, fA0, 0, "small", pk.Block(fA0, 512, 300, "active_allocated"), pk.Block(fA0+512, 2<<20-512, 0, "inactive")), exp},
		pk.Options{Proto: 2})
	return map[string][]byte{
		"fidelity_legacy.pickle":   legacy,
		"fidelity_match.pickle":    fidelitySnapshot(fA0),
		"fidelity_mismatch.pickle": fidelitySnapshot(fA0 + 2048),
		"fidelity_bad.pickle":      bad,
		"fidelity_frees.pickle":    fidelityFreesSnapshot(),
	}
}

func TestFidelityGolden(t *testing.T) {
	for name, data := range fidelityFiles() {
		path := filepath.Join("testdata", name)
		if *update {
			require.NoError(t, os.WriteFile(path, data, 0o644))
			continue
		}
		have, err := os.ReadFile(path)
		require.NoError(t, err, "run 'go test ./cli -update' to write it")
		require.Equal(t, data, have, "%s is not what the test's encoder writes (run with -update)", path)
	}
	p := func(name string) string { return "testdata/fidelity_" + name }
	goldenRuns(t, []goldenCase{
		{"fidelity_table", nil, []string{"fidelity", p("match.pickle"), p("mismatch.pickle")}, 0},
		{"fidelity_json", nil, []string{"fidelity", "-f", "json", p("match.pickle"), p("mismatch.pickle")}, 0},
		{"err_fidelity_bad", nil, []string{"fidelity", p("match.pickle"), p("bad.pickle")}, 1},
		{"err_fidelity_not_snapshot", nil, []string{"fidelity", "testdata/tiny.csv"}, 1},
		{"err_fidelity_no_args", nil, []string{"fidelity"}, 2},
		{"fidelity_csv", nil, []string{"fidelity", "-f", "csv", p("match.pickle"), p("mismatch.pickle")}, 0},
		{"fidelity_legacy", nil, []string{"fidelity", p("legacy.pickle"), p("match.pickle")}, 0},
		{"fidelity_frees", nil, []string{"fidelity", p("match.pickle"), p("frees.pickle")}, 0},
		{"fidelity_frees_csv", nil, []string{"fidelity", "-f", "csv", p("frees.pickle")}, 0},
		{"err_fidelity_format", nil, []string{"fidelity", "-f", "xml", p("match.pickle")}, 2},
	})
}

// sharedSnapshotDir holds real PyTorch snapshots where the project's shared
// fixtures are checked out beside it.
const sharedSnapshotDir = "../../shared/traces/pytorch"

// TestFidelityShared replays the shared real snapshots and reports their
// match rates; the pytorch strategy takes every recorded decision.
func TestFidelityShared(t *testing.T) {
	files := pk.SharedSnapshots(t, sharedSnapshotDir)
	var res []fidelity.Result
	runJSON(t, nil, &res, append([]string{"fidelity", "-f", "json"}, files...)...)
	require.GreaterOrEqual(t, len(res), len(files), "a row per file and device")
	for _, r := range res {
		t.Logf("%s device %d: %d/%d addresses, %d/%d decisions, %d/%d segments", filepath.Base(r.File), r.Device,
			r.AddressMatches, r.Allocs, r.DecisionMatches, r.Allocs, r.SegmentMatches, r.SegmentAllocs)
		switch base := filepath.Base(r.File); {
		case base == "segments_only.pickle" || base == "empty.pickle":
			assert.Nil(t, r.MatchRate, "no trace: no claim")
			assert.Nil(t, r.DecisionRate, "no trace: no claim")
			assert.Equal(t, "no allocation history: nothing to compare", r.Note)
			continue
		case base == "custom_fields.pickle":
			// A patched allocator that rounds to 256 bytes.
			assert.Contains(t, r.Note, "where PyTorch's blocks are multiples of 512 bytes (kMinBlockSize): a modified allocator")
			assert.Nil(t, r.DecisionRate)
			continue
		case strings.HasPrefix(base, "npu_"):
			assert.Contains(t, r.Allocator, "torch_npu", "%s", r.File)
		default:
			assert.Contains(t, r.Allocator, "CUDACachingAllocator", "%s", r.File)
		}
		assert.Equal(t, r.RecordedPeakReservedBytes, r.ReplayedPeakReservedBytes, "%s", r.File)
		assert.Equal(t, r.RecordedDeviceMallocs, r.ReplayedDeviceMallocs, "%s", r.File)
		assert.Zero(t, r.MaxReservedDiffBytes, "%s", r.File)
		require.NotNil(t, r.MatchRate, "%s", r.File)
		assert.Equal(t, 1.0, *r.MatchRate, "%s", r.File)
		assert.Equal(t, 1.0, *r.DecisionRate, "%s", r.File)
		assert.Equal(t, r.SegmentAllocs, r.SegmentMatches, "%s", r.File)
	}
}

// TestSharedNPUFigures replays the shared snapshots that torch_npu wrote
// with simulate's pytorch row, which takes torch_npu's rules and each
// device's settings from the file: every device's peak of reserved bytes
// and device allocations are those recorded.
func TestSharedNPUFigures(t *testing.T) {
	// What the files record, by device, pinned: the recorded side and the
	// replay cannot drift together.
	recorded := map[string][]struct{ peak, mallocs int64 }{
		"npu_empty_cache.pickle": {{662700032, 79}},
		"npu_expandable.pickle":  {{643825664, 46}},
		"npu_two_devices.pickle": {{643825664, 78}, {551550976, 52}},
	}
	for _, f := range pk.SharedSnapshots(t, sharedSnapshotDir) {
		if !strings.HasPrefix(filepath.Base(f), "npu_") {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			var fr []fidelity.Result
			runJSON(t, nil, &fr, "fidelity", "-f", "json", f)
			var res []struct {
				Device        *int   `json:"device"`
				Strategy      string `json:"strategy"`
				Peak          int64  `json:"peak_reserved_bytes"`
				DeviceMallocs int64  `json:"device_mallocs"`
			}
			runJSON(t, nil, &res, "-f", "json", "-s", "pytorch", f)
			byDev := map[int]int{}
			for i, r := range res {
				if r.Device != nil {
					byDev[*r.Device] = i
				} else if len(fr) == 1 {
					byDev[fr[0].Device] = i
				}
			}
			if pinned, ok := recorded[filepath.Base(f)]; ok {
				require.Len(t, fr, len(pinned))
				for d, p := range pinned {
					assert.Equal(t, [2]int64{p.peak, p.mallocs}, [2]int64{fr[d].RecordedPeakReservedBytes, fr[d].RecordedDeviceMallocs}, "device %d: recorded peak reserved and device mallocs", d)
				}
			}
			for _, want := range fr {
				i, ok := byDev[want.Device]
				require.True(t, ok, "device %d", want.Device)
				assert.Contains(t, res[i].Strategy, "device:npu")
				assert.Equal(t, want.RecordedPeakReservedBytes, res[i].Peak, "device %d: peak reserved", want.Device)
				assert.Equal(t, want.RecordedDeviceMallocs, res[i].DeviceMallocs, "device %d: device mallocs", want.Device)
			}
		})
	}
}

// TestSharedFigures replays the shared real snapshots with simulate's
// pytorch row and checks that it gives the figures PyTorch recorded: the
// peak of reserved bytes to the byte, the device allocations made during
// the trace, and the state the trace starts from.
func TestSharedFigures(t *testing.T) {
	// What the files record (the peak of reserved bytes walked back from
	// their segments through the trace, and their segment_alloc entries),
	// pinned: the recorded side and the replay cannot drift together.
	recorded := map[string]struct{ peak, mallocs int64 }{
		"forward_bf16_ctx128.pickle": {861929472, 0},
		"forward_ctx128.pickle":      {19667091456, 289},
		"segments_only.pickle":       {46137344, 0},
		"small_train_step.pickle":    {3781165056, 9},
	}
	for _, f := range pk.SharedSnapshots(t, sharedSnapshotDir) {
		if base := filepath.Base(f); strings.HasPrefix(base, "npu_") || base == "custom_fields.pickle" {
			continue // not records of PyTorch's CUDA allocator (see TestReplayAgreesWithFidelity)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			var fr []fidelity.Result
			runJSON(t, nil, &fr, "fidelity", "-f", "json", f)
			require.Len(t, fr, 1)
			if want, ok := recorded[filepath.Base(f)]; ok {
				assert.Equal(t, want.peak, fr[0].RecordedPeakReservedBytes, "recorded peak reserved")
				assert.Equal(t, want.mallocs, fr[0].RecordedDeviceMallocs, "recorded device mallocs")
			}
			var res []struct {
				Peak          int64 `json:"peak_reserved_bytes"`
				DeviceMallocs int64 `json:"device_mallocs"`
				StartSegments int64 `json:"start_segments"`
				OOMs          int64 `json:"ooms"`
			}
			runJSON(t, nil, &res, "-f", "json", "-s", "pytorch", f)
			require.Len(t, res, 1)
			assert.Equal(t, fr[0].RecordedPeakReservedBytes, res[0].Peak, "peak reserved")
			assert.Equal(t, fr[0].RecordedDeviceMallocs, res[0].DeviceMallocs, "device mallocs in the trace")
			if !strings.Contains(fr[0].Conf, "expandable_segments:True") {
				// With expandable segments, a replay's start segments are
				// its device allocations, one per page.
				assert.Equal(t, fr[0].InitialSegs, res[0].StartSegments, "segments at the start")
			}
			assert.Zero(t, res[0].OOMs)
			// Two replays share one decoding of the trace, and the
			// recorded state.
			var two []struct {
				Peak          int64 `json:"peak_reserved_bytes"`
				StartSegments int64 `json:"start_segments"`
			}
			runJSON(t, nil, &two, "-f", "json", "-s", "pytorch", "-s", "pytorch:max_non_split_rounding_mb=20", f)
			require.Len(t, two, 2)
			if fr[0].Conf != "" {
				// An explicit parameter replays without the recorded
				// settings.
				two = two[:1]
			}
			for _, r := range two {
				assert.Equal(t, res[0].Peak, r.Peak, "decoded once")
				assert.Equal(t, res[0].StartSegments, r.StartSegments, "decoded once")
			}
			t.Logf("peak reserved %d recorded, %d replayed; device mallocs %d recorded, %d replayed; %d start segments",
				fr[0].RecordedPeakReservedBytes, res[0].Peak, fr[0].RecordedDeviceMallocs, res[0].DeviceMallocs, res[0].StartSegments)
		})
	}
}

// TestFidelityRefusesExports compares a batch that holds an export of
// bestfit, which is no record of PyTorch's allocator: its row says so, the
// rows of the other files are printed, and the exit status is 1.
func TestFidelityRefusesExports(t *testing.T) {
	files := exportSnapshots(t, 2, "-s", "bestfit", "-s", "pytorch", "testdata/tiny.csv")
	var res []fidelity.Result
	code, stdout, stderr := run(t, nil, append([]string{"fidelity", "-f", "json"}, files...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "1 of 2 files could not be compared")
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Len(t, res, 2)
	for _, r := range res {
		if strings.Contains(filepath.Base(r.File), "bestfit") {
			assert.Contains(t, r.Error, "an export of the simulator's bestfit strategy, not a record of PyTorch's caching allocator")
			continue
		}
		assert.Empty(t, r.Error)
		assert.Equal(t, r.Allocs, r.DecisionMatches)
		assert.Equal(t, r.RecordedPeakReservedBytes, r.ReplayedPeakReservedBytes)
	}
	code, stdout, _ = run(t, nil, append([]string{"fidelity"}, files...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "not compared: an export of the simulator's bestfit strategy")
}

// TestFidelityOfExports exports pytorch replays, whole and as windows, with
// simulate --snapshot and checks them with simulate fidelity: every
// decision is the recorded one.
func TestFidelityOfExports(t *testing.T) {
	for _, args := range [][]string{
		{"-s", "pytorch", "-s", "pytorch:expandable_segments=true", "-s", "pytorch:max_split_size_mb=20,roundup_power2_divisions=4"},
		{"-s", "pytorch", "-s", "pytorch:expandable_segments=true", "-s", "pytorch:max_split_size_mb=20", "--snapshot-entries", "3"},
	} {
		files := exportSnapshots(t, 6, append(args, "testdata/tiny.csv", "testdata/twodev.csv")...)
		var res []fidelity.Result
		runJSON(t, nil, &res, append([]string{"fidelity", "-f", "json"}, files...)...)
		require.Len(t, res, 3*(1+2), "one row per file and device")
		for _, r := range res {
			assert.Empty(t, r.Mismatches, "%s device %d", r.File, r.Device)
			assert.Equal(t, r.Allocs, r.DecisionMatches, "%s device %d", r.File, r.Device)
			assert.Equal(t, r.SegmentAllocs, r.SegmentMatches, "%s device %d", r.File, r.Device)
		}
	}
}

// TestRecordedOOM replays a snapshot that records an out-of-memory error:
// without --capacity the device has the memory that the error tells (1 MiB
// free beside a 2 MiB segment), and the pytorch strategy fails the same
// request, 3 MiB; with --capacity it does not.
func TestRecordedOOM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oom.pickle")
	snap := pk.Snapshot([]any{pk.Segment(0, fA0, 0, "small", pk.Block(fA0, 512, 500, "active_allocated"), pk.Block(fA0+512, 2<<20-512, 0, "inactive"))},
		[][]any{{pkEntry("segment_alloc", fA0, 2<<20), pkEntry("alloc", fA0, 500),
			pk.Dict{{K: "action", V: "oom"}, {K: "device_free", V: 1 << 20}, {K: "size", V: 3 << 20}, {K: "stream", V: 0}}}}, pkSettings)
	require.NoError(t, os.WriteFile(path, pkPickle(snap), 0o644))
	for _, tc := range []struct {
		args     []string
		capacity int64
		ooms     int64
	}{
		{[]string{"-s", "pytorch"}, 3 << 20, 1},
		// Two strategies share one decoding of the trace.
		{[]string{"-s", "pytorch", "-s", "pytorch:max_split_size_mb=64"}, 3 << 20, 1},
		{[]string{"-s", "pytorch", "--capacity", "80GiB"}, 80 << 30, 0},
	} {
		var res []struct {
			Capacity int64 `json:"capacity_bytes"`
			OOMs     int64 `json:"ooms"`
			Allocs   int64 `json:"allocs"`
		}
		runJSON(t, nil, &res, append(append([]string{"-f", "json"}, tc.args...), path)...)
		require.NotEmpty(t, res)
		for _, r := range res {
			assert.Equal(t, tc.capacity, r.Capacity, "%v", tc.args)
			assert.Equal(t, tc.ooms, r.OOMs, "%v", tc.args)
			assert.Equal(t, int64(2), r.Allocs, "the alloc and the recorded request")
		}
	}

	// Converted to the native format, the trace keeps the device's
	// memory, and replays on the same device.
	csv := filepath.Join(t.TempDir(), "oom.csv")
	code, _, stderr := run(t, nil, "convert", path, csv)
	require.Equal(t, 0, code, stderr)
	var conv []struct {
		Capacity int64 `json:"capacity_bytes"`
		OOMs     int64 `json:"ooms"`
	}
	runJSON(t, nil, &conv, "-f", "json", "-s", "pytorch", csv)
	require.Len(t, conv, 1)
	assert.Equal(t, int64(3<<20), conv[0].Capacity)
	assert.Equal(t, int64(1), conv[0].OOMs)
	// tune searches on the same device: every setting fails there.
	code, stdout, stderr := run(t, nil, "tune", "-f", "json", csv)
	require.Equal(t, 1, code, "every setting runs out of memory: %s", stdout)
	assert.Contains(t, stderr, "on a device of 3.00 MiB")

	// Fidelity: the strategy fails the recorded request too.
	var fr []struct {
		OOMs       int64 `json:"ooms"`
		OOMMatches int64 `json:"oom_matches"`
	}
	runJSON(t, nil, &fr, "fidelity", "-f", "json", path)
	require.Len(t, fr, 1)
	assert.Equal(t, int64(1), fr[0].OOMs)
	assert.Equal(t, int64(1), fr[0].OOMMatches)
}
