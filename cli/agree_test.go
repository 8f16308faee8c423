package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch/fidelity"
)

// A agreeRow is what TestReplayAgreesWithFidelity reads of a row of
// simulate -s pytorch -f json.
type agreeRow struct {
	Device        *int  `json:"device"`
	Allocs        int64 `json:"allocs"`
	Peak          int64 `json:"peak_reserved_bytes"`
	DeviceMallocs int64 `json:"device_mallocs"`
	DeviceFrees   int64 `json:"device_frees"`
	StartSegments int64 `json:"start_segments"`
	OOMs          int64 `json:"ooms"`
}

// agree checks that simulate -s pytorch and simulate fidelity give one
// answer for the snapshot at path: per device, the peak of reserved
// bytes, the device allocations and frees during the trace, the segments
// of the start state, and the allocations (the replay counts the blocks
// live at the start and the recorded oom requests among them). exact says
// that the replay must also take the recorded figures and fail where the
// record failed: a record of PyTorch's own allocator, or of the pytorch
// strategy.
func agree(t *testing.T, path string, exact bool) {
	t.Helper()
	var fr []fidelity.Result
	code, stdout, stderr := run(t, nil, "fidelity", "-f", "json", path)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &fr))
	var rows []agreeRow
	runJSON(t, nil, &rows, "-f", "json", "-s", "pytorch", path)
	for _, f := range fr {
		var r *agreeRow
		for i := range rows {
			if d := rows[i].Device; d != nil && *d == f.Device || d == nil && len(rows) == 1 {
				r = &rows[i]
			}
		}
		require.NotNil(t, r, "device %d: no replay row", f.Device)
		assert.Equal(t, f.ReplayedPeakReservedBytes, r.Peak, "device %d: peak reserved", f.Device)
		assert.Equal(t, f.ReplayedDeviceMallocs, r.DeviceMallocs, "device %d: device mallocs", f.Device)
		assert.Equal(t, f.DeviceFrees, r.DeviceFrees, "device %d: device frees", f.Device)
		expandable := strings.Contains(f.Conf, "expandable_segments:True")
		if !expandable {
			// A replay's start segments are device allocations: with
			// expandable segments, one per page.
			assert.Equal(t, f.InitialSegs, r.StartSegments, "device %d: start segments", f.Device)
		}
		assert.Equal(t, f.Allocs+f.InitialLive+f.OOMs, r.Allocs, "device %d: allocations", f.Device)
		if exact {
			assert.Equal(t, f.RecordedPeakReservedBytes, r.Peak, "device %d: recorded peak reserved", f.Device)
			if !expandable {
				// The pages of a map refused part way are made and given
				// back unrecorded.
				assert.Equal(t, f.RecordedDeviceMallocs, r.DeviceMallocs, "device %d: recorded device mallocs", f.Device)
			}
			assert.Equal(t, f.OOMs, r.OOMs, "device %d: recorded ooms", f.Device)
			assert.Equal(t, f.OOMs, f.OOMMatches, "device %d: oom matches", f.Device)
		}
		t.Logf("device %d: peak reserved %d recorded, %d replayed by both; device mallocs %d recorded, %d replayed; %d device frees; %d ooms",
			f.Device, f.RecordedPeakReservedBytes, r.Peak, f.RecordedDeviceMallocs, r.DeviceMallocs, r.DeviceFrees, r.OOMs)
	}
}

