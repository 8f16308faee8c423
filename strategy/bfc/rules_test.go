package bfc

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// Each test of this file checks one rule of TensorFlow's
// bfc_allocator.cc/.h, named in its comment, against cases worked out from
// the source.

// testConfig is the configuration of the layout tests unless they say
// otherwise: growth from 2 MiB, garbage collection, the 128 MiB bound.
var testConfig = DefaultConfig()

// RoundedBytes: kMinAllocationSize * ((bytes + kMinAllocationSize - 1) /
// kMinAllocationSize).
func TestRoundedBytes(t *testing.T) {
	for _, tt := range []struct{ size, want int64 }{
		{1, 256}, {255, 256}, {256, 256}, {257, 512}, {1000, 1024}, {4097, 4352},
		{100000, 100096}, {2 * MiB, 2 * MiB}, {2*MiB + 1, 2*MiB + 256},
		{0, 0}, {-1, 0}, {math.MaxInt64 - 255, math.MaxInt64 - 255}, {math.MaxInt64 - 254, 0},
	} {
		assert.Equal(t, tt.want, RoundedBytes(tt.size), "RoundedBytes(%d)", tt.size)
	}
}

// BinNumForSize: min(kNumBins - 1, Log2FloorNonZero(max(bytes, 256) >>
// kMinAllocationBits)), and the checks of the BFCAllocator constructor:
// BinForSize(bin_size), BinForSize(bin_size + 255) and BinForSize(bin_size
// * 2 - 1) are bin b, and BinForSize(bin_size * 2) is not, for bin_size =
// 256 << b (BinNumToSize).
func TestBinNumForSize(t *testing.T) {
	for _, tt := range []struct {
		size int64
		want int
	}{
		{1, 0}, {256, 0}, {511, 0}, {512, 1}, {768, 1}, {1023, 1}, {1024, 2},
		{2 * MiB, 13}, {256*MiB - 256, 19}, {256 * MiB, 20}, {GiB, 20}, {80 * GiB, 20}, {math.MaxInt64, 20},
	} {
		assert.Equal(t, tt.want, BinNumForSize(tt.size), "BinNumForSize(%d)", tt.size)
	}
	for b := range NumBins {
		size := int64(256) << b
		assert.Equal(t, b, BinNumForSize(size))
		assert.Equal(t, b, BinNumForSize(size+255))
		assert.Equal(t, b, BinNumForSize(size*2-1))
		if b+1 < NumBins {
			assert.NotEqual(t, b, BinNumForSize(size*2))
		}
	}
}

