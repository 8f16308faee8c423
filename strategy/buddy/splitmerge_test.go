package buddy

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func TestBuddyOffset(t *testing.T) {
	tests := []struct{ off, size, want uint64 }{
		{0, 512, 512},
		{512, 512, 0},
		{1024, 512, 1536},
		{1536, 512, 1024},
		{0, 1024, 1024},
		{3072, 1024, 2048},
		{4096, 4096, 0},
		{6 << 30, 1 << 30, 7 << 30},
		{1 << 61, 1 << 61, 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, buddyOffset(tt.off, tt.size), "buddyOffset(%d, %d)", tt.off, tt.size)
	}
	// The buddy of a block is the other half of the block twice its size
	// that holds it, and the buddy's buddy is the block.
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		size := uint64(1) << r.IntN(40)
		off := r.Uint64N(1<<41/size) * size
		b := buddyOffset(off, size)
		require.NotEqual(t, off, b)
		require.Equal(t, off&^(2*size-1), b&^(2*size-1), "offset %d, size %d: buddy %d is in another block of %d bytes", off, size, b, 2*size)
		require.Equal(t, off, buddyOffset(b, size))
	}
}

// An operation of TestSplitMerge.
type op struct {
	alloc int64 // bytes to allocate, if not 0
	free  int   // else the index of the live block of the starting state to free
}

