package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// capsReader reads a trace with each device of the capacity caps gives it.
type capsReader struct {
	traces.Reader
	caps func(device int) int64
}

func (r capsReader) DeviceCapacity(d int) int64 { return r.caps(d) }

// replayDevice replays the trace at path with spec as simulate -s spec
// does (from the recorded start state, with the recorded settings), device
// d of capacity c and the others of virtual.DefaultCapacity, and reports
// whether d ran out of memory: an OOM on d, or a replay that failed for
// want of memory on d.
func replayDevice(t *testing.T, path, spec string, d int, c int64) bool {
	t.Helper()
	r, err := traces.Open(path, traces.Options{})
	require.NoError(t, err)
	defer r.Close()
	sel, err := gpualloc.Select(spec, func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	caps := func(dev int) int64 {
		if dev == d {
			return c
		}
		return virtual.DefaultCapacity
	}
	res, err := sim.Replay(capsReader{r, caps}, sim.Config{Trace: path, Params: sel, SeriesBuckets: -1, Start: traces.StartOf(r)})
	if err != nil {
		require.True(t, errors.Is(err, gpualloc.ErrOutOfMemory), "%s device %d at %d: %v", path, d, c, err)
		require.Contains(t, err.Error(), fmt.Sprintf("device %d", d), "%s at %d: the failure is another device's", path, c)
		return true
	}
	for _, dr := range res.Devices {
		if dr.Device == d {
			return dr.OOMs > 0
		}
	}
	t.Fatalf("%s: no device %d", path, d)
	return false
}

// replayAll replays the trace at path as simulate -s spec --capacity c does
// and reports whether it ran out of memory.
func replayAll(t *testing.T, path, spec string, c int64) bool {
	t.Helper()
	var rows []sim.Result
	code, stdout, stderr := run(t, nil, "-f", "json", "-s", spec, "--capacity", fmt.Sprint(c), path)
	if code != 0 {
		require.Contains(t, stderr, "out of memory", "%s at %d", path, c)
		return true
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	return rows[0].OOMs > 0
}

// checkMinCapacity runs simulate -s spec --min-capacity on path and checks
// each figure on both sides by replay: the trace's, with every device of
// that capacity as --capacity gives it, and each device's own, the others
// at the capacity the replay gave them. It returns the rows.
func checkMinCapacity(t *testing.T, path, spec string) []sim.Result {
	t.Helper()
	var rows []sim.Result
	runJSON(t, nil, &rows, "-f", "json", "--min-capacity", "-s", spec, path)
	require.NotEmpty(t, rows)
	const mib = 1 << 20
	for _, r := range rows {
		if r.PeakRequestedBytes == 0 && r.StartReservedBytes == 0 {
			continue
		}
		require.NotNil(t, r.MinCapacityBytes, "%s device %v", path, r.Device)
		c := *r.MinCapacityBytes
		assert.Zero(t, c%mib, "%s: %d is not a multiple of 1 MiB", path, c)
		if r.Device == nil {
			assert.False(t, replayAll(t, path, spec, c), "%s: out of memory at its min capacity %d", path, c)
			assert.True(t, replayAll(t, path, spec, c-mib), "%s: no OOM at its min capacity %d - 1 MiB", path, c)
			continue
		}
		d := *r.Device
		assert.False(t, replayDevice(t, path, spec, d, c), "%s device %d: out of memory at its min capacity %d", path, d, c)
		assert.True(t, replayDevice(t, path, spec, d, c-mib), "%s device %d: no OOM at its min capacity %d - 1 MiB", path, d, c)
	}
	return rows
}

// mixedCSV writes a trace of allocations of random sizes on devices
// devices, each freed a few allocations later.
func mixedCSV(t *testing.T, seed uint64, devices int) string {
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	b.WriteString("op,id,size,device\n")
	type live struct{ id, dev int }
	var held []live
	for id := range 200 {
		size := int64(1) << rng.IntN(26)
		size += rng.Int64N(size)
		dev := rng.IntN(devices)
		fmt.Fprintf(&b, "alloc,%d,%d,%d\n", id, size, dev)
		held = append(held, live{id, dev})
		for len(held) > 0 && rng.IntN(3) > 0 {
			i := rng.IntN(len(held))
			fmt.Fprintf(&b, "free,%d,,%d\n", held[i].id, held[i].dev)
			held = append(held[:i], held[i+1:]...)
		}
	}
	for _, h := range held {
		fmt.Fprintf(&b, "free,%d,,%d\n", h.id, h.dev)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("mixed%d.csv", devices))
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// TestMinCapacityRecorded: on snapshots that record expandable segments
// and start from a recorded state (windows of exports), the min capacity
// of pytorch follows both, as the replay does: no OOM at it, one 1 MiB
// below, for the trace and for each of its devices.
func TestMinCapacityRecorded(t *testing.T) {
	files := exportSnapshots(t, 2, "-s", "pytorch:expandable_segments=true", "--snapshot-entries", "40",
		mixedCSV(t, 1, 1), mixedCSV(t, 2, 2))
	for _, f := range files {
		rows := checkMinCapacity(t, f, "pytorch")
		var start int64
		for _, r := range rows {
			if r.Device == nil {
				start = r.StartReservedBytes
			}
		}
		require.Positive(t, start, "%s: the window starts from a recorded state", f)
	}
}

// TestMinCapacityShared checks the min capacity of pytorch on each shared
// snapshot, each device apart, on both sides by replay.
func TestMinCapacityShared(t *testing.T) {
	for _, path := range pk.SharedSnapshots(t, sharedSnapshotDir) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			rows := checkMinCapacity(t, path, "pytorch")
			switch name {
			case "xl_fwd_expandable.pickle":
				// Its recorded expandable segments and start state: the
				// figure of simulate explain's "as recorded" row.
				require.NotNil(t, rows[0].MinCapacityBytes)
				assert.Equal(t, int64(39734738944), *rows[0].MinCapacityBytes)
			case "large128_backward_wrapped.pickle", "forward_bf16_ctx128.pickle":
				// Below their start states, which hold wholly free
				// segments: a smaller device holds what was live.
				require.NotNil(t, rows[0].MinCapacityBytes)
				assert.Less(t, *rows[0].MinCapacityBytes, rows[0].StartReservedBytes)
				want := map[string]int64{"large128_backward_wrapped.pickle": 17106468864, "forward_bf16_ctx128.pickle": 857735168}[name]
				assert.Equal(t, want, *rows[0].MinCapacityBytes)
			case "npu_two_devices.pickle":
				require.Len(t, rows, 3)
				assert.Less(t, *rows[2].MinCapacityBytes, *rows[1].MinCapacityBytes, "each device its own")
			}
		})
	}
}

