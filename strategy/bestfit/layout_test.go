package bestfit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// kit holds the tests bestfit shares with the other strategies built on
// package segment.
var kit = segmenttest.Kit[Config, *Pool]{
	New:    New,
	Front:  func(p *Pool) *segment.Front { return &p.front },
	Config: testConfig,
	WantSize: func(c Config) func(int64) int64 {
		if c.SplitThreshold <= c.Round {
			return c.RoundSize // every rest is split off
		}
		return nil
	},
}

// check verifies every invariant of p: see segmenttest.Kit.Check.
func (p *Pool) check() error { return kit.Check(p) }

// layout returns the pool's segments in the notation of
// segmenttest.ParseLayout.
func (p *Pool) layout() string { return kit.Layout(p) }

// testConfig is the configuration of the layout tests unless they say
// otherwise: exact growth, so that a new segment is just the block.
var testConfig = Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowExact, Chunk: 1}

// TestFreeCoalesces frees a block of a given layout and checks the layout
// after: merged with free neighbours in its segment, never across segments.
func TestFreeCoalesces(t *testing.T) { kit.FreeCoalesces(t) }

// TestAllocSplits allocates from a given layout and checks the block handed
// out and the layout after.
func TestAllocSplits(t *testing.T) {
	kit.AllocSplits(t, []segmenttest.AllocCase[Config]{
		{Name: "split", Before: "F4K", Size: 1000, Offset: 0, BlkSize: 1024, After: "U1K F3K"},
		{Name: "exact fit, no split", Before: "F1K", Size: 1024, BlkSize: 1024, After: "U1K"},
		{Name: "min block", Before: "F1K", Size: 1, BlkSize: 512, After: "U512 F512"},
		{Name: "rounded up to 512", Before: "F2K", Size: 513, BlkSize: 1024, After: "U1K F1K"},
		{Name: "best fit, not first fit", Before: "F2K U512 F1K U512 F1536", Size: 1000, Offset: 2560, BlkSize: 1024, After: "F2K U512 U1K U512 F1536"},
		{Name: "best fit takes an exact fit", Before: "F4K U512 F1536 U512 F1K", Size: 1100, Offset: 4608, BlkSize: 1536, After: "F4K U512 U1536 U512 F1K"},
		{Name: "best fit splits the smallest that fits", Before: "F4K U512 F2K U512 F1K", Size: 1100, Offset: 4608, BlkSize: 1536, After: "F4K U512 U1536 F512 U512 F1K"},
		{Name: "ties go to the lowest address", Before: "F1K U512 F1K U512 F1K", Size: 1024, BlkSize: 1024, After: "U1K U512 F1K U512 F1K"},
		{Name: "best fit across segments", Before: "F4K U512 | F1K U512", Size: 600, Seg: 1, BlkSize: 1024, After: "F4K U512 | U1K U512"},
		{Name: "lowest address across segments", Before: "U512 F1K | F1K U512", Size: 1024, Offset: 512, BlkSize: 1024, After: "U512 U1K | F1K U512"},
		{Name: "nothing fits: a new segment", Before: "F1K U512", Size: 1025, Seg: 1, BlkSize: 1536, After: "F1K U512 | U1536", Grew: true},
		{
			Name: "rest at the threshold: split", Config: Config{Round: 512, MinBlock: 512, SplitThreshold: 2 * KiB, Grow: GrowExact, Chunk: 1},
			Before: "F3K", Size: 1024, BlkSize: 1024, After: "U1K F2K",
		},
		{
			Name: "rest below the threshold: handed out whole", Config: Config{Round: 512, MinBlock: 512, SplitThreshold: 2 * KiB, Grow: GrowExact, Chunk: 1},
			Before: "F2560", Size: 1024, BlkSize: 2560, After: "U2560",
		},
		{
			Name: "round 256, min block 512", Config: Config{Round: 256, MinBlock: 512, SplitThreshold: 256, Grow: GrowExact, Chunk: 1},
			Before: "F1K", Size: 700, BlkSize: 768, After: "U768 F256",
		},
		{
			Name: "round 256, min block 512, small request", Config: Config{Round: 256, MinBlock: 512, SplitThreshold: 256, Grow: GrowExact, Chunk: 1},
			Before: "F768 U512 F512", Size: 10, Offset: 1280, BlkSize: 512, After: "F768 U512 U512",
		},
		{
			Name: "new segment from chunk growth", Config: Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowChunk, Chunk: 4 * KiB},
			Before: "U512 F512", Size: 1024, Seg: 1, BlkSize: 1024, After: "U512 F512 | U1K F3K", Grew: true,
		},
	})
}

func TestGrowthValues(t *testing.T) {
	// Config.segment converts a Growth to the segment package's by value.
	assert.Equal(t, segment.GrowExact, segment.Growth(GrowExact))
	assert.Equal(t, segment.GrowChunk, segment.Growth(GrowChunk))
	assert.Equal(t, segment.GrowDouble, segment.Growth(GrowDouble))
	assert.Equal(t, "double", GrowDouble.String())
}

