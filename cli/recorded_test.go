package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
)

const rL0 uint64 = 0x7f0004000000 // a second large segment, after fL0

// writeSnapshot writes snapshot v into a temporary file and returns its
// path.
func writePickle(t *testing.T, v pk.Dict) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rec.pickle")
	require.NoError(t, os.WriteFile(path, pkPickle(v), 0o644))
	return path
}

// replayRow is what these tests read of a replay's row.
type replayRow struct {
	Strategy      string `json:"strategy"`
	Peak          int64  `json:"peak_reserved_bytes"`
	DeviceMallocs int64  `json:"device_mallocs"`
	DeviceFrees   int64  `json:"device_frees"`
	Releases      int64  `json:"releases"`
	StartReserved int64  `json:"start_reserved_bytes"`
	StartSegments int64  `json:"start_segments"`
	CacheHits     int64  `json:"cache_hits"`
	DeviceTime    int64  `json:"device_time_ns_est"`
}

func replayRows(t *testing.T, env map[string]string, args ...string) ([]replayRow, string) {
	t.Helper()
	code, stdout, stderr := run(t, env, append([]string{"-f", "json"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var rows []replayRow
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 1)
	return rows, stderr
}

// TestStartFreeSegment: a segment that is wholly free in the cache when
// the trace begins is restored, and the trace's alloc takes it, as PyTorch
// did, with no device allocation in the trace.
func TestStartFreeSegment(t *testing.T) {
	path := writePickle(t, pk.Snapshot([]any{
		pk.Segment(0, fL0, 0, "large", pk.Block(fL0, 5<<20, 5<<20, "active_allocated"), pk.Block(fL0+5<<20, 15<<20, 0, "inactive")),
	}, [][]any{{pkEntry("alloc", fL0, 5<<20)}}, pkSettings))
	rows, _ := replayRows(t, nil, "-s", "pytorch", path)
	r := rows[0]
	assert.Equal(t, int64(20<<20), r.Peak)
	assert.Equal(t, int64(20<<20), r.StartReserved)
	assert.Equal(t, int64(1), r.StartSegments)
	assert.Zero(t, r.DeviceMallocs, "served from the free segment restored")
	assert.Zero(t, r.DeviceTime, "the restored segment's device call is not the trace's")
	assert.Equal(t, int64(1), r.CacheHits)

	// Strategies that cannot restore start from nothing: their device
	// calls while allocating the start blocks (none here: the block is
	// allocated in the trace) are not the trace's.
	rows, _ = replayRows(t, nil, "-s", "bestfit", path)
	assert.Zero(t, rows[0].StartSegments)
	assert.Equal(t, int64(1), rows[0].DeviceMallocs)
	assert.Positive(t, rows[0].DeviceTime)
}

// emptyCacheSnapshot frees a block and empties the cache, then allocates a
// block of the same size, which takes a new segment: the segment_free is
// followed by a segment_alloc, as a malloc's own release would be. With
// frames that name empty_cache, the release is the program's.
func emptyCacheSnapshot(frames bool) pk.Dict {
	free := pkEntry("segment_free", fL0, 20<<20)
	if frames {
		free[len(free)-1] = pk.KV{K: "frames", V: []any{
			pk.Dict{{K: "filename", V: "CUDACachingAllocator.cpp"}, {K: "line", V: 1}, {K: "name", V: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache(std::pair<unsigned long long, unsigned long long>)"}},
			pk.Dict{{K: "filename", V: "/usr/lib/python3/site-packages/torch/cuda/memory.py"}, {K: "line", V: 1}, {K: "name", V: "empty_cache"}},
		}}
	}
	return pk.Snapshot([]any{
		pk.Segment(0, rL0, 0, "large", pk.Block(rL0, 5<<20, 5<<20, "active_allocated"), pk.Block(rL0+5<<20, 15<<20, 0, "inactive")),
	}, [][]any{{
		pkEntry("free_requested", fL0, 5<<20),
		pkEntry("free_completed", fL0, 5<<20),
		free,
		pkEntry("segment_alloc", rL0, 20<<20),
		pkEntry("alloc", rL0, 5<<20),
	}}, pk.Dict{{K: "PYTORCH_CUDA_ALLOC_CONF", V: ""}, {K: "max_split_size", V: -1}, {K: "expandable_segments", V: false}})
}

// TestEmptyCacheRelease replays the segment_free that empty_cache made
// as a release where it happened: the alloc after it takes a new segment,
// as it did. Without frames, the pattern reads it as the alloc's own
// release, which the strategy does not need: it reuses the cached segment.
func TestEmptyCacheRelease(t *testing.T) {
	rows, _ := replayRows(t, nil, "-s", "pytorch", writePickle(t, emptyCacheSnapshot(true)))
	r := rows[0]
	assert.Equal(t, int64(1), r.Releases)
	assert.Equal(t, int64(1), r.DeviceFrees)
	assert.Equal(t, int64(1), r.DeviceMallocs, "as recorded")
	assert.Equal(t, int64(20<<20), r.Peak)

	rows, _ = replayRows(t, nil, "-s", "pytorch", writePickle(t, emptyCacheSnapshot(false)))
	assert.Zero(t, rows[0].Releases)
	assert.Zero(t, rows[0].DeviceMallocs)
}

// TestRecordedSettings: the pytorch strategy given no parameter replays a
// snapshot with the settings it records, says so on stderr, and its spec
// shows them; a parameter or the environment overrides them.
func TestRecordedSettings(t *testing.T) {
	settings := pk.Dict{{K: "PYTORCH_CUDA_ALLOC_CONF", V: "max_split_size_mb:128"}, {K: "max_split_size", V: 128 << 20},
		{K: "garbage_collection_threshold", V: 0.0}, {K: "expandable_segments", V: false}}
	path := writePickle(t, pk.Snapshot([]any{
		pk.Segment(0, fL0, 0, "large", pk.Block(fL0, 5<<20, 5<<20, "active_allocated"), pk.Block(fL0+5<<20, 15<<20, 0, "inactive")),
	}, [][]any{{pkEntry("segment_alloc", fL0, 20<<20), pkEntry("alloc", fL0, 5<<20)}}, settings))

	rows, stderr := replayRows(t, nil, "-s", "pytorch", path)
	assert.Contains(t, rows[0].Strategy, "conf=max_split_size_mb:128")
	assert.Equal(t, "simulate: "+path+": pytorch replays with the allocator settings that it records (max_split_size_mb:128); a pytorch parameter or PYTORCH_CUDA_ALLOC_CONF overrides them\n"+
		"simulate: "+path+": written by PyTorch 2.8, as inferred from it: allocator_settings (recorded from 2.3, pytorch/pytorch#119404) without graph_capture_record_stream_reuse (recorded from 2.9): the last release before 2.9. pytorch's version=auto replays it as that release would; version=X.Y as another would\n", stderr)
	// A release named is the user's: nothing is inferred aloud.
	_, stderr = replayRows(t, nil, "-s", "pytorch:version=2.4", path)
	assert.NotContains(t, stderr, "written by")
	assert.Equal(t, int64(20<<20), rows[0].Peak)

	// tune reports the recorded settings as a baseline of their own,
	// with the figures of the replay above.
	code, stdout, stderr := run(t, nil, "tune", "-f", "json", path)
	require.Equal(t, 0, code, stderr)
	var tuned tuneResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &tuned))
	assert.Equal(t, "max_split_size_mb:128", tuned.RecordedConf)
	assert.Equal(t, rows[0].Peak, tuned.RecordedPeakReservedBytes)
	assert.Equal(t, rows[0].DeviceMallocs, tuned.RecordedDeviceMallocs)
	assert.Contains(t, stderr, path+": the \"as recorded\" baseline replays with the allocator settings that it records (max_split_size_mb:128)")
	code, stdout, _ = run(t, nil, "tune", path)
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "as recorded (max_split_size_mb:128)")

	// fidelity replays with them too, unless the environment says other.
	var fr []struct {
		Conf string `json:"conf"`
	}
	runJSON(t, nil, &fr, "fidelity", "-f", "json", path)
	require.Len(t, fr, 1)
	assert.Equal(t, "max_split_size_mb:128", fr[0].Conf)
	env := map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
	code, stdout, stderr = run(t, env, "fidelity", "-f", "json", path)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &fr))
	assert.Equal(t, "max_split_size_mb:64", fr[0].Conf)
	assert.Contains(t, stderr, "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64, not with the settings each snapshot records")

	for _, tc := range []struct {
		env  map[string]string
		args []string
		conf string
	}{
		{map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}, []string{"-s", "pytorch"}, "conf=max_split_size_mb:64"},
		{nil, []string{"-s", "pytorch:conf=none"}, "conf=none"},
		{nil, []string{"-s", "pytorch:expandable_segments=false"}, "conf=none"},
	} {
		rows, stderr := replayRows(t, tc.env, append(tc.args, path)...)
		assert.Contains(t, rows[0].Strategy, tc.conf, "%v %v", tc.env, tc.args)
		assert.NotContains(t, stderr, "allocator settings", "%v %v", tc.env, tc.args)
	}
}

