package tlsf

import (
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
	GiB = 1 << 30
)

// check verifies every invariant of p: the heap's (see segment.Heap.Check),
// the index's against the free blocks, and FreeSpace against a brute-force
// computation.
func (p *Pool) check() error {
	free, err := p.h.Check()
	if err != nil {
		return err
	}
	if err := p.ix.check(p.h.Nodes, free); err != nil {
		return err
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

func (p *Pool) layout() string { return segmenttest.FormatLayout(p.h.Layout()) }

// testConfig is the configuration of the layout tests unless they say
// otherwise: the smallest chunk, so that a new segment is just the block,
// rounded up to the start of its list.
var testConfig = Config{Round: 512, MinBlock: 512, Chunk: 1}

func build(t *testing.T, c Config, layout string) (*Pool, *strategytest.Device, []gpualloc.Block) {
	t.Helper()
	dev := strategytest.NewDevice(GiB)
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

func TestFreeCoalesces(t *testing.T) {
	tests := []struct {
		name   string
		before string
		free   int
		after  string
	}{
		{"neither neighbour free", "U512 U512 U512", 1, "U512 F512 U512"},
		{"previous free", "F512 U1K U512", 0, "F1536 U512"},
		{"next free", "U512 U1K F512", 1, "U512 F1536"},
		{"both free", "F512 U1K F2K", 0, "F3584"},
		{"whole segment", "U1K", 0, "F1K"},
		{"segment end: no merge with the next segment", "U512 U512 | F1K U512", 1, "U512 F512 | F1K U512"},
		{"segment start: no merge with the previous segment", "U512 F512 | U512 U512", 1, "U512 F512 | F512 U512"},
		{"large", "F20M U1M F3M | U4M", 0, "F24M | U4M"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, dev, live := build(t, testConfig, tt.before)
			rs := dev.Regions()
			for i := 1; i < len(rs); i++ {
				require.Equal(t, rs[i-1].End(), rs[i].Addr, "segments %d and %d are adjacent", i-1, i)
			}
			require.NoError(t, p.Free(live[tt.free]))
			require.NoError(t, p.check())
			assert.Equal(t, tt.after, p.layout())
		})
	}
}

func TestAllocSplits(t *testing.T) {
	tests := []struct {
		name    string
		c       Config // testConfig if zero
		before  string
		size    int64
		seg     int
		offset  int64
		blkSize int64
		after   string
		grew    bool
	}{
		{name: "split", before: "F4K", size: 1000, blkSize: 1024, after: "U1K F3K"},
		{name: "exact fit", before: "F1K", size: 1024, blkSize: 1024, after: "U1K"},
		{name: "min block", before: "F1K", size: 1, blkSize: 512, after: "U512 F512"},
		{name: "the list of the size", before: "F2K U512 F1K", size: 1000, offset: 2560, blkSize: 1024, after: "F2K U512 U1K"},
		{name: "a larger list", before: "F2K U512 F8K", size: 4000, offset: 2560, blkSize: 4096, after: "F2K U512 U4K F4K"},
		{name: "the next first-level list", before: "F32K U512 F128K", size: 40 * KiB, offset: 33280, blkSize: 40 * KiB, after: "F32K U512 U40K F88K"},
		{name: "last freed first within a list", before: "F1K U512 F1K U512", size: 1024, offset: 1536, blkSize: 1024, after: "F1K U512 U1K U512"},
		{
			// 32.5K lies in the list [32K, 33K): a search for it starts at
			// the next list, so a free block of exactly 32.5K is not
			// found: good fit, not best fit. The new segment is rounded
			// up to 33K, the start of that next list.
			name: "good fit misses a fit in the list of the size", before: "F33280 U512", size: 33280,
			seg: 1, blkSize: 33280, after: "F33280 U512 | U33280 F512", grew: true,
		},
		{name: "a block in the next list", before: "F64K U512 F33K", size: 33280, offset: 66048, blkSize: 33280, after: "F64K U512 U33280 F512"},
		{
			name: "segment of at least chunk bytes", c: Config{Round: 512, MinBlock: 512, Chunk: 64 * KiB},
			before: "U512 F512", size: 1024, seg: 1, blkSize: 1024, after: "U512 F512 | U1K F63K", grew: true,
		},
		{
			name: "round 256, min block 512", c: Config{Round: 256, MinBlock: 512, Chunk: 1},
			before: "F1K", size: 700, blkSize: 768, after: "U768 F256",
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
			assert.Equal(t, segs[tt.seg].Addr+uint64(tt.offset), b.Addr, "offset %d", b.Addr-segs[tt.seg].Addr)
			assert.Equal(t, tt.blkSize, b.Size)
			grew := dev.Stats().Mallocs > mallocs
			assert.Equal(t, tt.grew, grew, "took a segment from the device")
		})
	}
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
	assert.Equal(t, []strategytest.Region{{Addr: b.Addr, Size: MiB + 32*KiB}}, dev.Regions())
	assert.Equal(t, "U1049088 F32256", p.layout())
	require.NoError(t, p.Free(b))
	b2, err := p.Alloc(size)
	require.NoError(t, err)
	assert.Equal(t, b.Addr, b2.Addr)
	assert.Equal(t, int64(1), dev.Stats().Mallocs)
	require.NoError(t, p.check())
}

func TestOutOfMemory(t *testing.T) {
	c := Config{Round: 512, MinBlock: 512, Chunk: 4 * KiB}
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
	assert.ErrorContains(t, err, "tlsf: alloc of 6144 bytes (6144 rounded): segment of 6144 bytes: ")
	require.NoError(t, p.check())
	assert.Equal(t, "U3K F1K", p.layout(), "the free segment was released")
	st := p.Stats()
	assert.Equal(t, int64(1), st.OOMs)
	assert.Equal(t, int64(1), st.Retries)
	assert.Equal(t, int64(1), st.DeviceFrees)
	_, err = p.Alloc(4 * KiB) // fits after the release
	require.NoError(t, err)
	require.NoError(t, p.Free(a))
	require.NoError(t, p.check())
	assert.Equal(t, "F4K | U4K", p.layout())
}

func TestFreeSpace(t *testing.T) {
	p, _, live := build(t, testConfig, "F2K U512 F1K U512 F1536 | U4K F3K")
	largest, total := p.FreeSpace()
	assert.Equal(t, int64(3*KiB), largest)
	assert.Equal(t, int64(2*KiB+KiB+1536+3*KiB), total)
	require.NoError(t, p.Free(live[2]))
	largest, total = p.FreeSpace()
	assert.Equal(t, int64(7*KiB), largest)
	assert.Equal(t, int64(2*KiB+KiB+1536+7*KiB), total)

	// Blocks of different sizes in the top list: the largest is found by
	// a scan of it.
	p, _, _ = build(t, testConfig, "F33280 U512 F32K U512")
	largest, _ = p.FreeSpace()
	assert.Equal(t, int64(33280), largest)
}

// check verifies the index against the free blocks: every list and bitmap
// bit consistent, every block in the list of its size, linked both ways,
// and exactly the blocks of free. It takes O(n) time, for tests.
func (ix *index) check(nodes []segment.Node, free []int32) error {
	want := make(map[int32]bool, len(free))
	for _, n := range free {
		want[n] = true
	}
	seen := 0
	for fl := range segment.FLCount {
		if (ix.flMap>>fl&1 != 0) != (ix.slMap[fl] != 0) {
			return fmt.Errorf("flMap bit %d is %d but slMap[%d] = %#x", fl, ix.flMap>>fl&1, fl, ix.slMap[fl])
		}
		for sl := range segment.SLCount {
			head := ix.heads[fl][sl]
			if (ix.slMap[fl]>>sl&1 != 0) != (head != 0) {
				return fmt.Errorf("slMap[%d] bit %d is %d but the list's head is %d", fl, sl, ix.slMap[fl]>>sl&1, head)
			}
			var prev int32
			for n := head; n != 0; n = nodes[n].Right {
				if !want[n] {
					return fmt.Errorf("list (%d, %d) holds block %d (%d bytes at %#x), which is not free or listed twice", fl, sl, n, nodes[n].Size, nodes[n].Addr)
				}
				delete(want, n)
				seen++
				if f, s := segment.Class(nodes[n].Size); f != fl || s != sl {
					return fmt.Errorf("list (%d, %d) holds a block of %d bytes, whose list is (%d, %d)", fl, sl, nodes[n].Size, f, s)
				}
				if k := nodes[n].Key; k != uint32(fl<<segment.SLBits|sl) {
					return fmt.Errorf("list (%d, %d): block %d has Key %#x", fl, sl, n, k)
				}
				if nodes[n].Left != prev {
					return fmt.Errorf("list (%d, %d): block %d has Left %d, want %d", fl, sl, n, nodes[n].Left, prev)
				}
				prev = n
			}
		}
	}
	if len(want) > 0 {
		for n := range want {
			return fmt.Errorf("free block %d (%d bytes at %#x) is in no list (%d of %d free blocks are)", n, nodes[n].Size, nodes[n].Addr, seen, len(free))
		}
	}
	return nil
}
