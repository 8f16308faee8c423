package pytorch_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

func mustConf(t testing.TB, conf string) pytorch.Config {
	c, err := pytorch.ParseConf(conf)
	require.NoError(t, err)
	return c
}

func TestConformance(t *testing.T) {
	for _, conf := range []string{"", "max_split_size_mb:128", "roundup_power2_divisions:4", "roundup_power2_divisions:[256:1,512:2,>:8]",
		// On the suite's device, which has virtual memory: blocks lie in
		// mapped memory of the ranges the segments reserve.
		"expandable_segments:True", "expandable_segments:True,max_split_size_mb:40", "expandable_segments:True,roundup_power2_divisions:4"} {
		t.Run(conf, func(t *testing.T) {
			c := mustConf(t, conf)
			strategytest.Run(t, alloctest.Open(pytorch.New, c), &strategytest.Options{Caching: true, Align: 512})
		})
	}
}

func TestRoundSize(t *testing.T) {
	def := pytorch.DefaultConfig()
	for _, tt := range []struct{ in, want int64 }{
		{1, 512}, {511, 512}, {512, 512}, {513, 1024}, {MiB + 1, MiB + 512},
	} {
		assert.Equal(t, tt.want, def.RoundSize(tt.in), "%d", tt.in)
	}
	d4 := mustConf(t, "roundup_power2_divisions:4")
	for _, tt := range []struct{ in, want int64 }{
		{1, 512}, {2048, 2048}, {2049, 2560}, // size <= 512*4: multiple of 512
		{2560 + 1, 3072}, // 2561: floor 2048, step 512
		{MiB, MiB}, {MiB + 1, MiB + 256*KiB}, {5 * MiB, 5 * MiB}, {5*MiB + 1, 6 * MiB},
		{1200 * MiB, 1280 * MiB},
	} {
		assert.Equal(t, tt.want, d4.RoundSize(tt.in), "%d", tt.in)
	}
	// Band edges: [256:1,512:2,>:8]: 1 up to band 8 (256 MiB..512 MiB), then 8
	// from band 9 on (">" overwrites the last named band, as PyTorch does).
	l := mustConf(t, "roundup_power2_divisions:[256:1,512:2,>:8]")
	assert.Equal(t, int64(1), l.RoundupPower2Divisions[0])
	assert.Equal(t, int64(1), l.RoundupPower2Divisions[8])
	assert.Equal(t, int64(8), l.RoundupPower2Divisions[9])
	assert.Equal(t, int64(8), l.RoundupPower2Divisions[15])
	assert.Equal(t, int64(300*MiB+512), l.RoundSize(300*MiB+1))
	assert.Equal(t, int64(512*MiB+64*MiB), l.RoundSize(512*MiB+1))
	assert.Equal(t, int64(512*MiB-512), l.RoundSize(512*MiB-1000))
	// Below 1 MiB the first band applies.
	b := mustConf(t, "roundup_power2_divisions:[1:4,2:1]")
	assert.Equal(t, int64(4), b.RoundupPower2Divisions[0])
	assert.Equal(t, int64(640*KiB), b.RoundSize(600*KiB))
}

// alloc is a test helper that allocates on stream s.
func alloc(t *testing.T, a *pytorch.Allocator, size int64, s uint64) gpualloc.Block {
	t.Helper()
	b, err := a.AllocStream(size, s)
	require.NoError(t, err)
	return b
}

// cache allocates blocks of each of sizes in turn on stream 0, then frees
// them in the same order, so that a holds them cached.
func cache(t *testing.T, a *pytorch.Allocator, sizes ...int64) {
	t.Helper()
	var blocks []gpualloc.Block
	for _, size := range sizes {
		blocks = append(blocks, alloc(t, a, size, 0))
	}
	for _, b := range blocks {
		require.NoError(t, a.Free(b))
	}
}

func newAlloc(t *testing.T, conf string, capacity int64) (*pytorch.Allocator, *virtual.Device) {
	return alloctest.New(t, capacity, pytorch.New, mustConf(t, conf))
}

