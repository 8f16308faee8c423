package bestfit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// check verifies every invariant of p: the heap's (see segment.Heap.Check),
// the index's, that the index holds exactly the free blocks, and that
// FreeSpace agrees with a brute-force computation.
func (p *Pool) check() error {
	free, err := p.h.Check()
	if err != nil {
		return err
	}
	inTree, err := p.free.Check(p.h.Nodes)
	if err != nil {
		return err
	}
	if len(inTree) != len(free) {
		return fmt.Errorf("the index holds %d blocks, the heap has %d free", len(inTree), len(free))
	}
	want := map[int32]bool{}
	for _, n := range free {
		want[n] = true
	}
	for _, n := range inTree {
		if !want[n] {
			return fmt.Errorf("the index holds block %d, which is not free", n)
		}
	}
	largest, total := p.FreeSpace()
	var wl, wt int64 // by brute force
	for _, n := range free {
		wl = max(wl, p.h.Nodes[n].Size)
		wt += p.h.Nodes[n].Size
	}
	if largest != wl || total != wt {
		return fmt.Errorf("FreeSpace() = %d, %d; brute force says %d, %d", largest, total, wl, wt)
	}
	return nil
}

// layout returns the pool's segments in the notation of
// segmenttest.ParseLayout.
func (p *Pool) layout() string { return segmenttest.FormatLayout(p.h.Layout()) }

// testConfig is the configuration of the layout tests unless they say
// otherwise: exact growth, so that a new segment is just the block.
var testConfig = Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowExact, Chunk: 1}

// build returns a pool in the state layout describes, on a device of 1 GiB,
// and its live blocks in layout order.
func build(t *testing.T, c Config, layout string) (*Pool, *strategytest.Device, []gpualloc.Block) {
	t.Helper()
	dev := strategytest.NewDevice(1 << 30)
	p, err := New(dev, c)
	require.NoError(t, err)
	segs, err := segmenttest.ParseLayout(layout)
	require.NoError(t, err)
	live, err := p.h.Build(segs)
	require.NoError(t, err)
	require.NoError(t, p.check())
	require.Equal(t, layout, p.layout(), "the layout built")
	return p, dev, live
}

// TestFreeCoalesces frees a block of a given layout and checks the layout
// after: merged with free neighbours in its segment, never across segments.
func TestFreeCoalesces(t *testing.T) {
	tests := []struct {
		name   string
		before string
		free   int // index of the live block to free
		after  string
	}{
		{"neither neighbour free", "U512 U512 U512", 1, "U512 F512 U512"},
		{"previous free", "F512 U1K U512", 0, "F1536 U512"},
		{"next free", "U512 U1K F512", 1, "U512 F1536"},
		{"both free", "F512 U1K F2K", 0, "F3584"},
		{"first block, next free", "U512 F512 U512", 0, "F1K U512"},
		{"last block, previous free", "U512 F512 U512", 1, "U512 F1K"},
		{"whole segment", "U1K", 0, "F1K"},
		{"segment end: no merge with the next segment", "U512 U512 | F1K U512", 1, "U512 F512 | F1K U512"},
		{"segment start: no merge with the previous segment", "U512 F512 | U512 U512", 1, "U512 F512 | F512 U512"},
		{"between segments", "F512 U512 | U512 | U512 F512", 2, "F512 U512 | U512 | F1K"},
		{"large", "F20M U1M F3M | U4M", 0, "F24M | U4M"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, dev, live := build(t, testConfig, tt.before)
			// The device hands out segments back to back: blocks at the
			// end of one segment and the start of the next are adjacent
			// in memory, yet belong to different segments.
			rs := dev.Regions()
			for i := 1; i < len(rs); i++ {
				require.Equal(t, rs[i-1].End(), rs[i].Addr, "segments %d and %d are adjacent", i-1, i)
			}
			require.NoError(t, p.Free(live[tt.free]))
			require.NoError(t, p.check())
			assert.Equal(t, tt.after, p.layout())
			assert.Equal(t, int64(len(rs)), dev.Stats().Mallocs, "no device call")
			assert.Zero(t, dev.Stats().Frees, "no device call")
		})
	}
}