// privateSnapshot has a private pool's segment (pool (1, 0)) with 15 MiB
// free beside a live block when the trace begins. The trace allocates
// 20 MiB in the default pool, which PyTorch serves from a new segment (the
// private pool's free bytes serve no request of the default pools), then
// 5 MiB in the private pool, served from its free bytes.
func privateSnapshot() pk.Dict {
	private := pk.Segment(0, rL0, 0, "large", pk.Block(rL0, 5<<20, 5<<20, "active_allocated"),
		pk.Block(rL0+5<<20, 5<<20, 5<<20, "active_allocated"), pk.Block(rL0+10<<20, 10<<20, 0, "inactive"))
	for i := range private {
		if private[i].K == "segment_pool_id" {
			private[i].V = [2]any{1, 0}
		}
	}
	return pk.Snapshot([]any{
		pk.Segment(0, fL0, 0, "large", pk.Block(fL0, 20<<20, 20<<20, "active_allocated")),
		private,
	}, [][]any{{pkEntry("segment_alloc", fL0, 20<<20), pkEntry("alloc", fL0, 20<<20), pkEntry("alloc", rL0+5<<20, 5<<20)}}, pkSettings)
}

// TestPrivatePool: a replay keeps a private pool's segment apart, as
// PyTorch does, and serves the allocations made in it from it; inspect
// lists the pools.
func TestPrivatePool(t *testing.T) {
	path := writePickle(t, privateSnapshot())
	rows, _ := replayRows(t, nil, "-s", "pytorch", path)
	r := rows[0]
	assert.Equal(t, int64(1), r.DeviceMallocs, "the default pool's request takes a new segment, the private pool's none")
	assert.Equal(t, int64(40<<20), r.Peak)
	assert.Equal(t, int64(20<<20), r.StartReserved)
	assert.Equal(t, int64(1), r.StartSegments)
	var fr []fidelity.Result
	runJSON(t, nil, &fr, "fidelity", "-f", "json", path)
	require.Len(t, fr, 1)
	assert.Equal(t, fr[0].RecordedPeakReservedBytes, r.Peak)
	assert.Equal(t, fr[0].RecordedDeviceMallocs, r.DeviceMallocs)

	code, stdout, stderr := run(t, nil, "inspect", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, path+": device 0: default pools: 1 segment, 20.0 MiB reserved; 2 trace entries\n")
	assert.Contains(t, stdout, path+": device 0: private pool (1, 0): 1 segment, 20.0 MiB reserved; 1 trace entry\n")
	var infos []struct {
		Pools []struct {
			Pool          [2]uint64 `json:"pool"`
			ReservedBytes int64     `json:"reserved_bytes"`
		} `json:"pools"`
	}
	runJSON(t, nil, &infos, "inspect", "-f", "json", path)
	require.Len(t, infos, 1)
	require.Len(t, infos[0].Pools, 2)
	assert.Equal(t, [2]uint64{1, 0}, infos[0].Pools[1].Pool)
	assert.Equal(t, int64(20<<20), infos[0].Pools[1].ReservedBytes)

	// A private pool that the trace does not touch: inspect says so.
	s := privateSnapshot()
	s[1].V = []any{[]any{pkEntry("segment_alloc", fL0, 20<<20), pkEntry("alloc", fL0, 20<<20)}}
	path = writePickle(t, s)
	code, stdout, stderr = run(t, nil, "inspect", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, path+": device 0: private pool (1, 0): 1 segment, 20.0 MiB reserved; no trace entry: the trace says nothing of it\n")
}