func TestPoolsAndSegments(t *testing.T) {
	a, dev := newAlloc(t, "", 8*GiB)
	// Small pool: up to 1 MiB, 2 MiB segments.
	b1 := alloc(t, a, MiB, 0)
	assert.Equal(t, int64(2*MiB), dev.Stats().Used)
	b2 := alloc(t, a, 1000, 0) // same segment, after b1
	assert.Equal(t, b1.Addr+MiB, b2.Addr)
	assert.Equal(t, int64(2*MiB), dev.Stats().Used)
	// Large pool: over 1 MiB -> 20 MiB segment.
	b3 := alloc(t, a, MiB+1, 0)
	assert.Equal(t, int64(22*MiB), dev.Stats().Used)
	b4 := alloc(t, a, 10*MiB-512, 0) // < 10 MiB: from b3's segment remainder (18 MiB free)
	assert.Equal(t, b3.End(), b4.Addr)
	b5 := alloc(t, a, 10*MiB, 0) // >= 10 MiB: own segment, rounded to 2 MiB
	assert.Equal(t, int64(32*MiB), dev.Stats().Used)
	b6 := alloc(t, a, 11*MiB, 0)
	assert.Equal(t, int64(44*MiB), dev.Stats().Used)
	for _, b := range []gpualloc.Block{b1, b2, b3, b4, b5, b6} {
		require.NoError(t, a.Free(b))
	}
	require.NoError(t, a.ReleaseAll())
	assert.Equal(t, int64(0), dev.Stats().Used)
}

func TestSplitRules(t *testing.T) {
	// Small pool: a remainder of 512 bytes is split off.
	a, _ := newAlloc(t, "", 8*GiB)
	b := alloc(t, a, 2*MiB-512, 0)
	_ = b
	// A 2 MiB segment was needed since 2 MiB-512 > 1 MiB: large pool, 20 MiB segment.
	c := alloc(t, a, 512, 0)
	d := alloc(t, a, 512, 0)
	assert.Equal(t, c.End(), d.Addr, "small blocks split at 512")
	// Large pool: remainder of exactly 1 MiB is not split.
	e := alloc(t, a, 19*MiB, 1) // 20 MiB segment on stream 1, remainder 1 MiB
	assert.Equal(t, int64(20*MiB), e.Size, "remainder of 1 MiB stays in the block")
	f := alloc(t, a, 18*MiB, 2) // remainder 2 MiB > 1 MiB: split
	assert.Equal(t, int64(18*MiB), f.Size)
	free, _ := a.FreeSpace()
	assert.GreaterOrEqual(t, free, int64(2*MiB))
	// With max_split_size, blocks of at least it are not split.
	m, _ := newAlloc(t, "max_split_size_mb:20", 8*GiB)
	g := alloc(t, m, 30*MiB, 0)
	require.NoError(t, m.Free(g))
	h := alloc(t, m, 25*MiB, 0) // 30 MiB block, 25 MiB >= max_split: not split, but served (5 MiB < 20 MiB rounding)
	assert.Equal(t, g.Addr, h.Addr)
	assert.Equal(t, int64(30*MiB), h.Size)
}

func TestOversize(t *testing.T) {
	a, dev := newAlloc(t, "max_split_size_mb:64", 8*GiB)
	big := alloc(t, a, 100*MiB, 0)
	require.NoError(t, a.Free(big))
	// A request below max_split is not served from an oversize block.
	small := alloc(t, a, 5*MiB, 0)
	assert.NotEqual(t, big.Addr, small.Addr)
	assert.Equal(t, int64(120*MiB), dev.Stats().Used)
	// A request >= max_split is served if the block is < 20 MiB larger.
	x := alloc(t, a, 81*MiB, 0)
	assert.Equal(t, big.Addr, x.Addr)
	require.NoError(t, a.Free(x))
	// ... and not if it is 20 MiB larger or more.
	y := alloc(t, a, 80*MiB, 0)
	assert.NotEqual(t, big.Addr, y.Addr)
	// max_non_split_rounding_mb widens that.
	w, _ := newAlloc(t, "max_split_size_mb:64,max_non_split_rounding_mb:40", 8*GiB)
	bw := alloc(t, w, 100*MiB, 0)
	require.NoError(t, w.Free(bw))
	assert.Equal(t, bw.Addr, alloc(t, w, 70*MiB, 0).Addr)
}

func TestStreams(t *testing.T) {
	a, _ := newAlloc(t, "", 8*GiB)
	b := alloc(t, a, 4*KiB, 1)
	require.NoError(t, a.Free(b))
	c := alloc(t, a, 4*KiB, 2)
	assert.Equal(t, uint64(2), c.Stream)
	assert.NotEqual(t, b.Addr, c.Addr, "a free block on stream 1 is not used on stream 2")
	d := alloc(t, a, 4*KiB, 1)
	assert.Equal(t, b.Addr, d.Addr)
	assert.Equal(t, uint64(1), d.Stream)
}

