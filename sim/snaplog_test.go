package sim

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// smallBlocks makes the blocks of entry logs small for the test, so that a
// short trace fills many.
func smallBlocks(t *testing.T) {
	old := logBlock
	logBlock = 4 * maxEncoded
	t.Cleanup(func() { logBlock = old })
}

// TestEntryLogRoundTrip reads back what logs of two devices that share a
// spill file, and logs in memory, were given: extremes of every field
// included, blocks of the devices interleaved in the file, the file gone
// from its directory from the start.
func TestEntryLogRoundTrip(t *testing.T) {
	smallBlocks(t)
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func() snapEntry {
		e := snapEntry{action: uint8(rng.IntN(len(snapActions))), cat: gpualloc.Category(rng.IntN(int(gpualloc.NumCategories))),
			addr: rng.Uint64() >> rng.IntN(64), size: rng.Int64() >> rng.IntN(63), stream: rng.Uint64() >> rng.IntN(64),
			timeUS: rng.Int64() >> rng.IntN(63)}
		if rng.IntN(2) == 0 {
			e.size, e.timeUS = -e.size, -e.timeUS
		}
		return e
	}
	extremes := []snapEntry{
		{action: actOOM, cat: gpualloc.NumCategories - 1, addr: math.MaxUint64, size: math.MinInt64, stream: math.MaxUint64, timeUS: math.MaxInt64},
		{timeUS: math.MinInt64},
		{action: actSegmentUnmap, size: math.MaxInt64, timeUS: math.MaxInt64},
	}
	for _, spilled := range []bool{false, true} {
		dir := t.TempDir()
		var spill *spillFile
		if spilled {
			spill = &spillFile{dir: dir}
		}
		logs := [2]entryLog{{spill: spill}, {spill: spill}}
		var want [2][]snapEntry
		for i := range 2000 {
			e := pick()
			if i < len(extremes) {
				e = extremes[i]
			}
			d := rng.IntN(2)
			logs[d].add(&e)
			want[d] = append(want[d], e)
		}
		if spilled {
			require.NoError(t, spill.err)
			require.NotNil(t, spill.f, "the blocks were spilled")
			left, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, left, "the spill file is unlinked once made")
		}
		for d := range logs {
			var got []snapEntry
			require.NoError(t, logs[d].each(func(e *snapEntry) bool { got = append(got, *e); return true }))
			assert.Equal(t, want[d], got, "device %d, spilled %v", d, spilled)
			assert.Equal(t, len(want[d]), logs[d].n)
		}
		spill.close()
	}
}

// TestEntryLogReadBackFails checks that a log whose spill file cannot be
// read back fails its walk with an error that names the file, and that
// a log whose file failed a write writes no more.
func TestEntryLogReadBackFails(t *testing.T) {
	smallBlocks(t)
	sp := &spillFile{dir: t.TempDir()}
	l := entryLog{spill: sp}
	for i := range 100 {
		l.add(&snapEntry{action: actAlloc, addr: uint64(i) * 512, size: 512, timeUS: int64(i)})
	}
	require.NoError(t, sp.err)
	require.NotEmpty(t, l.at)
	sp.close()
	err := l.each(func(*snapEntry) bool { return true })
	require.Error(t, err)
	assert.Regexp(t, `^the file of the trace entries: reading back the temporary file .*\.snapshot-entries-\d+: file already closed$`, err.Error())

	for i := range 100 { // the file closed: writes fail, once
		l.add(&snapEntry{action: actAlloc, addr: uint64(i) * 512, size: 512, timeUS: int64(i)})
	}
	first := sp.err
	require.ErrorIs(t, first, os.ErrClosed)
	l.add(&snapEntry{})
	l.flush()
	assert.Same(t, first, sp.err)
	assert.Same(t, first, l.each(func(*snapEntry) bool { return true }))
}