// TestEmptyDeviceTraces: PyTorch lists a trace for every device the
// process could use, most often empty; fidelity gives no row of zeros for
// them, and counts the devices as inspect does.
func TestEmptyDeviceTraces(t *testing.T) {
	path := writePickle(t, pk.Snapshot([]any{
		pk.Segment(0, fL0, 0, "large", pk.Block(fL0, 5<<20, 5<<20, "active_allocated"), pk.Block(fL0+5<<20, 15<<20, 0, "inactive")),
	}, [][]any{{pkEntry("segment_alloc", fL0, 20<<20), pkEntry("alloc", fL0, 5<<20)}, nil, nil, nil}, pkSettings))
	var fr []struct {
		Device int `json:"device"`
	}
	runJSON(t, nil, &fr, "fidelity", "-f", "json", path)
	require.Len(t, fr, 1)
	assert.Zero(t, fr[0].Device)
	var infos []struct {
		Devices int64 `json:"devices"`
	}
	runJSON(t, nil, &infos, "inspect", "-f", "json", path)
	require.Len(t, infos, 1)
	assert.Equal(t, int64(len(fr)), infos[0].Devices)
}

// TestStartExpandable replays windows of exports with expandable segments
// from the state they start from: the mapped ranges are restored, and the
// replay gives the recorded peak of reserved bytes.
func TestStartExpandable(t *testing.T) {
	for _, entries := range []string{"3", "6"} {
		files := exportSnapshots(t, 2, "-s", "pytorch:expandable_segments=true", "--snapshot-entries", entries, "testdata/tiny.csv", "testdata/twodev.csv")
		for _, f := range files {
			var fr []fidelity.Result
			runJSON(t, nil, &fr, "fidelity", "-f", "json", f)
			var rows []struct {
				Device        *int  `json:"device"`
				Peak          int64 `json:"peak_reserved_bytes"`
				StartReserved int64 `json:"start_reserved_bytes"`
				OOMs          int64 `json:"ooms"`
			}
			code, stdout, stderr := run(t, nil, "-f", "json", "-s", "pytorch", f)
			require.Equal(t, 0, code, stderr)
			require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
			assert.Contains(t, stderr, "expandable_segments:True")
			for _, r := range rows {
				if r.Device == nil && len(rows) > 1 {
					continue
				}
				d := 0
				if r.Device != nil {
					d = *r.Device
				}
				var want *fidelity.Result
				for i := range fr {
					if fr[i].Device == d {
						want = &fr[i]
					}
				}
				require.NotNil(t, want, "%s device %d", f, d)
				assert.Equal(t, want.RecordedPeakReservedBytes, r.Peak, "%s device %d entries %s", filepath.Base(f), d, entries)
				assert.Zero(t, r.OOMs)
				t.Logf("%s device %d: peak %d, start %d", filepath.Base(f), d, r.Peak, r.StartReserved)
			}
		}
	}
}

// TestSnapshotOfRestoredReplay: a replay that starts from a recorded state
// can itself be recorded (--snapshot), and its export reads back, with
// the same peak of reserved bytes.
func TestSnapshotOfRestoredReplay(t *testing.T) {
	path := writePickle(t, privateSnapshot())
	files := exportSnapshots(t, 1, "-s", "pytorch", path)
	rows, _ := replayRows(t, nil, "-s", "pytorch", path)
	var fr []fidelity.Result
	runJSON(t, nil, &fr, "fidelity", "-f", "json", files[0])
	require.Len(t, fr, 1)
	assert.Equal(t, rows[0].Peak, fr[0].RecordedPeakReservedBytes)
}

// TestReleaseNoteNPU: a replay of a snapshot that torch_npu wrote says so
// on stderr, and why it is known.
func TestReleaseNoteNPU(t *testing.T) {
	path := pk.SharedSnapshot(t, sharedSnapshotDir, "npu_expandable.pickle")
	_, stderr := replayRows(t, nil, "-s", "pytorch", path)
	assert.Contains(t, stderr, "simulate: "+path+": written by torch_npu: its live blocks hold their requests plus 32 bytes")
}
