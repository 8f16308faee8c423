package tlsf

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// kit holds the tests tlsf shares with the other strategies built on
// package segment.
var kit = segmenttest.Kit[Config, *Pool]{
	New:      New,
	Front:    func(p *Pool) *segment.Front { return &p.front },
	Config:   testConfig,
	WantSize: func(c Config) func(int64) int64 { return c.RoundSize }, // every rest is split off
}

// check verifies every invariant of p: see segmenttest.Kit.Check.
func (p *Pool) check() error { return kit.Check(p) }

func (p *Pool) layout() string { return kit.Layout(p) }

// testConfig is the configuration of the layout tests unless they say
// otherwise: the smallest chunk, so that a new segment is just the block,
// rounded up to the start of its list.
var testConfig = Config{Round: 512, MinBlock: 512, Chunk: 1}

// TestFreeCoalesces frees a block of a given layout and checks the layout
// after: merged with free neighbours in its segment, never across segments.
func TestFreeCoalesces(t *testing.T) { kit.FreeCoalesces(t) }

func TestAllocSplits(t *testing.T) {
	kit.AllocSplits(t, []segmenttest.AllocCase[Config]{
		{Name: "split", Before: "F4K", Size: 1000, BlkSize: 1024, After: "U1K F3K"},
		{Name: "exact fit", Before: "F1K", Size: 1024, BlkSize: 1024, After: "U1K"},
		{Name: "min block", Before: "F1K", Size: 1, BlkSize: 512, After: "U512 F512"},
		{Name: "the list of the size", Before: "F2K U512 F1K", Size: 1000, Offset: 2560, BlkSize: 1024, After: "F2K U512 U1K"},
		{Name: "a larger list", Before: "F2K U512 F8K", Size: 4000, Offset: 2560, BlkSize: 4096, After: "F2K U512 U4K F4K"},
		{Name: "the next first-level list", Before: "F32K U512 F128K", Size: 40 * KiB, Offset: 33280, BlkSize: 40 * KiB, After: "F32K U512 U40K F88K"},
		{Name: "last freed first within a list", Before: "F1K U512 F1K U512", Size: 1024, Offset: 1536, BlkSize: 1024, After: "F1K U512 U1K U512"},
		{
			// 32.5K lies in the list [32K, 33K): a search for it starts at
			// the next list, so a free block of exactly 32.5K is not
			// found: good fit, not best fit. The new segment is rounded
			// up to 33K, the start of that next list.
			Name: "good fit misses a fit in the list of the size", Before: "F33280 U512", Size: 33280,
			Seg: 1, BlkSize: 33280, After: "F33280 U512 | U33280 F512", Grew: true,
		},
		{Name: "a block in the next list", Before: "F64K U512 F33K", Size: 33280, Offset: 66048, BlkSize: 33280, After: "F64K U512 U33280 F512"},
		{
			Name: "segment of at least chunk bytes", Config: Config{Round: 512, MinBlock: 512, Chunk: 64 * KiB},
			Before: "U512 F512", Size: 1024, Seg: 1, BlkSize: 1024, After: "U512 F512 | U1K F63K", Grew: true,
		},
		{
			Name: "round 256, min block 512", Config: Config{Round: 256, MinBlock: 512, Chunk: 1},
			Before: "F1K", Size: 700, BlkSize: 768, After: "U768 F256",
		},
	})
}

// TestLargeRequestReuse checks that a request larger than a chunk gets a
// segment rounded up to the start of its list, so that once freed the
// segment serves the same request again without a device call.
func TestLargeRequestReuse(t *testing.T) {
	dev := strategytest.NewDevice(GiB)
	p, err := New(dev, Config{Round: 512, MinBlock: 512, Chunk: MiB})
	require.NoError(t, err)
	size := int64(MiB + 512)
	b, err := p.Alloc(size)
	require.NoError(t, err)
	assert.Equal(t, []virtual.Region{{Addr: b.Addr, Size: MiB + 32*KiB}}, dev.Regions())
	assert.Equal(t, "U1049088 F32256", p.layout())
	require.NoError(t, p.Free(b))
	b2, err := p.Alloc(size)
	require.NoError(t, err)
	assert.Equal(t, b.Addr, b2.Addr)
	assert.Equal(t, int64(1), dev.Stats().Mallocs)
	require.NoError(t, p.check())
}

func TestOutOfMemory(t *testing.T) {
	p, a := kit.OutOfMemory(t, Config{Round: 512, MinBlock: 512, Chunk: 4 * KiB}, "tlsf: alloc of 6144 bytes (6144 rounded): segment of 6144 bytes: ")
	_, err := p.Alloc(4 * KiB) // fits after the release
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	require.NoError(t, p.check())
	assert.Equal(t, "F4K | U4K", p.layout())
}

func TestFreeSpace(t *testing.T) {
	kit.FreeSpace(t)
	// Blocks of different sizes in the top list: the largest is found by
	// a scan of it.
	p, _, _ := kit.Build(t, testConfig, "F33280 U512 F32K U512")
	largest, _ := p.FreeSpace()
	assert.Equal(t, int64(33280), largest)
}