func TestReleaseAndRetry(t *testing.T) {
	a, dev := newAlloc(t, "", 100*MiB)
	cache(t, a, 40*MiB, 40*MiB)
	// 60 MiB does not fit beside the cached 80 MiB: release all, retry.
	z := alloc(t, a, 60*MiB, 0)
	assert.Equal(t, int64(60*MiB), dev.Stats().Used)
	ms := a.MemoryStats()
	assert.Equal(t, int64(1), ms.NumAllocRetries.Current)
	assert.Equal(t, int64(2), ms.NumDeviceFree.Current)
	_, err := a.Alloc(60 * MiB)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, int64(1), a.MemoryStats().NumOOMs.Current)
	assert.Equal(t, int64(1), a.Stats().OOMs)
	require.NoError(t, a.Free(z))
	alloc(t, a, 60*MiB, 0) // still usable

	// With a max split size, only oversize blocks are released, largest first.
	m, mdev := newAlloc(t, "max_split_size_mb:20", 100*MiB)
	cache(t, m, 30*MiB, 40*MiB, 5*MiB) // 5 MiB: a 20 MiB segment
	s := alloc(t, m, 50*MiB, 0)        // no room: release 40 MiB, then 30 MiB... 40 < 50, so both
	assert.Equal(t, int64(70*MiB), mdev.Stats().Used)
	assert.Equal(t, int64(0), m.MemoryStats().NumAllocRetries.Current, "served by release_available_cached_blocks")
	_ = s
}

func TestGarbageCollection(t *testing.T) {
	a, dev := newAlloc(t, "garbage_collection_threshold:0.5,memory_fraction:1", 200*MiB)
	cache(t, a, 40*MiB, 42*MiB) // old, mid
	// Make mid younger: take it and give it back.
	mid := alloc(t, a, 42*MiB, 0)
	require.NoError(t, a.Free(mid))
	// reserved 82 MiB <= 100 MiB: no collection.
	n1 := alloc(t, a, 30*MiB, 1)
	assert.Equal(t, int64(112*MiB), dev.Stats().Used)
	// Now reserved 112 MiB > 100 MiB: the old block (age >= mean) goes first.
	n2 := alloc(t, a, 30*MiB, 1)
	assert.Equal(t, int64(112*MiB-40*MiB+30*MiB), dev.Stats().Used)
	_, _ = n1, n2
}

// A memory fraction whose cap rounds to 0 bytes caps all the same: every
// allocation fails, as in PyTorch, where set_fraction is what caps.
func TestMemoryFractionRoundingToZero(t *testing.T) {
	for _, conf := range []string{"memory_fraction:1e-12", "memory_fraction:1e-300", "memory_fraction:1e-12,expandable_segments:True"} {
		a, dev := newAlloc(t, conf, 8*GiB)
		_, err := a.Alloc(512)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, conf)
		_, err = a.Alloc(100 * MiB)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, conf)
		assert.Zero(t, dev.Stats().Used, conf)
	}
	// A cap of a few bytes, under the smallest segment, refuses too.
	a, _ := newAlloc(t, "memory_fraction:1e-9", 8*GiB) // 8 bytes
	_, err := a.Alloc(1)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
}

func TestParseConf(t *testing.T) {
	c, err := pytorch.ParseConf("max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:False,garbage_collection_threshold:0.6,max_non_split_rounding_mb:30")
	require.NoError(t, err)
	assert.Equal(t, int64(128*MiB), c.MaxSplitSize)
	assert.Equal(t, 0.6, c.GarbageCollectionThreshold)
	assert.Equal(t, int64(30*MiB), c.MaxNonSplitRounding)
	for _, unlimited := range []string{"unlimited", "inf"} {
		c, err := pytorch.ParseConf("max_split_size_mb:128,max_split_size_mb:" + unlimited)
		require.NoError(t, err)
		assert.Equal(t, pytorch.DefaultConfig().MaxSplitSize, c.MaxSplitSize, unlimited)
	}
	for _, tt := range []struct{ conf, key string }{
		{"max_split_size_mb:10", "max_split_size_mb"},
		{"max_split_size_mb:x", "max_split_size_mb"},
		{"garbage_collection_threshold:1.5", "garbage_collection_threshold"},
		{"roundup_power2_divisions:3", "roundup_power2_divisions"},
		{"roundup_power2_divisions:[100:2]", "roundup_power2_divisions"},
		{"expandable_segments:maybe", "expandable_segments"},
		{"backend:cudaMallocAsync", "backend"},
		{"bogus:1", "bogus"},
	} {
		_, err := pytorch.ParseConf(tt.conf)
		var pe *gpualloc.ParamError
		require.ErrorAs(t, err, &pe, tt.conf)
		assert.Equal(t, tt.key, pe.Key, tt.conf)
	}
}