// TestGrowth checks the segment sizes each growth policy asks the device
// for.
func TestGrowth(t *testing.T) {
	tests := []struct {
		name  string
		c     Config
		sizes []int64 // allocated in turn, none freed
		segs  []int64 // device mallocs, in order
	}{
		{"exact", Config{Grow: GrowExact, Chunk: 4 * KiB}, []int64{1000, 1000, 5000, 1}, []int64{1024, 1024, 5120, 512}},
		{"chunk", Config{Grow: GrowChunk, Chunk: 4 * KiB}, []int64{1000, 3000, 1000, 5000, 1}, []int64{4096, 4096, 5120}},
		{"chunk rounded up to round", Config{Grow: GrowChunk, Chunk: 4000}, []int64{1000, 3500}, []int64{4096, 4096}},
		{
			// TensorFlow's rule: 2K, then 4K; a request of 20K raises the
			// size from 8K to 32K, which is not doubled for the next
			// segment; the one after that is.
			"double", Config{Grow: GrowDouble, Chunk: 2 * KiB},
			[]int64{1024, 2048, 20480, 30720, 40960},
			[]int64{2048, 4096, 32768, 32768, 65536},
		},
		{
			// RMM's pool with an initial pool of S bytes grows by the
			// pool's size: S, then S, 2S, 4S.
			"double from an initial segment", Config{Grow: GrowDouble, Chunk: 4 * KiB, Initial: 4 * KiB},
			[]int64{4096, 4096, 4096, 4096, 4096},
			[]int64{4096, 4096, 8192, 16384},
		},
		{"double, a request larger than the first segment", Config{Grow: GrowDouble, Chunk: 2 * KiB}, []int64{3 * KiB, 10 * KiB}, []int64{4096, 16384}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			c.Round, c.MinBlock, c.SplitThreshold = 512, 512, 512
			p, dev := alloctest.New(t, 1<<30, New, c)
			assert.Equal(t, tt.segs, segmenttest.Grow(t, p, dev, p.check, tt.sizes))
		})
	}
}

func TestInitial(t *testing.T) {
	dev := strategytest.NewDevice(1 << 30)
	c := DefaultConfig()
	c.Initial = 1000
	p, err := New(dev, c)
	require.NoError(t, err)
	assert.Equal(t, "F1K", p.layout(), "the initial segment, rounded up to 512")
	assert.Equal(t, gpualloc.Stats{Reserved: 1024, PeakReserved: 1024, DeviceMallocs: 1, DeviceMallocBytes: 1024}, p.Stats())
	b, err := p.Alloc(1)
	require.NoError(t, err)
	assert.Equal(t, "U512 F512", p.layout())
	assert.Equal(t, int64(1), p.Stats().CacheHits)
	require.NoError(t, p.Free(b))
	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used, "the initial segment is released like any other")

	_, err = New(strategytest.NewDevice(MiB), Config{Round: 512, MinBlock: 512, Grow: GrowChunk, Chunk: 1, Initial: 2 * MiB})
	assert.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.ErrorContains(t, err, "bestfit: initial segment of 2097152 bytes: ")
}

// TestOutOfMemory checks the retries when the device runs out: entirely
// free segments are released and the segment asked for again, then a
// segment of just the block.
func TestOutOfMemory(t *testing.T) {
	c := Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowChunk, Chunk: 4 * KiB}

	t.Run("release free segments and retry", func(t *testing.T) {
		dev := strategytest.NewDevice(10 * KiB)
		p, err := New(dev, c)
		require.NoError(t, err)
		a, err := p.Alloc(3 * KiB)
		require.NoError(t, err)
		_, err = p.Alloc(3 * KiB)
		require.NoError(t, err)
		require.NoError(t, p.Free(a))
		require.Equal(t, "F4K | U3K F1K", p.layout())
		_, err = p.Alloc(5 * KiB) // 2K free on the device: the free segment goes
		require.NoError(t, err)
		require.NoError(t, p.check())
		assert.Equal(t, "U3K F1K | U5K", p.layout())
		st := p.Stats()
		assert.Equal(t, int64(1), st.Retries)
		assert.Equal(t, int64(1), st.DeviceFrees)
		assert.Zero(t, st.OOMs)
	})

	t.Run("fall back to a segment of the block", func(t *testing.T) {
		dev := strategytest.NewDevice(6 * KiB)
		p, err := New(dev, c)
		require.NoError(t, err)
		_, err = p.Alloc(3 * KiB)
		require.NoError(t, err)
		_, err = p.Alloc(2 * KiB) // a 4K segment does not fit: 2K does
		require.NoError(t, err)
		require.NoError(t, p.check())
		assert.Equal(t, "U3K F1K | U2K", p.layout())
		assert.Equal(t, int64(1), p.Stats().Retries)
		assert.Zero(t, p.Stats().DeviceFrees, "nothing to release")
	})

	t.Run("out of memory, then usable", func(t *testing.T) {
		p, a := kit.OutOfMemory(t, c, "bestfit: alloc of 6144 bytes (6144 rounded): segment of 6144 bytes: ")
		// Still usable.
		require.NoError(t, p.Free(a))
		_, err := p.Alloc(4 * KiB)
		require.NoError(t, err)
		assert.Equal(t, "U4K", p.layout())
	})

	t.Run("rounded size overflows", func(t *testing.T) {
		p, err := New(strategytest.NewDevice(GiB), DefaultConfig())
		require.NoError(t, err)
		_, err = p.Alloc(1<<63 - 1)
		assert.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.Equal(t, int64(1), p.Stats().OOMs)
		assert.Zero(t, p.Stats().DeviceMallocs)
	})
}

const GiB = 1 << 30

func TestFreeSpace(t *testing.T) {
	kit.FreeSpace(t)
	empty, err := New(strategytest.NewDevice(GiB), DefaultConfig())
	require.NoError(t, err)
	largest, total := empty.FreeSpace()
	assert.Zero(t, largest)
	assert.Zero(t, total)
}

func TestReleaseAllDeviceError(t *testing.T) {
	p, err := New(alloctest.Refusing{Device: strategytest.NewDevice(GiB)}, testConfig)
	require.NoError(t, err)
	alloctest.ReleaseRefused(t, p, "bestfit", p.check, p.layout, "F512")
}