// TestAllocSplits allocates from a given layout and checks the block handed
// out and the layout after.
func TestAllocSplits(t *testing.T) {
	tests := []struct {
		name     string
		c        Config // testConfig if zero
		before   string
		size     int64
		seg      int   // segment of the block handed out
		offset   int64 // its offset in the segment
		blkSize  int64
		after    string
		newSegms int // device mallocs made
	}{
		{name: "split", before: "F4K", size: 1000, offset: 0, blkSize: 1024, after: "U1K F3K"},
		{name: "exact fit, no split", before: "F1K", size: 1024, blkSize: 1024, after: "U1K"},
		{name: "min block", before: "F1K", size: 1, blkSize: 512, after: "U512 F512"},
		{name: "rounded up to 512", before: "F2K", size: 513, blkSize: 1024, after: "U1K F1K"},
		{name: "best fit, not first fit", before: "F2K U512 F1K U512 F1536", size: 1000, offset: 2560, blkSize: 1024, after: "F2K U512 U1K U512 F1536"},
		{name: "best fit takes an exact fit", before: "F4K U512 F1536 U512 F1K", size: 1100, offset: 4608, blkSize: 1536, after: "F4K U512 U1536 U512 F1K"},
		{name: "best fit splits the smallest that fits", before: "F4K U512 F2K U512 F1K", size: 1100, offset: 4608, blkSize: 1536, after: "F4K U512 U1536 F512 U512 F1K"},
		{name: "ties go to the lowest address", before: "F1K U512 F1K U512 F1K", size: 1024, blkSize: 1024, after: "U1K U512 F1K U512 F1K"},
		{name: "best fit across segments", before: "F4K U512 | F1K U512", size: 600, seg: 1, blkSize: 1024, after: "F4K U512 | U1K U512"},
		{name: "lowest address across segments", before: "U512 F1K | F1K U512", size: 1024, offset: 512, blkSize: 1024, after: "U512 U1K | F1K U512"},
		{name: "nothing fits: a new segment", before: "F1K U512", size: 1025, seg: 1, blkSize: 1536, after: "F1K U512 | U1536", newSegms: 1},
		{
			name: "rest at the threshold: split", c: Config{Round: 512, MinBlock: 512, SplitThreshold: 2 * KiB, Grow: GrowExact, Chunk: 1},
			before: "F3K", size: 1024, blkSize: 1024, after: "U1K F2K",
		},
		{
			name: "rest below the threshold: handed out whole", c: Config{Round: 512, MinBlock: 512, SplitThreshold: 2 * KiB, Grow: GrowExact, Chunk: 1},
			before: "F2560", size: 1024, blkSize: 2560, after: "U2560",
		},
		{
			name: "round 256, min block 512", c: Config{Round: 256, MinBlock: 512, SplitThreshold: 256, Grow: GrowExact, Chunk: 1},
			before: "F1K", size: 700, blkSize: 768, after: "U768 F256",
		},
		{
			name: "round 256, min block 512, small request", c: Config{Round: 256, MinBlock: 512, SplitThreshold: 256, Grow: GrowExact, Chunk: 1},
			before: "F768 U512 F512", size: 10, offset: 1280, blkSize: 512, after: "F768 U512 U512",
		},
		{
			name: "new segment from chunk growth", c: Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowChunk, Chunk: 4 * KiB},
			before: "U512 F512", size: 1024, seg: 1, blkSize: 1024, after: "U512 F512 | U1K F3K", newSegms: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			if c == (Config{}) {
				c = testConfig
			}
			p, dev, _ := build(t, c, tt.before)
			mallocs := dev.Stats().Mallocs
			b, err := p.Alloc(tt.size)
			require.NoError(t, err)
			require.NoError(t, p.check())
			assert.Equal(t, tt.after, p.layout())
			segs := p.h.Layout()
			require.Less(t, tt.seg, len(segs))
			assert.Equal(t, segs[tt.seg].Addr+uint64(tt.offset), b.Addr, "address: segment %d at %#x, offset %d", tt.seg, segs[tt.seg].Addr, b.Addr-segs[tt.seg].Addr)
			assert.Equal(t, tt.blkSize, b.Size)
			assert.Equal(t, tt.size, b.Requested)
			assert.Equal(t, int64(tt.newSegms), dev.Stats().Mallocs-mallocs)
			assert.Equal(t, tt.newSegms == 0, p.Stats().CacheHits == 1+int64(countLive(tt.before)), "a cache hit unless a segment was added")
		})
	}
}