func TestRegistry(t *testing.T) {
	env := map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8]"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	open := func(spec string) (gpualloc.Allocator, error) {
		sp, err := gpualloc.ParseSpec(spec)
		require.NoError(t, err)
		p, err := gpualloc.Resolve(sp, getenv)
		require.NoError(t, err)
		return p.Open(strategytest.NewDevice(GiB))
	}
	a, err := open("pytorch:max_split_size_mb=64")
	require.NoError(t, err)
	c := a.(*pytorch.Allocator).Config()
	assert.Equal(t, int64(64*MiB), c.MaxSplitSize, "spec overrides conf")
	assert.Equal(t, int64(8), c.RoundupPower2Divisions[9], "conf supplies the rest")
	a, err = open("pytorch:roundup_power2_divisions=256:1;512:2;>:8")
	require.NoError(t, err)
	assert.Contains(t, a.(gpualloc.Specer).Spec(), "max_split_size_mb=128")
	_, err = open("pytorch:max_split_size_mb=5")
	assert.ErrorContains(t, err, "max_split_size_mb")
	env["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:5"
	_, err = open("pytorch")
	assert.ErrorContains(t, err, "PYTORCH_CUDA_ALLOC_CONF")
	assert.ErrorContains(t, err, "max_split_size_mb")

	// PYTORCH_CUDA_ALLOC_CONF wins over PYTORCH_ALLOC_CONF, as PyTorch
	// 2.10's CUDAAllocatorConfig reads them; the second serves when the
	// first is unset.
	env["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128"
	env["PYTORCH_ALLOC_CONF"] = "max_split_size_mb:256"
	a, err = open("pytorch")
	require.NoError(t, err)
	assert.Equal(t, int64(128*MiB), a.(*pytorch.Allocator).Config().MaxSplitSize)
	delete(env, "PYTORCH_CUDA_ALLOC_CONF")
	a, err = open("pytorch")
	require.NoError(t, err)
	assert.Equal(t, int64(256*MiB), a.(*pytorch.Allocator).Config().MaxSplitSize)
	env["PYTORCH_ALLOC_CONF"] = "max_split_size_mb:6"
	_, err = open("pytorch")
	assert.ErrorContains(t, err, "PYTORCH_ALLOC_CONF")
}

func TestRestore(t *testing.T) {
	dev := strategytest.NewDevice(GiB)
	a, err := pytorch.New(dev, pytorch.DefaultConfig())
	require.NoError(t, err)
	base, err := dev.Malloc(20 * MiB) // the device's record of the segment
	require.NoError(t, err)
	live, err := a.Restore(snapshot.Segment{Address: base, TotalSize: 20 * MiB, Blocks: []snapshot.Block{
		{Address: base, Size: 4 * MiB, RequestedSize: 4*MiB - 100, State: snapshot.ActiveAllocated},
		{Address: base + 4*MiB, Size: 6 * MiB, State: snapshot.Inactive},
		{Address: base + 10*MiB, Size: 10 * MiB, RequestedSize: 10 * MiB, State: snapshot.ActivePendingFree},
	}})
	require.NoError(t, err)
	require.Len(t, live, 2)
	assert.Equal(t, base, live[0].Addr)
	assert.Equal(t, base+10*MiB, live[1].Addr)
	// The free 6 MiB block serves the next fitting request.
	b := alloc(t, a, 5*MiB, 0)
	assert.Equal(t, base+4*MiB, b.Addr)
	assert.Equal(t, int64(20*MiB), a.MemoryStats().ReservedBytes.Current)
	for _, x := range append(live, b) {
		require.NoError(t, a.Free(x))
	}
	require.NoError(t, a.ReleaseAll())
	assert.NoError(t, dev.Err())
	assert.Equal(t, int64(0), dev.Stats().Used)
	for _, tc := range []struct {
		s   snapshot.Segment
		err string
	}{
		{snapshot.Segment{Address: base, TotalSize: 2 * MiB, Blocks: []snapshot.Block{{Address: base, Size: MiB}}}, "blocks cover 1048576 bytes"},
		{snapshot.Segment{Address: base, TotalSize: 2 * MiB, Blocks: []snapshot.Block{{Address: base + 512, Size: 2 * MiB}}}, "block 0 is at"},
		{snapshot.Segment{Address: base, TotalSize: 2 * MiB, Blocks: []snapshot.Block{{Address: base, Size: 1000}}}, "not a positive multiple of 512"},
		{snapshot.Segment{Address: base, TotalSize: 2 * MiB, Blocks: []snapshot.Block{
			{Address: base, Size: 2 * MiB, RequestedSize: 3 * MiB, State: snapshot.ActiveAllocated}}}, "more than its"},
		{snapshot.Segment{Address: base, TotalSize: 2 * MiB}, "empty segment"},
		{snapshot.Segment{Address: base, TotalSize: 2 * MiB, IsExpandable: true}, "expandable_segments is off"},
	} {
		_, err = a.Restore(tc.s)
		assert.ErrorContains(t, err, tc.err)
	}
}

// TestConfSyntax checks the commas of PYTORCH_CUDA_ALLOC_CONF as PyTorch's
// parser reads them: one trailing comma is allowed, an empty setting is not.
func TestConfSyntax(t *testing.T) {
	for _, conf := range []string{"", " ", "max_split_size_mb:128,", "max_split_size_mb:128 , expandable_segments:False, ", "backend:native"} {
		_, err := pytorch.ParseConf(conf)
		assert.NoError(t, err, "%q", conf)
	}
	for _, conf := range []string{",", ",max_split_size_mb:128", "max_split_size_mb:128,,expandable_segments:False", "max_split_size_mb"} {
		_, err := pytorch.ParseConf(conf)
		assert.Error(t, err, "%q", conf)
	}
	c, err := pytorch.ParseConf("roundup_power2_divisions:[1:0,2:8,8:2]")
	require.NoError(t, err)
	assert.Equal(t, [16]int64{0, 8, 0, 2}, c.RoundupPower2Divisions)
}

// TestSnapshotSettings checks that the pytorch strategy reads the settings
// of a snapshot as PyTorch recorded them.
func TestSnapshotSettings(t *testing.T) {
	s := snapshot.AllocatorSettings{Effective: true, MaxSplitSize: 256 * MiB, GarbageCollectionThreshold: 0.6,
		ExpandableSegments: true, RoundupPower2Divisions: [16]int64{0, 8, 0, 2},
		Conf: "max_split_size_mb:256,max_non_split_rounding_mb:40"}
	c, err := pytorch.ParseConf(s.AllocConf())
	require.NoError(t, err)
	want := pytorch.DefaultConfig()
	want.MaxSplitSize, want.GarbageCollectionThreshold, want.ExpandableSegments = 256*MiB, 0.6, true
	want.RoundupPower2Divisions, want.MaxNonSplitRounding = s.RoundupPower2Divisions, 40*MiB
	assert.Equal(t, want, c)
}

// TestDivisionsSpec checks that the spec of an allocator with
// roundup_power2_divisions reads back.
func TestDivisionsSpec(t *testing.T) {
	for _, d := range []string{"4", "256:1;512:2;>:8", "2:8;8:2", "1:0;32768:2"} {
		sp, err := gpualloc.ParseSpec("pytorch:roundup_power2_divisions=" + d)
		require.NoError(t, err)
		p, err := gpualloc.Resolve(sp, func(string) (string, bool) { return "", false })
		require.NoError(t, err)
		a, err := p.Open(strategytest.NewDevice(GiB))
		require.NoError(t, err)
		c := a.(*pytorch.Allocator).Config()
		sp, err = gpualloc.ParseSpec(a.(gpualloc.Specer).Spec())
		require.NoError(t, err)
		p, err = gpualloc.Resolve(sp, func(string) (string, bool) { return "", false })
		require.NoError(t, err)
		b, err := p.Open(strategytest.NewDevice(GiB))
		require.NoError(t, err)
		assert.Equal(t, c, b.(*pytorch.Allocator).Config(), "%s: %s", d, a.(gpualloc.Specer).Spec())
	}
}
