package sim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/traces"
)

var graphPool = snapshot.PoolID{1, 0}

// pooledReplay replays tb through the pytorch strategy of conf under
// release version, serving private pools itself, on devices of capacity
// bytes, with st as the trace's start.
func pooledReplay(t *testing.T, tb *traceBuilder, st *traces.Start, conf, version string, capacity int64) Result {
	t.Helper()
	c, err := pytorch.ParseConf(conf)
	require.NoError(t, err)
	c.Version, err = pytorch.ParseVersion(version)
	require.NoError(t, err)
	cfg := Config{Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(b, c) }, Strategy: "pytorch", Start: st, Capacity: capacity, PrivatePools: true, Verify: true}
	res, err := Replay(tb.reader(), cfg)
	require.NoError(t, err)
	return res
}

// privateStart returns a start that marks events (by index) as
// allocations in private pool graphPool.
func privateStart(events ...int) *traces.Start {
	st := &traces.Start{}
	for _, n := range events {
		for len(st.Private) <= n/64 {
			st.Private = append(st.Private, 0)
		}
		st.Private[n/64] |= 1 << (n % 64)
		st.PrivatePools = append(st.PrivatePools, graphPool)
	}
	return st
}

// TestPoolAllocatorServes: with Config.PrivatePools the pytorch strategy serves
// a trace's allocations in a private pool from the pool's own segment: the
// default pools' request after it takes a segment of its own, as
// PyTorch's does, where the same trace without the pool reuses the cached
// one, and so does the replay without PrivatePools, which holds no
// segment of the pool to serve it from (none recorded).
func TestPoolAllocatorServes(t *testing.T) {
	tb := newTrace().alloc(1, 5<<20).free(1).alloc(2, 5<<20)
	res := pooledReplay(t, tb, privateStart(0), "", "2.11", 0)
	assert.Equal(t, int64(2), res.DeviceMallocs)
	assert.Equal(t, int64(40<<20), res.PeakReservedBytes)
	res = pooledReplay(t, tb, nil, "", "2.11", 0)
	assert.Equal(t, int64(1), res.DeviceMallocs)
	cfg := Config{Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(b, pytorch.DefaultConfig()) }, Strategy: "pytorch", Start: privateStart(0)}
	res, err := Replay(tb.reader(), cfg)
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.DeviceMallocs, "without PrivatePools")
}

// TestPoolSegmentFreeReleases: the trace's segment_free of a private
// pool's segment releases the pool, whose cached segment goes back to the
// device: the default pools' 60 MiB then fit a 70 MiB device, which they
// do not while the pool holds its 20 MiB.
func TestPoolSegmentFreeReleases(t *testing.T) {
	tb := newTrace().alloc(1, 5<<20).free(1).alloc(2, 60<<20)
	st := privateStart(0)
	res := pooledReplay(t, tb, st, "", "2.11", 70<<20)
	assert.Equal(t, int64(1), res.OOMs, "the live pool keeps its segment")
	st.PoolSegments = []traces.PoolSegment{{Event: 2, Pool: graphPool, Addr: 0x7f0000000000, Size: 20 << 20, Free: true}}
	res = pooledReplay(t, tb, st, "", "2.11", 70<<20)
	assert.Equal(t, int64(0), res.OOMs)
	assert.Equal(t, int64(1), res.DeviceFrees, "the released pool's segment")
}

// TestPoolVersionExpandable: with expandable_segments on, a private
// pool's 30 MiB request maps two 20 MiB pages from PyTorch 2.5
// (pytorch/pytorch#128068) and takes a 30 MiB cudaMalloc segment in 2.4;
// the default pools' request maps a page in both.
func TestPoolVersionExpandable(t *testing.T) {
	tb := newTrace().alloc(1, 30<<20).alloc(2, 15<<20)
	for _, tt := range []struct {
		version string
		peak    int64
	}{{"2.4", 50 << 20}, {"2.5", 60 << 20}} {
		res := pooledReplay(t, tb, privateStart(0), "expandable_segments:True", tt.version, 0)
		assert.Equal(t, tt.peak, res.PeakReservedBytes, "PyTorch %s", tt.version)
		assert.Equal(t, int64(0), res.OOMs)
	}
}

// TestPoolFromSnapshot: a snapshot's private pool through its reader. With
// PrivatePools the pool's 40 MiB segment of the start state (5 MiB live)
// is restored into the strategy's pool, the trace's 6 MiB allocation in it
// is served from its free 35 MiB, and the default pools' 8 MiB takes a
// segment of its own. With max_split_size_mb:20 the pool's rules refuse
// the 35 MiB block to a 6 MiB request and the pool takes a new 20 MiB
// segment, where the replay that holds the recorded segment serves the
// request from it.
func TestPoolFromSnapshot(t *testing.T) {
	const p, a uint64 = 0x7f0004000000, 0x7f0008000000
	ent := func(act snapshot.Action, addr uint64, size int64) snapshot.TraceEntry {
		return snapshot.TraceEntry{Action: act, Addr: addr, Size: size, TimeUS: snapshot.NoTime}
	}
	s := snapshot.New([]snapshot.Segment{
		{Address: p, TotalSize: 40 << 20, SegmentType: "large", Pool: graphPool, Blocks: []snapshot.Block{
			{Address: p, Size: 5 << 20, RequestedSize: 5 << 20, State: snapshot.ActiveAllocated},
			{Address: p + 5<<20, Size: 6 << 20, RequestedSize: 6 << 20, State: snapshot.ActiveAllocated},
			{Address: p + 11<<20, Size: 29 << 20, State: snapshot.Inactive}}},
		{Address: a, TotalSize: 20 << 20, SegmentType: "large", Blocks: []snapshot.Block{
			{Address: a, Size: 8 << 20, RequestedSize: 8 << 20, State: snapshot.ActiveAllocated},
			{Address: a + 8<<20, Size: 12 << 20, State: snapshot.Inactive}}},
	}, []snapshot.TraceEntry{
		ent(snapshot.Alloc, p+5<<20, 6<<20),
		ent(snapshot.SegmentAlloc, a, 20<<20), ent(snapshot.Alloc, a, 8<<20),
	})
	var buf bytes.Buffer
	require.NoError(t, snapshot.Write(&buf, s, snapshot.WriteOptions{}))
	for _, tt := range []struct {
		conf          string
		pooled        bool
		mallocs, peak int64
	}{
		{"", true, 1, 60 << 20},
		{"", false, 1, 60 << 20},
		{"max_split_size_mb:20", true, 2, 80 << 20},
		{"max_split_size_mb:20", false, 1, 60 << 20},
	} {
		r, err := traces.NewReader(bytes.NewReader(buf.Bytes()), "p.pickle", traces.Options{})
		require.NoError(t, err)
		c, err := pytorch.ParseConf(tt.conf)
		require.NoError(t, err)
		cfg := Config{Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) { return pytorch.New(b, c) },
			Strategy: "pytorch", PrivatePools: tt.pooled, Verify: tt.pooled}
		res, err := Replay(r, cfg)
		require.NoError(t, err)
		assert.Equal(t, int64(1), res.StartSegments, "%+v", tt)
		assert.Equal(t, tt.mallocs, res.DeviceMallocs, "%+v", tt)
		assert.Equal(t, tt.peak, res.PeakReservedBytes, "%+v", tt)
	}
}