func TestSplitMerge(t *testing.T) {
	c := Config{MinBlock: 512, Arena: 8 * 512}
	tests := []struct {
		name     string
		capacity int64    // of the device; 1 MiB if 0
		before   []string // layouts (see build)
		op       op
		// Alloc: the block's arena slot and offset in MinBlocks, and the
		// device mallocs it makes.
		slot, off int
		mallocs   int64
		after     []string
		lists     string
	}{
		// Split.
		{
			name:   "split a whole arena down three orders",
			before: []string{"F8"}, op: op{alloc: 1},
			after: []string{"A1 F1 F2 F4"}, lists: "0:[0@1] 1:[0@2] 2:[0@4]",
		},
		{
			name:   "split the smallest order large enough",
			before: []string{"A1 F1 A2 F4", "F8"}, op: op{alloc: 1024}, off: 4,
			after: []string{"A1 F1 A2 A2 F2", "F8"}, lists: "0:[0@1] 1:[0@6] 3:[1@0]",
		},
		{
			name:   "exact fit, no split",
			before: []string{"A2 F2 A4"}, op: op{alloc: 1000}, off: 2,
			after: []string{"A2 A2 A4"}, lists: "",
		},
		{
			name:   "head of the list first",
			before: []string{"A4 F4", "F4 A4"}, op: op{alloc: 2048}, off: 4,
			after: []string{"A4 A4", "F4 A4"}, lists: "2:[1@0]",
		},
		{
			name:   "a request larger than the arena gets an arena of its own size",
			before: []string{"F8"}, op: op{alloc: 8*512 + 1}, slot: 1, mallocs: 1,
			after: []string{"F8", "A16"}, lists: "3:[0@0]",
		},
		{
			name:   "no free block large enough: a new arena, split",
			before: []string{"A4 A2 F2"}, op: op{alloc: 1025}, slot: 1, mallocs: 1,
			after: []string{"A4 A2 F2", "A4 F4"}, lists: "1:[0@6] 2:[1@4]",
		},
		{
			name:   "a free oversize arena serves a small request",
			before: []string{"A8", "F16"}, op: op{alloc: 1}, slot: 1,
			after: []string{"A8", "A1 F1 F2 F4 F8"}, lists: "0:[1@1] 1:[1@2] 2:[1@4] 3:[1@8]",
		},
		{
			name:   "split down ten orders",
			before: []string{"F1024"}, op: op{alloc: 512},
			after: []string{"A1 F1 F2 F4 F8 F16 F32 F64 F128 F256 F512"},
			lists: "0:[0@1] 1:[0@2] 2:[0@4] 3:[0@8] 4:[0@16] 5:[0@32] 6:[0@64] 7:[0@128] 8:[0@256] 9:[0@512]",
		},
		// Growth on a device short of memory: 6 KiB, arenas of 4 KiB.
		{
			name:     "the device refuses an arena: half of one",
			capacity: 12 * 512, before: []string{"A8"}, op: op{alloc: 1}, slot: 1, mallocs: 1,
			after: []string{"A8", "A1 F1 F2"}, lists: "0:[1@1] 1:[1@2]",
		},
		{
			name:     "the device refuses an arena: empty arenas returned, then half of one",
			capacity: 12 * 512, before: []string{"A8", "F2"}, op: op{alloc: 1025}, slot: 1, mallocs: 1,
			after: []string{"A8", "A4"}, lists: "",
		},
		{
			name:     "the device refuses an arena and half of one: a quarter",
			capacity: 10 * 512, before: []string{"A8"}, op: op{alloc: 1}, slot: 1, mallocs: 1,
			after: []string{"A8", "A1 F1"}, lists: "0:[1@1]",
		},
		{
			name:     "an arena of exactly the block",
			capacity: 9 * 512, before: []string{"A8"}, op: op{alloc: 1}, slot: 1, mallocs: 1,
			after: []string{"A8", "A1"}, lists: "",
		},
		// Merge.
		{
			name:   "merge cascades up to the whole arena",
			before: []string{"A1 F1 F2 F4"}, op: op{free: 0},
			after: []string{"F8"}, lists: "3:[0@0]",
		},
		{
			name:   "merge cascades up from a right half",
			before: []string{"F4 F2 A1 F1"}, op: op{free: 0},
			after: []string{"F8"}, lists: "3:[0@0]",
		},
		{
			name:   "merge cascades ten orders",
			before: []string{"F1 A1 F2 F4 F8 F16 F32 F64 F128 F256 F512"}, op: op{free: 0},
			after: []string{"F1024"}, lists: "10:[0@0]",
		},
		{
			name:   "merge stops at a partly allocated buddy",
			before: []string{"F1 A1 A1 F1 F4"}, op: op{free: 0},
			after: []string{"F2 A1 F1 F4"}, lists: "0:[0@3] 1:[0@0] 2:[0@4]",
		},
		{
			name:   "no merge with a live buddy",
			before: []string{"A1 A1 F2 F4"}, op: op{free: 1},
			after: []string{"A1 F1 F2 F4"}, lists: "0:[0@1] 1:[0@2] 2:[0@4]",
		},
		{
			name:   "free neighbours that are not buddies stay apart",
			before: []string{"A1 F1 A2 F2 A2"}, op: op{free: 1},
			after: []string{"A1 F1 F2 F2 A2"}, lists: "0:[0@1] 1:[0@2 0@4]",
		},
		{
			name:   "merges stay inside an arena",
			before: []string{"A4 F4", "F4 A4"}, op: op{free: 0},
			after: []string{"F8", "F4 A4"}, lists: "2:[1@0] 3:[0@0]",
		},
		{
			name:   "an oversize arena merges back to one block",
			before: []string{"A8 F8"}, op: op{free: 0},
			after: []string{"F16"}, lists: "4:[0@0]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capacity := tt.capacity
			if capacity == 0 {
				capacity = 1 << 20
			}
			p, dev, live := build(t, c, capacity, tt.before...)
			_, err := check(p)
			require.NoError(t, err, "the starting state")
			mallocs := dev.Stats().Mallocs
			if tt.op.alloc != 0 {
				b, err := p.Alloc(tt.op.alloc)
				require.NoError(t, err)
				assert.Equal(t, c.RoundSize(tt.op.alloc), b.Size)
				assert.Equal(t, p.arenas[tt.slot].base+uint64(tt.off)*512, b.Addr, "the block's address")
				assert.Equal(t, tt.mallocs, dev.Stats().Mallocs-mallocs, "device mallocs")
			} else {
				require.NoError(t, p.Free(live[tt.op.free]))
			}
			got := describe(p)
			assert.Equal(t, tt.after, got.Arenas, "arenas")
			assert.Equal(t, tt.lists, got.Lists, "free lists")
			_, err = check(p)
			assert.NoError(t, err)
		})
	}
}

func TestReleaseAllEmptyArenasOnly(t *testing.T) {
	c := Config{MinBlock: 512, Arena: 8 * 512}
	p, dev, live := build(t, c, 1<<20, "F8", "A1 F1 F2 F4", "F16")
	require.NoError(t, p.ReleaseAll())
	got := describe(p)
	assert.Equal(t, []string{"-", "A1 F1 F2 F4", "-"}, got.Arenas)
	assert.Equal(t, "0:[1@1] 1:[1@2] 2:[1@4]", got.Lists)
	assert.Equal(t, int64(2), dev.Stats().Frees)
	assert.Equal(t, int64(4096), dev.Stats().Used)
	assert.Equal(t, int64(4096), p.Stats().Reserved)
	_, err := check(p)
	require.NoError(t, err)

	// The freed slots are used again.
	b, err := p.Alloc(4096)
	require.NoError(t, err)
	assert.Equal(t, []string{"-", "A1 F1 F2 F4", "A8"}, describe(p).Arenas)
	require.NoError(t, p.Free(b))
	require.NoError(t, p.Free(live[0]))
	require.NoError(t, p.ReleaseAll())
	assert.Equal(t, []string{"-", "-", "-"}, describe(p).Arenas)
	assert.Zero(t, dev.Stats().Used)
	_, err = check(p)
	require.NoError(t, err)
}