// FindChunkPtr: from the request's bin upward, each bin's free_chunks in
// (size, address) order (Bin::ChunkComparator), the first chunk of at
// least rounded_bytes; then SplitChunk if chunk->size >= rounded_bytes * 2
// or chunk->size - rounded_bytes >= max_internal_fragmentation_bytes, the
// chunk keeping the front.
func TestAllocFindsAndSplits(t *testing.T) {
	for _, tt := range []struct {
		name    string
		c       Config // testConfig if zero
		before  string
		size    int64
		region  int   // of the chunk handed out
		offset  int64 // of the chunk in its region
		blkSize int64
		after   string
	}{
		{name: "rounded to 256, split: the chunk is twice the request", before: "F4K", size: 1000, blkSize: 1024, after: "U1K F3K"},
		{name: "exactly twice: split", before: "F2K", size: 1024, blkSize: 1024, after: "U1K F1K"},
		{name: "less than twice: the whole chunk", before: "F2K", size: 1025, blkSize: 2048, after: "U2K"},
		{name: "768 is at least twice 256: split", before: "F768", size: 1, blkSize: 256, after: "U256 F512"},
		{name: "512 bytes in 768: no split, 256 wasted", before: "F768", size: 300, blkSize: 768, after: "U768"},
		{name: "256 bytes in 512: split", before: "F512", size: 1, blkSize: 256, after: "U256 F256"},
		{name: "exact fit", before: "F1536", size: 1536, blkSize: 1536, after: "U1536"},
		{
			name: "best fit within the bin, not first fit", before: "F1792 U256 F1280 U256 F1536", size: 1200,
			offset: 1792 + 256, blkSize: 1280, after: "F1792 U256 U1280 U256 F1536",
		},
		{
			name: "a smaller chunk of the request's bin that does not fit is skipped", before: "F1K U256 F1536", size: 1100,
			offset: 1280, blkSize: 1536, after: "F1K U256 U1536",
		},
		{
			name: "up the bins: the smallest chunk of the next non-empty bin", before: "F64K U256 F8K U256 F1K", size: 1100,
			offset: 64*KiB + 256, blkSize: 1280, after: "F64K U256 U1280 F6912 U256 F1K",
		},
		{
			name: "ties go to the lowest address", before: "F1K U256 F1K U256 F1K", size: 1024,
			blkSize: 1024, after: "U1K U256 F1K U256 F1K",
		},
		{
			name: "lowest address across regions", before: "U512 F1K | F1K U512", size: 1000,
			offset: 512, blkSize: 1024, after: "U512 U1K | F1K U512",
		},
		{
			name: "best fit across regions", before: "F4K U512 | F1K U512", size: 1000,
			region: 1, blkSize: 1024, after: "F4K U512 | U1K U512",
		},
		{
			// 200 MiB of 300 MiB: less than twice, but the rest of
			// 100 MiB is under 128 MiB: the whole chunk.
			name: "rest under 128 MiB: the whole chunk", before: "F300M", size: 200 * MiB,
			blkSize: 300 * MiB, after: "U300M",
		},
		{
			// 300 MiB of 430 MiB: less than twice, rest 130 MiB.
			name: "rest of 128 MiB or more: split", before: "F430M", size: 300 * MiB,
			blkSize: 300 * MiB, after: "U300M F130M",
		},
		{
			name: "rest of exactly 128 MiB: split", before: "F428M", size: 300 * MiB,
			blkSize: 300 * MiB, after: "U300M F128M",
		},
		{
			// fragmentation_fraction 0.0009 of the 1 GiB test device:
			// a bound of 966367 bytes; the rest is 1 MiB.
			name: "fragmentation_fraction sets the bound", c: Config{AllowGrowth: true, MemoryFraction: 1, FragmentationFraction: 0.0009},
			before: "F3M", size: 2 * MiB, blkSize: 2 * MiB, after: "U2M F1M",
		},
		{
			// The rest is 948480 bytes.
			name: "fragmentation_fraction: a rest under the bound", c: Config{AllowGrowth: true, MemoryFraction: 1, FragmentationFraction: 0.0009},
			before: "F3M", size: 2*MiB + 100000, blkSize: 3 * MiB, after: "U3M",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			if c == (Config{}) {
				c = testConfig
			}
			dev := strategytest.NewDevice(GiB)
			p, live := build(t, c, dev, tt.before)
			b, err := p.Alloc(tt.size)
			require.NoError(t, err)
			require.NoError(t, p.check())
			assert.Equal(t, tt.after, p.layout())
			assert.Equal(t, p.regs[tt.region].addr+uint64(tt.offset), b.Addr)
			assert.Equal(t, tt.blkSize, b.Size)
			assert.Equal(t, tt.size, b.Requested)
			assert.Equal(t, int64(len(live)+1), p.Stats().CacheHits, "served without a device call")
			assert.Equal(t, int64(len(p.regs)), dev.Stats().Mallocs)
		})
	}
}

// TryToCoalesce: a freed chunk merges with the next chunk and the previous
// one if they are free, within its region only (without a sub-allocator
// that supports coalescing, regions never merge: see the package
// documentation).
func TestFreeCoalesces(t *testing.T) {
	for _, tt := range segmenttest.CoalesceCases {
		t.Run(tt.Name, func(t *testing.T) {
			dev := strategytest.NewDevice(GiB)
			p, live := build(t, testConfig, dev, tt.Before)
			rs := dev.Regions()
			for i := 1; i < len(rs); i++ {
				require.Equal(t, rs[i-1].End(), rs[i].Addr, "regions %d and %d are adjacent in memory", i-1, i)
			}
			require.NoError(t, p.Free(live[tt.Free]))
			require.NoError(t, p.check())
			assert.Equal(t, tt.After, p.layout())
			assert.Zero(t, dev.Stats().Frees, "no device call")
		})
	}
}

