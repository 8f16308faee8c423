// Package replaytest holds the helpers of the tests and benchmarks that
// replay traces: random and bundled traces as events held in memory,
// PyTorch snapshots read from files, the peak a rounding rule implies, and
// replays through the simulator or straight into a pool. It sits above sim
// and traces, so that the strategies' own packages and their test kits
// (strategy/internal/...) import neither; only test files import it (the
// strategies', the backends', tune's and cli's).
package replaytest

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

// RandomTrace returns, as a trace file, the random workload of traces/gen
// made with opts (its Events, Seed, MaxLive and MaxSize).
func RandomTrace(tb testing.TB, opts gen.Options) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w := traces.NewWriter(&buf, gen.Columns()...)
	require.NoError(tb, gen.Generate(w, "random", opts))
	require.NoError(tb, w.Close())
	return buf.Bytes()
}

// Reader returns a reader of data, a trace file named name.
func Reader(tb testing.TB, name string, data []byte) traces.FileReader {
	tb.Helper()
	r, err := traces.NewReader(bytes.NewReader(data), name, traces.Options{})
	require.NoError(tb, err)
	return r
}

// RandomEvents returns the events of [RandomTrace], held in memory.
func RandomEvents(tb testing.TB, opts gen.Options) []traces.Event {
	tb.Helper()
	events, err := traces.ReadAll(Reader(tb, "random", RandomTrace(tb, opts)))
	require.NoError(tb, err)
	return events
}

// BundledEvents returns the events of the bundled trace named name, held
// in memory.
func BundledEvents(tb testing.TB, name string) []traces.Event {
	tb.Helper()
	bd, ok := traces.LookupBundled(name)
	require.True(tb, ok, name)
	r, err := bd.Open()
	require.NoError(tb, err)
	events, err := traces.ReadAll(r)
	require.NoError(tb, err)
	return events
}

// ReadSnapshot returns the PyTorch memory snapshot in the file at path,
// failing tb if it cannot be read.
func ReadSnapshot(tb testing.TB, path string) *snapshot.Snapshot {
	tb.Helper()
	f, err := os.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	s, err := snapshot.Read(f, path)
	require.NoError(tb, err)
	return s
}

// RoundedPeak returns the peak over time of the sum of round(size) over the
// live allocations of events, and that sum at the end.
func RoundedPeak(events []traces.Event, round func(int64) int64) (peak, end int64) {
	var sum int64
	for _, ev := range events {
		switch ev.Op {
		case traces.OpAlloc:
			sum += round(ev.Size)
			peak = max(peak, sum)
		case traces.OpFree:
			sum -= round(ev.Size)
		}
	}
	return peak, sum
}

// ReplayPeak replays r through [sim.Replay] on pools open opens, with the
// engine's checks on, and checks that no allocation fails and that the peak
// of allocated bytes is want, no more than the peak of reserved bytes. It
// returns the result for further checks.
func ReplayPeak(t *testing.T, r traces.Reader, open strategytest.OpenFunc, want int64) sim.Result {
	t.Helper()
	res, err := sim.Replay(r, sim.Config{Open: open, SeriesBuckets: -1, Verify: true})
	require.NoError(t, err)
	require.Zero(t, res.OOMs)
	assert.Equal(t, want, res.PeakAllocatedBytes)
	assert.GreaterOrEqual(t, res.PeakReservedBytes, res.PeakAllocatedBytes)
	return res
}

// StartSnapshot returns a PyTorch snapshot whose start state holds one
// segment of 200 MiB, expandable or not, its first half live, and whose
// trace allocates a block of 10 MiB in the other half and frees it: a
// device below 200 MiB cannot hold the state the trace starts from.
func StartSnapshot(tb testing.TB, expandable bool) []byte {
	tb.Helper()
	const x uint64 = 0x7f0000000000
	ent := func(act snapshot.Action, addr uint64, size int64) snapshot.TraceEntry {
		return snapshot.TraceEntry{Action: act, Addr: addr, Size: size, TimeUS: snapshot.NoTime}
	}
	s := snapshot.New([]snapshot.Segment{
		{Address: x, TotalSize: 200 << 20, SegmentType: "large", IsExpandable: expandable, Blocks: []snapshot.Block{
			{Address: x, Size: 100 << 20, RequestedSize: 100 << 20, State: snapshot.ActiveAllocated},
			{Address: x + 100<<20, Size: 100 << 20, State: snapshot.Inactive}}},
	}, []snapshot.TraceEntry{
		ent(snapshot.Alloc, x+100<<20, 10<<20),
		ent(snapshot.FreeRequested, x+100<<20, 10<<20), ent(snapshot.FreeCompleted, x+100<<20, 10<<20),
	})
	var buf bytes.Buffer
	require.NoError(tb, snapshot.Write(&buf, s, snapshot.WriteOptions{}))
	return buf.Bytes()
}

// CachedStartSnapshot returns a PyTorch snapshot whose start state holds
// two segments: one of 100 MiB, wholly live, and one of 200 MiB, wholly
// free in the cache, whose trace allocates a block of 10 MiB in the free
// segment and frees it. A device of 300 MiB holds the state; a smaller one
// holds what was live, 100 MiB, and a segment of its own for the block.
func CachedStartSnapshot(tb testing.TB) []byte {
	tb.Helper()
	const x, y uint64 = 0x7f0000000000, 0x7f0010000000
	ent := func(act snapshot.Action, addr uint64, size int64) snapshot.TraceEntry {
		return snapshot.TraceEntry{Action: act, Addr: addr, Size: size, TimeUS: snapshot.NoTime}
	}
	s := snapshot.New([]snapshot.Segment{
		{Address: x, TotalSize: 100 << 20, SegmentType: "large", Blocks: []snapshot.Block{
			{Address: x, Size: 100 << 20, RequestedSize: 100 << 20, State: snapshot.ActiveAllocated}}},
		{Address: y, TotalSize: 200 << 20, SegmentType: "large", Blocks: []snapshot.Block{
			{Address: y, Size: 200 << 20, State: snapshot.Inactive}}},
	}, []snapshot.TraceEntry{
		ent(snapshot.Alloc, y, 10<<20),
		ent(snapshot.FreeRequested, y, 10<<20), ent(snapshot.FreeCompleted, y, 10<<20),
	})
	var buf bytes.Buffer
	require.NoError(tb, snapshot.Write(&buf, s, snapshot.WriteOptions{}))
	return buf.Bytes()
}