// TestReplayAgreesWithFidelity: simulate -s pytorch and simulate fidelity
// replay a snapshot the same way, and give the same figures, on every
// shared real snapshot and on snapshots of the pytorch strategy that
// exercise what made them differ:
//   - a release that the trace asks for, followed by an allocation that
//     takes a new segment (once written with no frame of empty_cache, a
//     replay took it for the allocation's own release, and did not make
//     it);
//   - a release before an allocation served from the cache, with a
//     max_split_size (fidelity left it to the allocation, which kept the
//     segment);
//   - an allocation that maps pages of expandable segments, is refused
//     the next, releases and maps anew, and a request that fails the same
//     way (a replay counted the pages made and given back unmapped as
//     reserved memory, fidelity did not count them as device
//     allocations; fidelity's device never refused a page);
//   - allocations that fail and release cached segments on a full device,
//     with and without a max_split_size (fidelity's device refused every
//     allocation of a recorded oom, and none else);
//   - windows of those and of random traces on several devices and
//     streams, which start from a recorded state;
//   - a private pool's segments (fidelity gave them to the strategy, which
//     served the default pools' requests from them).
func TestReplayAgreesWithFidelity(t *testing.T) {
	const mib = 1 << 20
	dir := t.TempDir()
	write := func(name, csv string) string {
		p := filepath.Join(dir, name+".csv")
		require.NoError(t, os.WriteFile(p, []byte(csv), 0o644))
		return p
	}
	cases := []struct {
		name, csv string
		args      []string
	}{
		{"release_then_segment", write("release_then_segment",
			"op,id,size\nalloc,1,31457280\nfree,1,\nrelease,,\nalloc,2,52428800\nfree,2,\nalloc,3,31457280\n"), []string{"-s", "pytorch"}},
		{"release_then_cache", write("release_then_cache",
			"op,id,size\nalloc,1,31457280\nalloc,2,300\nfree,1,\nalloc,3,300\nfree,3,\nrelease,,\nalloc,4,300\n"),
			[]string{"-s", "pytorch:max_split_size_mb=40"}},
		{"map_failed", write("map_failed", "op,id,size\n"+
			"alloc,1,20971520\nalloc,2,20971520\nalloc,3,20971520\nalloc,4,20971520\n"+
			"alloc,5,524288\nfree,5,\nfree,2,\nfree,3,\n"+
			"alloc,6,104857600\n"+
			"alloc,7,524288\nfree,7,\nfree,4,\n"+
			"alloc,8,83886080\n"+
			"free,8,\nfree,1,\n"), []string{"-s", "pytorch:expandable_segments=true", "--capacity", "100MiB"}},
	}
	rng := rand.New(rand.NewPCG(33, 5))
	for i, c := range []struct {
		spec     string
		capacity int64
	}{
		{"pytorch", 300 * mib},
		{"pytorch:max_split_size_mb=40", 300 * mib},
		{"pytorch:expandable_segments=true", 300 * mib},
		{"pytorch:garbage_collection_threshold=0.5,memory_fraction=0.9", 400 * mib},
		{"pytorch:expandable_segments=true", 0},
	} {
		var b strings.Builder
		b.WriteString("op,id,size,stream,device\n")
		type blk struct{ id, size, stream, dev int }
		var live []blk
		sizes := []int{300, 4096, 100000, mib, 3 * mib, 5 * mib, 12 * mib, 25 * mib, 70 * mib}
		for id := 1; id < 400; id++ {
			switch x := rng.IntN(100); {
			case x < 3:
				fmt.Fprintf(&b, "release,,,0,%d\n", rng.IntN(2))
			case x < 55 || len(live) == 0:
				l := blk{id, sizes[rng.IntN(len(sizes))] + rng.IntN(1000), rng.IntN(2), rng.IntN(2)}
				live = append(live, l)
				fmt.Fprintf(&b, "alloc,%d,%d,%d,%d\n", l.id, l.size, l.stream, l.dev)
			default:
				k := rng.IntN(len(live))
				l := live[k]
				live = append(live[:k], live[k+1:]...)
				fmt.Fprintf(&b, "free,%d,%d,%d,%d\n", l.id, l.size, l.stream, l.dev)
			}
		}
		name := fmt.Sprintf("random%d", i)
		args := []string{"-s", c.spec}
		if c.capacity > 0 {
			args = append(args, "--capacity", fmt.Sprint(c.capacity))
		}
		cases = append(cases, struct {
			name, csv string
			args      []string
		}{name, write(name, b.String()), args})
	}
	for _, c := range cases {
		for _, entries := range []int{0, 120, 25} {
			t.Run(fmt.Sprintf("%s/%d", c.name, entries), func(t *testing.T) {
				out := filepath.Join(dir, fmt.Sprintf("%s_%d", c.name, entries))
				args := append([]string{"--snapshot", out}, c.args...)
				if entries > 0 {
					args = append(args, "--snapshot-entries", fmt.Sprint(entries))
				}
				code, _, stderr := run(t, nil, append(args, c.csv)...)
				require.Equal(t, 0, code, stderr)
				files, err := filepath.Glob(filepath.Join(out, "*.pickle"))
				require.NoError(t, err)
				require.Len(t, files, 1)
				// A window that begins inside an allocation's failed map
				// is not followed to the byte from its start.
				agree(t, files[0], entries == 0)
				if strings.HasPrefix(c.name, "random") {
					// As PyTorch writes them, with no device memory: each
					// device's is what its oom entries tell, else a
					// replay's default.
					agree(t, withoutDeviceMemory(t, files[0]), false)
				}
			})
		}
	}
	// A CUDA graph's pool: a segment of it held at the start, with room
	// for the default pools' request that PyTorch serves from a segment
	// of their own (fidelity gave it to the strategy, which served the
	// request from the pool's segment), and one that the trace allocates,
	// uses and frees.
	t.Run("private_pool", func(t *testing.T) {
		const a, p, q uint64 = 0x7f0000000000, 0x7f0004000000, 0x7f0008000000
		ent := func(act snapshot.Action, addr uint64, size int64) snapshot.TraceEntry {
			return snapshot.TraceEntry{Action: act, Addr: addr, Size: size, TimeUS: snapshot.NoTime}
		}
		graph := snapshot.PoolID{1, 0}
		s := snapshot.New([]snapshot.Segment{
			{Address: a, TotalSize: 20 * mib, SegmentType: "large", Blocks: []snapshot.Block{
				{Address: a, Size: 4 * mib, RequestedSize: 4 * mib, State: snapshot.ActiveAllocated},
				{Address: a + 4*mib, Size: 16 * mib, State: snapshot.Inactive}}},
			{Address: p, TotalSize: 20 * mib, SegmentType: "large", Pool: graph, Blocks: []snapshot.Block{
				{Address: p, Size: 5 * mib, RequestedSize: 5 * mib, State: snapshot.ActiveAllocated},
				{Address: p + 5*mib, Size: 15 * mib, State: snapshot.Inactive}}},
			{Address: q, TotalSize: 20 * mib, SegmentType: "large", Pool: graph, Blocks: []snapshot.Block{
				{Address: q, Size: 20 * mib, State: snapshot.Inactive}}},
		}, []snapshot.TraceEntry{
			ent(snapshot.SegmentAlloc, a, 20*mib), ent(snapshot.Alloc, a, 4*mib),
			ent(snapshot.SegmentAlloc, q, 20*mib), ent(snapshot.Alloc, q, 6*mib),
			ent(snapshot.FreeRequested, q, 6*mib), ent(snapshot.FreeCompleted, q, 6*mib),
		})
		path := filepath.Join(dir, "private_pool.pickle")
		var buf bytes.Buffer
		require.NoError(t, snapshot.Write(&buf, s, snapshot.WriteOptions{}))
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		agree(t, path, true)
	})
	t.Run("shared", func(t *testing.T) {
		for _, f := range pk.SharedSnapshots(t, sharedSnapshotDir) {
			t.Run(filepath.Base(f), func(t *testing.T) {
				base := filepath.Base(f)
				agree(t, f, !strings.HasPrefix(base, "npu_") && base != "custom_fields.pickle")
			})
		}
	})
}

// withoutDeviceMemory writes the snapshot at path again without the
// device memory that simulate records in its allocator_settings, and
// returns the new file's path.
func withoutDeviceMemory(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	s, err := snapshot.Read(f, path)
	require.NoError(t, err)
	require.NotNil(t, s.AllocatorSettings)
	delete(s.AllocatorSettings.Other, snapshot.DeviceMemoryKey)
	var buf bytes.Buffer
	require.NoError(t, snapshot.Write(&buf, s, snapshot.WriteOptions{}))
	out := strings.TrimSuffix(path, ".pickle") + "_nomem.pickle"
	require.NoError(t, os.WriteFile(out, buf.Bytes(), 0o644))
	return out
}