// The BFCAllocator constructor and Extend: with allow_growth the region
// size starts at RoundedBytes(min(memory_limit, 2 MiB)); while the request
// is larger it doubles; the region is min(that, the bytes left under the
// limit rounded down to 256); after a region for which it did not have to
// double, it doubles for the next. Without allow_growth it starts at the
// whole limit.
func TestExtend(t *testing.T) {
	for _, tt := range []struct {
		name  string
		c     Config
		dev   int64   // device capacity
		sizes []int64 // allocated in turn, none freed
		segs  []int64 // device mallocs, in order
		curr  int64   // the next region size after
	}{
		{
			name: "growth from 2 MiB, doubling", c: testConfig, dev: GiB,
			sizes: []int64{1, 2 * MiB, 3 * MiB, 5 * MiB},
			segs:  []int64{2 * MiB, 4 * MiB, 8 * MiB},
			curr:  16 * MiB,
		},
		{
			// 20 MiB raises 2 MiB to 32 MiB, which is not doubled
			// after; the next region is 32 MiB, then 64 MiB.
			name: "a large request raises the size, which is then not doubled", c: testConfig, dev: GiB,
			sizes: []int64{20 * MiB, 20 * MiB, 20 * MiB, 20 * MiB},
			segs:  []int64{32 * MiB, 32 * MiB, 64 * MiB},
			curr:  128 * MiB,
		},
		{
			name: "the last region is what the limit leaves", c: Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 7 * MiB}, dev: GiB,
			sizes: []int64{2 * MiB, 3 * MiB, 1},
			segs:  []int64{2 * MiB, 4 * MiB, 1 * MiB},
			curr:  16 * MiB,
		},
		{
			name: "the limit left is rounded down to 256", c: Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 2*MiB + 1000}, dev: GiB,
			sizes: []int64{2 * MiB, 1},
			segs:  []int64{2 * MiB, 768},
			curr:  8 * MiB,
		},
		{
			name: "a limit under 2 MiB is the first region, rounded up", c: Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 1000}, dev: GiB,
			sizes: []int64{1},
			segs:  []int64{768}, // RoundedBytes(1000) = 1024, limit left rounded down = 768
			curr:  2048,
		},
		{
			name: "without growth: one region of the limit", c: Config{MemoryFraction: 0.75, GarbageCollection: true}, dev: 64 * MiB,
			sizes: []int64{1, 40 * MiB},
			segs:  []int64{48 * MiB},
			curr:  96 * MiB,
		},
		{
			name: "without growth, the fraction of a device not a multiple of 256", c: Config{MemoryFraction: 0.5}, dev: 10001,
			sizes: []int64{1},
			segs:  []int64{4864}, // 5000 rounded down to 256
			curr:  10240,         // RoundedBytes(5000) doubled
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dev := strategytest.NewDevice(tt.dev)
			p, err := New(dev, tt.c)
			require.NoError(t, err)
			assert.Equal(t, tt.segs, segmenttest.Grow(t, p, dev, p.check, tt.sizes))
			assert.Equal(t, tt.curr, p.curr)
		})
	}
}

// Extend: a request larger than the bytes left under the limit fails
// without asking the device.
func TestExtendOverLimit(t *testing.T) {
	dev := &recorder{Device: strategytest.NewDevice(GiB)}
	p, err := New(dev, Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 4 * MiB})
	require.NoError(t, err)
	_, err = p.Alloc(3 * MiB) // a region of 4 MiB: the doubled 2 MiB
	require.NoError(t, err)
	_, err = p.Alloc(2 * MiB) // 1 MiB free in the region, nothing under the limit
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "bfc: alloc of 2097152 bytes (2097152 rounded): 4194304 of the memory limit's 4194304 bytes held, no region can be added: out of memory")
	assert.Equal(t, []int64{4 * MiB}, dev.asked)
	assert.Equal(t, int64(1), p.Stats().OOMs)
	require.NoError(t, p.check())
}