// An arena's base is aligned to no more than the device gives, 512 bytes
// here, so buddies are found by offsets from the base, not by addresses.
func TestArenaBaseNotAligned(t *testing.T) {
	dev := strategytest.NewDevice(1 << 20)
	pad, err := dev.Malloc(512)
	require.NoError(t, err)
	p, err := New(dev, Config{MinBlock: 512, Arena: 8 * 512})
	require.NoError(t, err)

	var blocks []gpualloc.Block
	for range 8 {
		b, err := p.Alloc(512)
		require.NoError(t, err)
		blocks = append(blocks, b)
	}
	base := p.arenas[0].base
	require.Equal(t, pad+512, base)
	require.NotZero(t, base%4096, "the arena's base is not aligned to its size")
	var offs []uint64
	for _, b := range blocks {
		offs = append(offs, b.Addr-base)
	}
	slices.Sort(offs)
	assert.Equal(t, []uint64{0, 512, 1024, 1536, 2048, 2560, 3072, 3584}, offs)
	// The address of the first block XOR its size is not its buddy's.
	first := blocks[slices.IndexFunc(blocks, func(b gpualloc.Block) bool { return b.Addr == base })]
	assert.NotEqual(t, base+512, first.Addr^512)

	// Freed in a scrambled order, the blocks merge back into one.
	for _, i := range []int{5, 0, 3, 6, 1, 7, 2, 4} {
		require.NoError(t, p.Free(blocks[i]))
		_, err := check(p)
		require.NoError(t, err)
	}
	assert.Equal(t, state{Arenas: []string{"F8"}, Lists: "3:[0@0]"}, describe(p))

	// A second arena right after the first: adjacent free blocks of two
	// arenas are never merged.
	a, err := p.Alloc(4096)
	require.NoError(t, err)
	b, err := p.Alloc(4096)
	require.NoError(t, err)
	require.Equal(t, a.End(), b.Addr)
	require.NoError(t, p.Free(a))
	require.NoError(t, p.Free(b))
	assert.Equal(t, state{Arenas: []string{"F8", "F8"}, Lists: "3:[1@0 0@0]"}, describe(p))
	_, err = check(p)
	require.NoError(t, err)
}

func TestOversizeArena(t *testing.T) {
	const MiB = 1 << 20
	dev := strategytest.NewDevice(64 * MiB)
	p, err := New(dev, Config{MinBlock: 512, Arena: MiB})
	require.NoError(t, err)
	small, err := p.Alloc(1)
	require.NoError(t, err)

	big, err := p.Alloc(3 * MiB)
	require.NoError(t, err)
	assert.Equal(t, int64(4*MiB), big.Size)
	assert.Equal(t, []virtual.Region{{Addr: small.Addr, Size: MiB}, {Addr: big.Addr, Size: 4 * MiB}}, dev.Regions(),
		"an arena of the block's own size")
	require.NoError(t, p.Free(big))
	largest, total := p.FreeSpace()
	assert.Equal(t, int64(4*MiB), largest)
	assert.Equal(t, int64(5*MiB-512), total)

	// The free arena serves a request of its size again.
	again, err := p.Alloc(4 * MiB)
	require.NoError(t, err)
	assert.Equal(t, big.Addr, again.Addr)
	assert.Equal(t, int64(2), dev.Stats().Mallocs)
	require.NoError(t, p.Free(again))

	// Larger still: a third arena.
	huge, err := p.Alloc(4*MiB + 1)
	require.NoError(t, err)
	assert.Equal(t, int64(8*MiB), huge.Size)
	assert.Equal(t, int64(3), dev.Stats().Mallocs)
	require.NoError(t, p.Free(huge))

	assert.Equal(t, []string{"A1 F1 F2 F4 F8 F16 F32 F64 F128 F256 F512 F1024", "F8192", "F16384"}, describe(p).Arenas)
	require.NoError(t, p.ReleaseAll())
	assert.Equal(t, []virtual.Region{{Addr: small.Addr, Size: MiB}}, dev.Regions())
	require.NoError(t, p.Free(small))
	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used)
	_, err = check(p)
	require.NoError(t, err)
}