// TestTuneDevicesApart tunes a trace of two devices on devices smaller than
// the sum of their peaks: tune's peak is the largest device's, within the
// capacity, as the replay of its line gives it, not the sum.
func TestTuneDevicesApart(t *testing.T) {
	path := mixedCSV(t, 2, 2)
	var rows []sim.Result
	runJSON(t, nil, &rows, "-f", "json", "-s", "pytorch", path)
	require.Len(t, rows, 3)
	largest := max(rows[1].PeakReservedBytes, rows[2].PeakReservedBytes)
	capacity := (largest + 2<<20) &^ (1<<20 - 1)
	require.Greater(t, rows[0].PeakReservedBytes, capacity, "the devices' sum does not fit one device")

	var tuned tuneResult
	runJSON(t, nil, &tuned, "tune", "-f", "json", "--capacity", fmt.Sprint(capacity), path)
	assert.LessOrEqual(t, tuned.PeakReservedBytes, capacity)
	assert.LessOrEqual(t, tuned.DefaultPeakReservedBytes, capacity)
	runJSON(t, map[string]string{"PYTORCH_CUDA_ALLOC_CONF": tuned.Conf}, &rows, "-f", "json", "-s", "pytorch", "--capacity", fmt.Sprint(capacity), path)
	require.Len(t, rows, 3)
	assert.Zero(t, rows[0].OOMs)
	assert.Equal(t, max(rows[1].PeakReservedBytes, rows[2].PeakReservedBytes), tuned.PeakReservedBytes)
	assert.Equal(t, max(rows[1].PeakRequestedBytes, rows[2].PeakRequestedBytes), tuned.PeakRequestedBytes)
	for _, p := range tuned.Front {
		assert.LessOrEqual(t, p.PeakReservedBytes, capacity, p.Conf)
	}
	code, stdout, stderr := run(t, nil, "tune", "--capacity", fmt.Sprint(capacity), path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "on 2 devices of ")
}