// Extend's back-off: when the device refuses a region, bytes =
// RoundedBytes(bytes * kBackpedalFactor), a float multiplication, while
// that is at least the request; after a success the next region size
// doubles as usual.
func TestBackpedal(t *testing.T) {
	t.Run("down to what the device has", func(t *testing.T) {
		dev := &recorder{Device: strategytest.NewDevice(3 * MiB)}
		p, err := New(dev, Config{MemoryFraction: 1}) // one region of 3 MiB...
		require.NoError(t, err)
		p.limit = 5 * MiB // ...under a limit the device cannot meet
		p.curr = 5 * MiB
		_, err = p.Alloc(1)
		require.NoError(t, err)
		// 5 MiB, then 90% of the previous in float, rounded up to
		// 256, until it fits in the 3 MiB of the device.
		assert.Equal(t, []int64{5242880, 4718592, 4246784, 3822336, 3440128, 3096320}, dev.asked)
		assert.Equal(t, "U256 F3096064", p.layout())
		assert.Equal(t, int64(10*MiB), p.curr, "doubled after the region")
		assert.Equal(t, int64(1), p.Stats().DeviceMallocs)
		require.NoError(t, p.check())
	})
	t.Run("not below the request", func(t *testing.T) {
		dev := &recorder{Device: strategytest.NewDevice(GiB)}
		p, err := New(dev, Config{AllowGrowth: true, MemoryFraction: 1})
		require.NoError(t, err)
		dev.FailMallocs(100)
		_, err = p.Alloc(MiB + 1)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.Equal(t, []int64{2097152, 1887488, 1698816, 1529088, 1376256, 1238784, 1115136}, dev.asked)
		assert.Equal(t, int64(2*MiB), p.curr, "not doubled after a failure")
		require.NoError(t, p.check())
	})
	t.Run("in single precision", func(t *testing.T) {
		// From 80 GiB: 72 GiB, then single precision parts from double.
		seq := []int64{80 * GiB}
		for len(seq) < 6 {
			seq = append(seq, backpedal(seq[len(seq)-1]))
		}
		assert.Equal(t, []int64{85899345920, 77309411328, 69578465280, 62620618752, 56358555648, 50722697216}, seq)
		assert.NotEqual(t, RoundedBytes(int64(float64(seq[1])*0.9)), seq[2], "in double: 69578470400")
	})
	t.Run("a fixed point below 2560 bytes ends the back-off", func(t *testing.T) {
		var seq []int64
		for b := int64(4096); ; {
			seq = append(seq, b)
			less := backpedal(b)
			if less == b {
				break
			}
			b = less
		}
		assert.Equal(t, []int64{4096, 3840, 3584, 3328, 3072, 2816, 2560, 2304}, seq)
		dev := &recorder{Device: strategytest.NewDevice(GiB)}
		p, err := New(dev, Config{MemoryFraction: 1, MemoryLimit: 4096})
		require.NoError(t, err)
		dev.FailMallocs(1000)
		_, err = p.Alloc(1)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.Equal(t, seq, dev.asked)
	})
}

