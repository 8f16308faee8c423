package segmenttest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// A Kit holds the tests that every strategy built on package segment runs
// from inside its package, where the pool's heap and index can be seen:
// before/after tables of layouts, random operations and fuzzing with every
// invariant checked, and the choice of free block against a brute-force
// rule. The strategy supplies its constructor, how to reach the
// [segment.Front] it embeds, and its own tables and rules.
type Kit[C comparable, P Pool] struct {
	New   func(gpualloc.Backend, C) (P, error)
	Front func(P) *segment.Front

	// Config is the configuration of the layout tests unless a case gives
	// its own.
	Config C

	// WantSize, if not nil, returns for a configuration the Size of the
	// block every request must get, or nil where Size may be larger.
	WantSize func(C) func(int64) int64
}

// Check verifies every invariant of p: its heap's ([segment.Heap.Check]),
// its index's, and FreeSpace against a brute-force computation.
func (k Kit[C, P]) Check(p P) error {
	pool := segment.PoolOf(k.Front(p))
	h := &pool.Heap
	free, err := h.Check()
	if err != nil {
		return err
	}
	if err := pool.CheckIndex(free); err != nil {
		return err
	}
	largest, total := p.FreeSpace()
	var wl, wt int64 // by brute force
	for _, n := range free {
		wl = max(wl, h.Nodes[n].Size)
		wt += h.Nodes[n].Size
	}
	if largest != wl || total != wt {
		return fmt.Errorf("FreeSpace() = %d, %d; brute force says %d, %d", largest, total, wl, wt)
	}
	return nil
}

// heap returns p's heap.
func (k Kit[C, P]) heap(p P) *segment.Heap { return &segment.PoolOf(k.Front(p)).Heap }

// Layout returns p's segments in the notation of [ParseLayout].
func (k Kit[C, P]) Layout(p P) string { return FormatLayout(k.heap(p).Layout()) }

// Build returns a pool of configuration c in the state layout describes,
// on a device of 1 GiB, and its live blocks in layout order.
func (k Kit[C, P]) Build(t *testing.T, c C, layout string) (P, *virtual.Device, []gpualloc.Block) {
	t.Helper()
	dev := strategytest.NewDevice(1 << 30)
	p, err := k.New(dev, c)
	require.NoError(t, err)
	segs, err := ParseLayout(layout)
	require.NoError(t, err)
	live, err := k.heap(p).Build(segs)
	require.NoError(t, err)
	require.NoError(t, k.Check(p))
	require.Equal(t, layout, k.Layout(p), "the layout built")
	return p, dev, live
}

// A FreeCase is a layout, the live block to free in it, and the layout
// after.
type FreeCase struct {
	Name   string
	Before string
	Free   int // index of the live block to free
	After  string
}

// CoalesceCases are the cases of [Kit.FreeCoalesces]: a freed block merges
// with its free neighbours in its segment, never across segments.
var CoalesceCases = []FreeCase{
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

// FreeCoalesces frees a block of each layout of [CoalesceCases], in a pool
// of the kit's Config, and checks the layout after and that the device saw
// no call.
func (k Kit[C, P]) FreeCoalesces(t *testing.T) {
	for _, tt := range CoalesceCases {
		t.Run(tt.Name, func(t *testing.T) {
			p, dev, live := k.Build(t, k.Config, tt.Before)
			// The device hands out segments back to back: blocks at the
			// end of one segment and the start of the next are adjacent
			// in memory, yet belong to different segments.
			rs := dev.Regions()
			for i := 1; i < len(rs); i++ {
				require.Equal(t, rs[i-1].End(), rs[i].Addr, "segments %d and %d are adjacent", i-1, i)
			}
			require.NoError(t, p.Free(live[tt.Free]))
			require.NoError(t, k.Check(p))
			assert.Equal(t, tt.After, k.Layout(p))
			assert.Equal(t, int64(len(rs)), dev.Stats().Mallocs, "no device call")
			assert.Zero(t, dev.Stats().Frees, "no device call")
		})
	}
}

// An AllocCase is a layout, a request, the block it must get and the
// layout after.
type AllocCase[C comparable] struct {
	Name    string
	Config  C // the kit's Config if zero
	Before  string
	Size    int64
	Seg     int   // segment of the block handed out
	Offset  int64 // its offset in the segment
	BlkSize int64
	After   string
	Grew    bool // the pool took one segment from the device
}

// AllocSplits allocates from the layout of each case and checks the block
// handed out, the layout after, the device mallocs made and the cache hit
// counted.
func (k Kit[C, P]) AllocSplits(t *testing.T, cases []AllocCase[C]) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			c := tt.Config
			if c == *new(C) {
				c = k.Config
			}
			p, dev, live := k.Build(t, c, tt.Before)
			mallocs := dev.Stats().Mallocs
			b, err := p.Alloc(tt.Size)
			require.NoError(t, err)
			require.NoError(t, k.Check(p))
			assert.Equal(t, tt.After, k.Layout(p))
			segs := k.heap(p).Layout()
			require.Less(t, tt.Seg, len(segs))
			assert.Equal(t, segs[tt.Seg].Addr+uint64(tt.Offset), b.Addr, "address: segment %d at %#x, offset %d", tt.Seg, segs[tt.Seg].Addr, b.Addr-segs[tt.Seg].Addr)
			assert.Equal(t, tt.BlkSize, b.Size)
			assert.Equal(t, tt.Size, b.Requested)
			grew := int64(0)
			if tt.Grew {
				grew = 1
			}
			assert.Equal(t, grew, dev.Stats().Mallocs-mallocs, "segments taken from the device")
			assert.Equal(t, !tt.Grew, p.Stats().CacheHits == 1+int64(len(live)), "a cache hit unless a segment was added")
		})
	}
}