func countLive(layout string) int {
	segs, _ := segmenttest.ParseLayout(layout)
	n := 0
	for _, s := range segs {
		for _, b := range s {
			if !b.Free {
				n++
			}
		}
	}
	return n
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
			dev := strategytest.NewDevice(1 << 30)
			p, err := New(dev, c)
			require.NoError(t, err)
			for _, size := range tt.sizes {
				_, err := p.Alloc(size)
				require.NoError(t, err)
				require.NoError(t, p.check())
			}
			var got []int64
			for _, r := range dev.Regions() {
				got = append(got, r.Size)
			}
			assert.Equal(t, tt.segs, got)
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
		dev := strategytest.NewDevice(8 * KiB)
		p, err := New(dev, c)
		require.NoError(t, err)
		a, err := p.Alloc(3 * KiB)
		require.NoError(t, err)
		b, err := p.Alloc(3 * KiB)
		require.NoError(t, err)
		require.NoError(t, p.Free(b))
		_, err = p.Alloc(6 * KiB)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.ErrorContains(t, err, "bestfit: alloc of 6144 bytes (6144 rounded): segment of 6144 bytes: ")
		require.NoError(t, p.check())
		assert.Equal(t, "U3K F1K", p.layout(), "the free segment was released")
		st := p.Stats()
		assert.Equal(t, int64(1), st.OOMs)
		assert.Equal(t, int64(1), st.Retries)
		// Still usable.
		require.NoError(t, p.Free(a))
		_, err = p.Alloc(4 * KiB)
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
	p, _, live := build(t, testConfig, "F2K U512 F1K U512 F1536 | U4K F3K")
	largest, total := p.FreeSpace()
	assert.Equal(t, int64(3*KiB), largest)
	assert.Equal(t, int64(2*KiB+KiB+1536+3*KiB), total)
	require.NoError(t, p.Free(live[2]))
	largest, total = p.FreeSpace()
	assert.Equal(t, int64(7*KiB), largest)
	assert.Equal(t, int64(2*KiB+KiB+1536+7*KiB), total)

	empty, err := New(strategytest.NewDevice(GiB), DefaultConfig())
	require.NoError(t, err)
	largest, total = empty.FreeSpace()
	assert.Zero(t, largest)
	assert.Zero(t, total)
}

// refusing is a device whose Free fails.
type refusing struct{ *strategytest.Device }

func (refusing) Free(uint64, int64) error { return errors.New("device busy") }

func TestReleaseAllDeviceError(t *testing.T) {
	p, err := New(refusing{strategytest.NewDevice(GiB)}, testConfig)
	require.NoError(t, err)
	a, err := p.Alloc(1)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	assert.EqualError(t, p.ReleaseAll(), "bestfit: release: device busy")
	require.NoError(t, p.check())
	assert.Equal(t, "F512", p.layout(), "the segment the device refused to free stays")
	b, err := p.Alloc(1)
	require.NoError(t, err)
	assert.Equal(t, a.Addr, b.Addr)
}