// AllocateRawInternal and DeallocateFreeRegions: when Extend fails and
// garbage collection is on, the regions that hold no chunk in use go back
// to the device, if the request fits in memory_limit -
// total_region_allocated_bytes + their bytes, and Extend is tried again.
func TestGarbageCollection(t *testing.T) {
	t.Run("free regions go back and a larger one comes", func(t *testing.T) {
		dev := &recorder{Device: strategytest.NewDevice(GiB)}
		p, _ := build(t, Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 8 * MiB, GarbageCollection: true}, dev, "F2M | U2M | F2M")
		dev.asked = nil
		b, err := p.Alloc(3 * MiB) // 2 MiB left under the limit: GC frees 4 MiB
		require.NoError(t, err)
		require.NoError(t, p.check())
		assert.Equal(t, "U2M | U4M", p.layout())
		assert.Equal(t, int64(3*MiB+MiB), b.Size, "4 MiB is less than twice 3 MiB: the whole region")
		assert.Equal(t, []int64{4 * MiB}, dev.asked, "the region doubled from 2 MiB for the request")
		st := p.Stats()
		assert.Equal(t, int64(2), st.DeviceFrees)
		assert.Equal(t, int64(1), st.Retries)
		assert.Zero(t, st.OOMs)
	})
	t.Run("off: out of memory", func(t *testing.T) {
		dev := strategytest.NewDevice(GiB)
		p, _ := build(t, Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 8 * MiB}, dev, "F2M | U2M | F2M")
		_, err := p.Alloc(3 * MiB)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.Equal(t, "F2M | U2M | F2M", p.layout())
		assert.Zero(t, p.Stats().DeviceFrees)
		require.NoError(t, p.check())
	})
	t.Run("the estimate says it cannot help: nothing freed", func(t *testing.T) {
		dev := strategytest.NewDevice(GiB)
		p, _ := build(t, Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 8 * MiB, GarbageCollection: true}, dev, "F2M | U2M | U2M")
		_, err := p.Alloc(5 * MiB) // 2 MiB left + 2 MiB free < 5 MiB
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.Equal(t, "F2M | U2M | U2M", p.layout())
		assert.Zero(t, p.Stats().DeviceFrees)
		require.NoError(t, p.check())
	})
	t.Run("freed, yet Extend fails: out of memory, the regions stay freed", func(t *testing.T) {
		dev := strategytest.NewDevice(7 * MiB)
		p, _ := build(t, Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 8 * MiB, GarbageCollection: true}, dev, "F2M | U2M | F2M")
		// The device has 1 MiB beyond the regions; after GC, 5 MiB:
		// the region of 4 MiB fits.
		_, err := p.Alloc(3 * MiB)
		require.NoError(t, err)
		assert.Equal(t, "U2M | U4M", p.layout())
		require.NoError(t, p.check())

		dev2 := strategytest.NewDevice(6 * MiB)
		q, _ := build(t, Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 8 * MiB, GarbageCollection: true}, dev2, "F2M | U2M | F2M")
		dev2.FailMallocs(1000)
		_, err = q.Alloc(3 * MiB)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
		assert.Equal(t, "U2M", q.layout())
		assert.Equal(t, int64(2), q.Stats().DeviceFrees)
		require.NoError(t, q.check())
	})
	t.Run("a partly used region stays", func(t *testing.T) {
		dev := strategytest.NewDevice(GiB)
		p, _ := build(t, Config{AllowGrowth: true, MemoryFraction: 1, MemoryLimit: 8 * MiB, GarbageCollection: true}, dev, "F1M U1M | F2M | F2M")
		_, err := p.Alloc(3 * MiB)
		require.NoError(t, err)
		assert.Equal(t, "F1M U1M | U4M", p.layout(), "a region of 4 MiB, the doubled 2 MiB, less than twice the request")
		require.NoError(t, p.check())
	})
}

// The next region size is not changed by garbage collection, and a request
// served from a free chunk asks the device nothing.
func TestCacheHitNoDeviceCall(t *testing.T) {
	dev := &recorder{Device: strategytest.NewDevice(GiB)}
	p, err := New(dev, testConfig)
	require.NoError(t, err)
	a, err := p.Alloc(MiB)
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	b, err := p.Alloc(MiB)
	require.NoError(t, err)
	assert.Equal(t, a.Addr, b.Addr)
	assert.Equal(t, []int64{2 * MiB}, dev.asked)
	assert.Equal(t, int64(1), p.Stats().CacheHits)
}