// Grow allocates each of sizes in turn from p, none freed, checking p's
// invariants with check after each, and returns the sizes of dev's
// regions: the segments p took, in order.
func Grow(t *testing.T, p gpualloc.Allocator, dev *virtual.Device, check func() error, sizes []int64) []int64 {
	t.Helper()
	for _, size := range sizes {
		_, err := p.Alloc(size)
		require.NoError(t, err)
		require.NoError(t, check())
	}
	var got []int64
	for _, r := range dev.Regions() {
		got = append(got, r.Size)
	}
	return got
}

// OutOfMemory checks a pool of configuration c, which takes segments of 4
// KiB and splits them, on a device of 8 KiB: with a live and a free block
// of 3 KiB, each in a segment of its own, an Alloc of 6 KiB releases the
// free segment, retries and fails with [gpualloc.ErrOutOfMemory] and an
// error that contains msg, and the pool keeps its invariants and its live
// block. It returns the pool and that block, for the strategy's checks of
// what it serves next.
func (k Kit[C, P]) OutOfMemory(t *testing.T, c C, msg string) (P, gpualloc.Block) {
	t.Helper()
	p, _ := alloctest.New(t, 8<<10, k.New, c)
	a, err := p.Alloc(3 << 10)
	require.NoError(t, err)
	b, err := p.Alloc(3 << 10)
	require.NoError(t, err)
	require.NoError(t, p.Free(b))
	_, err = p.Alloc(6 << 10)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.ErrorContains(t, err, msg)
	require.NoError(t, k.Check(p))
	assert.Equal(t, "U3K F1K", k.Layout(p), "the free segment was released")
	st := p.Stats()
	assert.Equal(t, int64(1), st.OOMs)
	assert.Equal(t, int64(1), st.Retries)
	assert.Equal(t, int64(1), st.DeviceFrees)
	return p, a
}

// FreeSpace checks FreeSpace on a pool of the kit's Config with free blocks
// in two segments, before and after the free of a live block that merges
// with the largest of them.
func (k Kit[C, P]) FreeSpace(t *testing.T) {
	t.Helper()
	const kiB = 1 << 10
	p, _, live := k.Build(t, k.Config, "F2K U512 F1K U512 F1536 | U4K F3K")
	largest, total := p.FreeSpace()
	assert.Equal(t, int64(3*kiB), largest)
	assert.Equal(t, int64(2*kiB+kiB+1536+3*kiB), total)
	require.NoError(t, p.Free(live[2]))
	largest, total = p.FreeSpace()
	assert.Equal(t, int64(7*kiB), largest)
	assert.Equal(t, int64(2*kiB+kiB+1536+7*kiB), total)
}

// Drive runs ops, as [Drive] reads them, on a pool of configuration c on a
// 64 MiB device, checking every invariant after every operation.
func (k Kit[C, P]) Drive(c C, ops []byte) error {
	dev := strategytest.NewDevice(64 << 20)
	p, err := k.New(dev, c)
	if err != nil {
		return err
	}
	opt := Options{Check: func() error { return k.Check(p) }, MaxShift: 22}
	if k.WantSize != nil {
		opt.WantSize = k.WantSize(c)
	}
	return Drive(p, dev, ops, opt)
}

// RandomOps drives a pool of each configuration with the operations of
// [RandomOps], as [RunRandomOps] does.
func (k Kit[C, P]) RandomOps(t *testing.T, configs []C) { RunRandomOps(t, configs, k.Drive) }