// TestSnapshotStreamSame replays traces that record categories, several
// devices and streams, failures and windows of entries, with a snapshot
// built (Config.Snapshot) and streamed through a spill file
// (Config.SnapshotStream), a window kept in a ring or at the end of a log:
// the files must be the same bytes, and the spill file must be gone.
func TestSnapshotStreamSame(t *testing.T) {
	smallBlocks(t)
	rng := rand.New(rand.NewPCG(5, 6))
	tb := newTrace()
	var live []uint64
	for id := range uint64(3000) {
		if len(live) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(live))
			tb.free(live[k])
			live = append(live[:k], live[k+1:]...)
		}
		tb.on(int32(rng.IntN(3)), uint64(rng.IntN(2))).as(gpualloc.Category(rng.IntN(3))).alloc(id, 1+rng.Int64N(1<<20))
		live = append(live, id)
	}
	noCats := newTrace()
	for id := range uint64(500) {
		noCats.alloc(id, 512).free(id)
	}
	for _, c := range []struct {
		name    string
		tb      *traceBuilder
		cfg     Config
		entries int
	}{
		{"categories", tb, Config{Open: openExact}, 0},
		{"categories-window", tb, Config{Open: openExact}, 100},
		{"categories-window-of-1", tb, Config{Open: openExact}, 1},
		{"oom", tb, Config{Open: openExact, Capacity: 64 << 20}, 0},
		{"no-categories", noCats, Config{Open: openExact}, 0},
		{"no-categories-window", noCats, Config{Open: openExact}, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.SnapshotEntries = c.entries
			built, _ := replaySnapshot(t, c.tb, cfg)
			var want bytes.Buffer
			require.NoError(t, snapshot.Write(&want, built, snapshot.WriteOptions{}))

			// A window is kept in a ring, or at the end of a log when
			// it is larger than maxRing: the same entries.
			for _, ring := range []int{maxRing, 0} {
				if ring == 0 && c.entries == 0 {
					continue
				}
				old := maxRing
				maxRing = ring
				if ring == 0 {
					logged, _ := replaySnapshot(t, c.tb, cfg)
					var b bytes.Buffer
					require.NoError(t, snapshot.Write(&b, logged, snapshot.WriteOptions{}))
					require.Equal(t, want.Bytes(), b.Bytes(), "window logged")
				}
				dir := t.TempDir()
				streamed := cfg
				streamed.SnapshotTemp = dir
				var got bytes.Buffer
				streamed.SnapshotStream = func(s *snapshot.Stream) error { return snapshot.WriteStream(&got, s, snapshot.WriteOptions{}) }
				_, err := Replay(c.tb.reader(), streamed)
				maxRing = old
				require.NoError(t, err)
				require.Equal(t, want.Bytes(), got.Bytes(), "streamed, ring of up to %d", ring)
				left, err := os.ReadDir(dir)
				require.NoError(t, err)
				assert.Empty(t, left)
			}
		})
	}
}

// TestSnapshotStreamSpillFails checks that a spill file that cannot be
// made fails the replay with a line that says so.
func TestSnapshotStreamSpillFails(t *testing.T) {
	smallBlocks(t)
	tb := newTrace()
	for id := range uint64(100) {
		tb.alloc(id, 512).free(id)
	}
	cfg := Config{Open: openExact, SnapshotTemp: t.TempDir() + "/missing",
		SnapshotStream: func(*snapshot.Stream) error { t.Fatal("the snapshot is written"); return nil }}
	_, err := Replay(tb.reader(), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "snapshot: the file of the trace entries:")
}

// FuzzEntryLog reads arbitrary bytes as a block of a log: it reads entries
// or says the log is damaged, never panics, and what it reads encodes back
// to the same bytes.
func FuzzEntryLog(f *testing.F) {
	var l entryLog
	l.add(&snapEntry{action: actAlloc, cat: gpualloc.CategoryActivation, addr: 0x7f0000000200, size: 1000, stream: 7, timeUS: 50})
	l.add(&snapEntry{action: actFreeCompleted, addr: 0x7f0000000200, size: 1000, timeUS: 40})
	f.Add(l.buf)
	f.Add([]byte{0x80})
	f.Add([]byte{0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := entryLog{buf: data}
		var again entryLog
		err := in.each(func(e *snapEntry) bool {
			require.Less(t, int(e.action), len(snapActions))
			again.add(e)
			return true
		})
		if err != nil {
			require.ErrorIs(t, err, errLogDamaged)
			return
		}
		// Varints may be written in more bytes than they need: compare
		// what the entries say, not the bytes.
		var first, second []snapEntry
		require.NoError(t, (&entryLog{buf: data}).each(func(e *snapEntry) bool { first = append(first, *e); return true }))
		require.NoError(t, again.each(func(e *snapEntry) bool { second = append(second, *e); return true }))
		require.Equal(t, first, second)
	})
}
