package snapshot_test

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// A read whose pages go to its temporary file from the first on, with one
// or two loaded at a time, gives what a read that holds them gives: on
// generated snapshots of several pages of entries and memo per device, and
// on the real ones.
func TestSpillSameRead(t *testing.T) {
	var g bytes.Buffer
	_, err := genSnapshot(&g, genOptions{Devices: 2, Events: 90_000, Slots: 6, Frames: 60, Stacks: 30, Pools: true, Seed: 12})
	require.NoError(t, err)
	check := func(t *testing.T, data []byte, name string, big bool) {
		for _, o := range []snapshot.ReadOptions{{}, {NoStacks: true}} {
			want, err := snapshot.ReadWith(bytes.NewReader(data), name, o)
			require.NoError(t, err)
			for _, loaded := range []int{1, 2} {
				got, err := snapshot.ReadWith(bytes.NewReader(data), name, snapshot.SpillAfter(o, 0, loaded))
				require.NoError(t, err)
				if big {
					require.Positive(t, snapshot.Spilled(got), "written out")
				}
				for dev := range want.NumTraces() {
					w, g := want.Trace(dev), got.Trace(dev)
					require.Equal(t, w.Len(), g.Len())
					for i := g.Len() - 1; i >= 0; i-- { // back, as the rebuild walks
						require.Equal(t, w.At(i), g.At(i), "device_traces[%d][%d]", dev, i)
					}
				}
				require.Equal(t, snapshot.Flat(want), snapshot.Flat(got))
			}
		}
	}
	check(t, g.Bytes(), "gen.pickle", true)
	pk.ForEachShared(t, sharedDir, func(t *testing.T, name string, data []byte) {
		check(t, data, name, false)
	})
}