// Fuzz drives a pool of one of configs with the operations the fuzzer
// makes up, as [FuzzRandomOps] does, seeded with 300 random operations for
// each configuration.
func (k Kit[C, P]) Fuzz(f *testing.F, configs []C) {
	f.Add(uint8(0), []byte{0, 22, 255, 0, 22, 255, 0, 22, 255, 200, 0, 0, 200, 0, 0, 247, 0, 0})
	FuzzRandomOps(f, configs, 300, k.Drive)
}

// RunRandomOps runs drive, which runs operations as [Drive] reads them on a
// pool of a configuration and checks it, on each configuration with the
// operations of [RandomOps] for six seeds (4000 operations each, 500 with
// -short).
func RunRandomOps[C any](t *testing.T, configs []C, drive func(C, []byte) error) {
	n := 4000
	if testing.Short() {
		n = 500
	}
	alloctest.ForSeeds(t, configs, 6, func(t *testing.T, _ int, c C, seed uint64) {
		if err := drive(c, RandomOps(seed, n)); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	})
}

// FuzzRandomOps runs drive (see [RunRandomOps]) on one of configs with the
// operations the fuzzer makes up, seeded with seedOps random operations for
// each configuration.
func FuzzRandomOps[C any](f *testing.F, configs []C, seedOps int, drive func(C, []byte) error) {
	for i := range configs {
		f.Add(uint8(i), RandomOps(uint64(i), seedOps))
	}
	f.Fuzz(func(t *testing.T, config uint8, ops []byte) {
		ops = ops[:min(len(ops), 3*500)] // a few hundred operations reach every state; more only slow the fuzzer
		c := configs[int(config)%len(configs)]
		if err := drive(c, ops); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	})
}

// A FreeBlock is a free block of a layout.
type FreeBlock struct {
	Addr uint64
	Size int64
}

// A Fit is a strategy's rule for the free block an Alloc takes: given the
// free blocks before the Alloc, in address order, and the rounded request,
// the addresses of the blocks the rule allows and a description of them
// for messages. None allowed means the Alloc must take a new segment.
type Fit func(free []FreeBlock, rounded int64) (allowed []uint64, want string)

// CheckFit checks, on 20000 random operations on a pool of configuration c
// on a 256 MiB device (half frees of a random live block, half requests of
// up to 4 MiB), that every Alloc takes a free block fit allows, or a new
// segment when it allows none, and that at least 5000 are served from free
// blocks.
func (k Kit[C, P]) CheckFit(t *testing.T, c C, round func(int64) int64, fit Fit) {
	p, err := k.New(strategytest.NewDevice(256<<20), c)
	require.NoError(t, err)
	hits := 0
	RandomAllocs(t, p, func(i int, size int64) gpualloc.Block {
		var free []FreeBlock
		for _, s := range k.heap(p).Layout() {
			addr := s.Addr
			for _, b := range s.Blocks {
				if b.Free {
					free = append(free, FreeBlock{addr, b.Size})
				}
				addr += uint64(b.Size)
			}
		}
		allowed, want := fit(free, round(size))
		mallocs := p.Stats().DeviceMallocs
		b, err := p.Alloc(size)
		require.NoError(t, err, "op %d", i)
		hit := slices.ContainsFunc(free, func(f FreeBlock) bool { return f.Addr == b.Addr })
		switch {
		case len(allowed) == 0 && hit:
			t.Fatalf("op %d: Alloc(%d) took the free block at %#x; the rule allows none", i, size, b.Addr)
		case len(allowed) == 0 && p.Stats().DeviceMallocs == mallocs:
			t.Fatalf("op %d: Alloc(%d) found a free block where the rule allows none", i, size)
		case len(allowed) > 0 && !slices.Contains(allowed, b.Addr):
			t.Fatalf("op %d: Alloc(%d) took %#x (a free block: %v); want %s", i, size, b.Addr, hit, want)
		}
		if hit {
			hits++
		}
		return b
	})
	if hits < 5000 {
		t.Errorf("only %d allocations were served from free blocks", hits)
	}
}

// RandomAllocs makes 20000 random operations on p: half frees of a random
// live block (when there is one), half requests of up to 4 MiB, spread
// evenly over the logarithm of the size, each made by alloc, which checks
// what it must and returns the block. The operations are the same on every
// run.
func RandomAllocs(t *testing.T, p gpualloc.Allocator, alloc func(i int, size int64) gpualloc.Block) {
	r := rand.New(rand.NewPCG(7, 7))
	var live []gpualloc.Block
	for i := range 20000 {
		if len(live) > 0 && r.IntN(2) == 0 {
			k := r.IntN(len(live))
			require.NoError(t, p.Free(live[k]))
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		live = append(live, alloc(i, int64(math.Exp(r.Float64()*math.Log(4<<20)))))
	}
}