// Goroutines that read one spilled trace at once, forward and back, each
// read it whole and right (run with -race).
func TestSpillConcurrentReads(t *testing.T) {
	want, read := heldAndSpilled(t, 120_000, 13)
	got, err := read(snapshot.SpillAfter(snapshot.ReadOptions{}, 0, 2))
	require.NoError(t, err)
	require.Positive(t, snapshot.Spilled(got))
	tr, wt := got.Trace(0), want.Trace(0)
	var wg sync.WaitGroup
	bad := make([]int, 4)
	for r := range bad {
		wg.Go(func() {
			for j := range tr.Len() {
				i := j
				if r%2 == 1 {
					i = tr.Len() - 1 - j
				}
				if tr.At(i) != wt.At(i) {
					bad[r]++
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, []int{0, 0, 0, 0}, bad)
	assert.NoError(t, tr.Err())
}

// A memo entry stored over after its page was written out is read back as
// stored: the page, changed, is written again before it is dropped.
func TestSpillMemoStoredOver(t *testing.T) {
	str := func(b []byte, s string) []byte { return append(append(b, 0x8c, byte(len(s))), s...) }
	get := func(b []byte, i uint32) []byte { return binary.LittleEndian.AppendUint32(append(b, 'j'), i) }
	b := []byte{0x80, 4, '}', '('}
	b = str(b, "junk")
	b = append(b, ']', '(')
	for k := range 70_000 { // two full pages of memo and more
		b = append(b, 'M', byte(k), byte(k>>8), 0x94)
	}
	b = append(b, 'e', 'M', 0x39, 0x30, 'r', 5, 0, 0, 0, '0') // memo 5 = 12345
	b = append(get(b, 40_000), '0')                           // another page loaded
	b = str(b, "segments")
	b = append(b, ']')
	b = str(b, "device_traces")
	b = append(b, ']', ']', '}', '(')
	b = str(b, "action")
	b = str(b, "alloc")
	b = str(b, "addr")
	b = append(b, 'K', 0)
	b = str(b, "size")
	b = get(b, 5)
	b = str(b, "stream")
	b = append(b, 'K', 0, 'u', 'a', 'a', 'u', '.')

	for _, n := range []int64{256 << 20, 0} {
		o := snapshot.SpillAfter(snapshot.ReadOptions{}, n, 1)
		s, err := snapshot.ReadWith(bytes.NewReader(b), "m.pickle", o)
		require.NoError(t, err)
		require.Equal(t, 1, s.Trace(0).Len())
		assert.Equal(t, int64(12345), s.Trace(0).At(0).Size)
		o.TempDir = filepath.Join(t.TempDir(), "missing")
		_, err = snapshot.ReadWith(bytes.NewReader(b), "m.pickle", o)
		assert.Equal(t, n == 0, err != nil, "the memo written out: %v", err)
	}
}

// Where no temporary file can be made, a read past the bound fails,
// naming the directory, and holds no pages instead.
func TestSpillWithoutTempDir(t *testing.T) {
	_, read := heldAndSpilled(t, 70_000, 14)
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := read(snapshot.ReadOptions{TempDir: missing})
	require.NoError(t, err, "under the bound: no file")
	_, err = read(snapshot.SpillAfter(snapshot.ReadOptions{TempDir: missing}, 0, 1))
	var se *snapshot.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "gen.pickle", se.Name)
	assert.Contains(t, err.Error(), missing)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.NotContains(t, err.Error(), "\n")

	t.Setenv("TMPDIR", missing) // "" is TMPDIR
	_, err = read(snapshot.SpillAfter(snapshot.ReadOptions{}, 0, 1))
	assert.ErrorContains(t, err, missing)
}

// A trace that cannot read its pages back from the temporary file of its
// read reports it by Err, naming the snapshot and the file, and At gives
// zero entries for those pages rather than a panic.
func TestSpillReadBackFails(t *testing.T) {
	want, read := heldAndSpilled(t, 120_000, 16)
	got, err := read(snapshot.SpillAfter(snapshot.ReadOptions{}, 0, 1))
	require.NoError(t, err)
	tr := got.Trace(0)
	require.Equal(t, want.Trace(0).At(0), tr.At(0))
	require.NoError(t, tr.Err())
	snapshot.CloseSpill(got)
	var zero int
	for i := range tr.Len() {
		if tr.At(i) == (snapshot.TraceEntry{}) {
			zero++
		}
	}
	assert.Positive(t, zero)
	var se *snapshot.Error
	require.ErrorAs(t, tr.Err(), &se)
	assert.Equal(t, "gen.pickle", se.Name)
	assert.Regexp(t, `^gen\.pickle: device_traces: reading back the temporary file .*gpualloc-snapshot-.*: file already closed$`, tr.Err().Error())
	assert.ErrorIs(t, tr.Err(), fs.ErrClosed)
	assert.NoError(t, want.Trace(0).Err(), "a read that holds its pages")
}

// heldAndSpilled generates a snapshot of one device with events events and
// returns its read without stacks, and a function that reads it so
// again with the options o besides.
func heldAndSpilled(t *testing.T, events int, seed uint64) (*snapshot.Snapshot, func(o snapshot.ReadOptions) (*snapshot.Snapshot, error)) {
	t.Helper()
	var g bytes.Buffer
	_, err := genSnapshot(&g, genOptions{Devices: 1, Events: events, Slots: 6, Frames: 20, Stacks: 5, Seed: seed})
	require.NoError(t, err)
	read := func(o snapshot.ReadOptions) (*snapshot.Snapshot, error) {
		o.NoStacks = true
		return snapshot.ReadWith(bytes.NewReader(g.Bytes()), "gen.pickle", o)
	}
	s, err := read(snapshot.ReadOptions{})
	require.NoError(t, err)
	return s, read
}

// A device trace referred to twice, long enough to be written out, reads
// as two devices with the same entries: the copy reads the spilled pages
// back.
func TestSpillSharedTrace(t *testing.T) {
	str := func(b []byte, s string) []byte { return append(append(b, 0x8c, byte(len(s))), s...) }
	b := []byte{0x80, 4, '}', '('}
	b = str(b, "segments")
	b = append(b, ']')
	b = str(b, "device_traces")
	b = append(b, ']', '(', ']', 0x94, '(') // the trace list is memo 0
	const n = 3*32768 + 5
	for i := range n {
		b = append(b, '}', '(')
		b = str(str(b, "action"), [...]string{"alloc", "free_completed"}[i%2])
		b = binary.LittleEndian.AppendUint32(append(str(b, "addr"), 'J'), uint32(i/2*512))
		b = append(str(b, "size"), 'M', 0, 2)
		b = append(str(b, "stream"), 'K', 0, 'u')
	}
	b = append(b, 'e', 'j', 0, 0, 0, 0, 'e', 'u', '.') // the trace list again

	var o snapshot.ReadOptions
	want, err := snapshot.ReadWith(bytes.NewReader(b), "shared.pickle", o)
	require.NoError(t, err)
	got, err := snapshot.ReadWith(bytes.NewReader(b), "shared.pickle", snapshot.SpillAfter(o, 0, 1))
	require.NoError(t, err)
	require.Positive(t, snapshot.Spilled(got))
	require.Equal(t, 2, got.NumTraces())
	for dev := range 2 {
		tr := got.Trace(dev)
		require.Equal(t, n, tr.Len())
		for _, i := range []int{0, 1, 32767, 32768, 65537, n - 1} {
			require.Equal(t, want.Trace(dev).At(i), tr.At(i), "device_traces[%d][%d]", dev, i)
			require.Equal(t, uint64(i/2*512), tr.At(i).Addr)
		}
	}
	require.Equal(t, snapshot.Flat(want), snapshot.Flat(got))
}

// A long read reads its input ahead on a goroutine of its own: it does
// not outlive the read.
func TestReadLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	_, read := heldAndSpilled(t, 120_000, 15)
	s, err := read(snapshot.Ahead(snapshot.ReadOptions{}))
	require.NoError(t, err)
	require.Greater(t, s.Trace(0).Len(), 3*32768)
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "%d goroutines left, %d before the read", runtime.NumGoroutine(), before)
	}
}
