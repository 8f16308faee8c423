package dualcursor

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// small is the configuration of the layout tests: 512-byte blocks without
// padding, device blocks of 8 KiB, parameters static from the high end,
// unknown allocations dynamic.
var small = Config{Align: 512, Block: 8 * KiB, Grow: GrowBlock, Static: Categories(gpualloc.CategoryParameter), Unknown: UnknownDynamic}

func TestRoundSize(t *testing.T) {
	def := DefaultConfig()
	for _, tt := range []struct {
		c          Config
		size, want int64
	}{
		// (size + 32) rounded up to 512, MindSpore's GetCommonAlignSize.
		{def, 1, 512},
		{def, 480, 512},
		{def, 481, 1024},
		{def, 512, 1024},
		{def, 992, 1024},
		{def, 993, 1536},
		{def, MiB, MiB + 512},
		{def, MiB - 32, MiB},
		{def, 0, 0},
		{def, -1, 0},
		{def, 1<<63 - 1, 0},
		{def, 1<<63 - 1 - 32, 0},
		{Config{Align: 256}, 1, 256},
		{Config{Align: 256}, 256, 256},
		{Config{Align: 256}, 257, 512},
		{Config{Align: 4096, Pad: 100}, 3996, 4096},
		{Config{Align: 4096, Pad: 100}, 3997, 8192},
	} {
		assert.Equal(t, tt.want, tt.c.RoundSize(tt.size), "align %d, pad %d, size %d", tt.c.Align, tt.c.Pad, tt.size)
	}
}

func TestIsStatic(t *testing.T) {
	c := DefaultConfig()
	withInput := c
	withInput.Static |= Categories(gpualloc.CategoryInput)
	dyn, stat := c, c
	dyn.Unknown, stat.Unknown = UnknownDynamic, UnknownStatic
	for _, tt := range []struct {
		c      Config
		cat    gpualloc.Category
		freed  bool
		static bool
	}{
		{c, gpualloc.CategoryParameter, false, true},
		{c, gpualloc.CategoryParameter, true, true},
		{c, gpualloc.CategoryOptimizerState, true, true},
		{c, gpualloc.CategoryInput, false, false},
		{withInput, gpualloc.CategoryInput, true, true},
		{c, gpualloc.CategoryActivation, false, false},
		{c, gpualloc.CategoryGradient, false, false},
		{c, gpualloc.CategoryTemporary, false, false},
		{c, gpualloc.CategoryAutogradDetail, false, false},
		// Unknown: static before the pool's first free, by default.
		{c, gpualloc.CategoryUnknown, false, true},
		{c, gpualloc.CategoryUnknown, true, false},
		{dyn, gpualloc.CategoryUnknown, false, false},
		{stat, gpualloc.CategoryUnknown, true, true},
		{Config{Static: 0}, gpualloc.CategoryParameter, false, false},
	} {
		assert.Equal(t, tt.static, tt.c.IsStatic(tt.cat, tt.freed), "static=%s unknown=%s %s freed=%v", tt.c.Static, tt.c.Unknown, tt.cat, tt.freed)
	}
}

// A step is an operation on a pool and the layout it leaves: "S1K"
// allocates 1 KiB as a parameter, "D2K" as an activation, "U512" of unknown
// category (through Alloc), "F3" frees the block of the fourth allocation;
// "!D9K" is an allocation that must fail with ErrOutOfMemory.
type step struct{ op, want string }

func parseSize(t *testing.T, s string) int64 {
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = KiB, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mul, s = MiB, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n * mul
}

// runSteps applies the steps to p, checking the invariants and the layout
// after each.
func runSteps(t *testing.T, p *Pool, steps []step) []gpualloc.Block {
	t.Helper()
	var blocks []gpualloc.Block
	for i, st := range steps {
		op := st.op
		fail := strings.HasPrefix(op, "!")
		op = strings.TrimPrefix(op, "!")
		var err error
		var b gpualloc.Block
		switch op[0] {
		case 'S':
			b, err = p.AllocCategory(parseSize(t, op[1:]), 0, gpualloc.CategoryParameter)
		case 'D':
			b, err = p.AllocCategory(parseSize(t, op[1:]), 0, gpualloc.CategoryActivation)
		case 'U':
			b, err = p.Alloc(parseSize(t, op[1:]))
		case 'F':
			k, _ := strconv.Atoi(op[1:])
			require.NoError(t, p.Free(blocks[k]), "step %d: %s", i, st.op)
		}
		if op[0] != 'F' {
			if fail {
				require.ErrorIs(t, err, gpualloc.ErrOutOfMemory, "step %d: %s", i, st.op)
			} else {
				require.NoError(t, err, "step %d: %s", i, st.op)
			}
			blocks = append(blocks, b)
		}
		require.NoError(t, p.check(), "step %d: %s", i, st.op)
		require.Equal(t, st.want, p.layout(), "step %d: %s", i, st.op)
	}
	return blocks
}

func TestPlacement(t *testing.T) {
	p, _ := alloctest.New(t, GiB, New, small)
	runSteps(t, p, []step{
		{"S1K", "G7K S1K"},                               // 0: static from the top down
		{"D2K", "D2K G5K S1K"},                           // 1: dynamic from the base up
		{"D1K", "D2K D1K G4K S1K"},                       // 2
		{"S512", "D2K D1K G3584 S512 S1K"},               // 3: below the previous static block
		{"F1", "F2K D1K G3584 S512 S1K"},                 // 4: freed in place, not at a cursor
		{"D1K", "D1K F1K D1K G3584 S512 S1K"},            // 5: best fit, cut at the dynamic end of the range
		{"F2", "D1K G5632 S512 S1K"},                     // 6: the cursor moves back over the free range below
		{"F3", "D1K G6K S1K"},                            // 7: the static cursor moves back up
		{"D8K", "D1K G6K S1K | D8K G0"},                  // 8: no gap holds it: a new device block
		{"S6K", "D1K G0 S6K S1K | D8K G0"},               // 9: the first block's gap, used up
		{"D512", "D1K G0 S6K S1K | D8K G0 | D512 G7680"}, // 10
		{"F6", "D1K G6K S1K | D8K G0 | D512 G7680"},      // 11
		{"F0", "D1K G7K | D8K G0 | D512 G7680"},          // 12: the static side empties
		{"F4", "G8K | D8K G0 | D512 G7680"},              // 13: the whole block is the gap
	})
	st := p.Stats()
	assert.Equal(t, int64(3), st.DeviceMallocs)
	assert.Equal(t, int64(24*KiB), st.Reserved)
	assert.Equal(t, int64(5), st.CacheHits)
}

func TestPlacementBestFit(t *testing.T) {
	p, _ := alloctest.New(t, GiB, New, small)
	runSteps(t, p, []step{
		{"D1K", "D1K G7K"},
		{"D512", "D1K D512 G6656"},
		{"D2K", "D1K D512 D2K G4608"},
		{"D512", "D1K D512 D2K D512 G4K"},
		{"D1K", "D1K D512 D2K D512 D1K G3K"},
		{"F0", "F1K D512 D2K D512 D1K G3K"},
		{"F2", "F1K D512 F2K D512 D1K G3K"},
		{"D1K", "D1K D512 F2K D512 D1K G3K"},     // the smallest range that fits, not the first
		{"D1K", "D1K D512 D1K F1K D512 D1K G3K"}, // a larger range is cut at its low end
		{"F1", "D1K F512 D1K F1K D512 D1K G3K"},
		{"D512", "D1K D512 D1K F1K D512 D1K G3K"}, // an exact fit
		{"F3", "D1K D512 D1K F1536 D1K G3K"},      // merges with the free range below
		{"F4", "D1K D512 D1K G5632"},              // the free range and the freed block join the gap
		{"F6", "D1K D512 G6656"},
		{"F5", "F1K D512 G6656"},
		{"F7", "G8K"},
	})
}

func TestPlacementSidesStayApart(t *testing.T) {
	// A range freed on one side is not used by the other.
	p, _ := alloctest.New(t, GiB, New, small)
	runSteps(t, p, []step{
		{"S2K", "G6K S2K"},
		{"S1K", "G5K S1K S2K"},
		{"F0", "G5K S1K F2K"},
		{"D2K", "D2K G3K S1K F2K"},
		{"S2K", "D2K G3K S1K S2K"},
		{"F2", "G5K S1K S2K"},
	})
}

func TestStaticEndLow(t *testing.T) {
	c := small
	c.StaticEnd = EndLow
	p, _ := alloctest.New(t, GiB, New, c)
	blocks := runSteps(t, p, []step{
		{"S1K", "S1K G7K"},
		{"D2K", "S1K G5K D2K"},
		{"S512", "S1K S512 G4608 D2K"},
		{"D1K", "S1K S512 G3584 D1K D2K"},
		{"F1", "S1K S512 G3584 D1K F2K"},
		{"D1K", "S1K S512 G3584 D1K F1K D1K"}, // cut at the range's high end, the dynamic side's own
	})
	// The mirror image of the same operations with static_end=high.
	q, _ := alloctest.New(t, GiB, New, small)
	mirror := runSteps(t, q, []step{
		{"S1K", "G7K S1K"},
		{"D2K", "D2K G5K S1K"},
		{"S512", "D2K G4608 S512 S1K"},
		{"D1K", "D2K D1K G3584 S512 S1K"},
		{"F1", "F2K D1K G3584 S512 S1K"},
		{"D1K", "D1K F1K D1K G3584 S512 S1K"},
	})
	base := p.blocks[0].addr
	qbase := q.blocks[0].addr
	for i := range blocks {
		lo := blocks[i].Addr - base
		hi := uint64(8*KiB) - (mirror[i].Addr - qbase) - uint64(mirror[i].Size)
		assert.Equal(t, lo, hi, "allocation %d lies at the mirrored offset", i)
	}
}

func TestUnknownBeforeFirstFree(t *testing.T) {
	c := small
	c.Unknown = UnknownBeforeFirstFree
	p, _ := alloctest.New(t, GiB, New, c)
	runSteps(t, p, []step{
		{"U1K", "G7K S1K"}, // before any free: static
		{"U512", "G6656 S512 S1K"},
		{"D1K", "D1K G5632 S512 S1K"},
		{"F2", "G6656 S512 S1K"},      // the first free
		{"U1K", "D1K G5632 S512 S1K"}, // after it: dynamic
		{"S1K", "D1K G4608 S1K S512 S1K"},
	})
}

func TestGrowNone(t *testing.T) {
	c := small
	c.Grow = GrowNone
	p, dev := alloctest.New(t, GiB, New, c)
	runSteps(t, p, []step{
		{"S4K", "G4K S4K"},
		{"D3K", "D3K G1K S4K"},
		{"!D2K", "D3K G1K S4K"}, // the cursors would cross: out of memory, no second block
		{"D1K", "D3K D1K G0 S4K"},
		{"!S512", "D3K D1K G0 S4K"},
		{"F1", "F3K D1K G0 S4K"},
		{"D2K", "D2K F1K D1K G0 S4K"},
	})
	st := p.Stats()
	assert.Equal(t, int64(2), st.OOMs)
	assert.Equal(t, int64(1), st.DeviceMallocs)
	assert.Equal(t, int64(8*KiB), dev.Stats().Used)
}

func TestBlockZeroTakesTheDevice(t *testing.T) {
	c := small
	c.Block, c.Grow = 0, GrowNone
	p, dev := alloctest.New(t, 64*KiB, New, c)
	runSteps(t, p, []step{
		{"S1K", "G63K S1K"},
		{"D60K", "D60K G3K S1K"},
		{"!D4K", "D60K G3K S1K"},
	})
	assert.Equal(t, int64(64*KiB), dev.Stats().Used)
}

// TestBlockZeroResizesAfterRelease checks that with block=0 the block asked
// for after a release is sized again from the device's free memory, which
// the release has grown.
func TestBlockZeroResizesAfterRelease(t *testing.T) {
	c := small
	c.Block = 0
	p, dev := alloctest.New(t, 64*KiB, New, c)
	other, err := dev.Malloc(32 * KiB) // memory the pool does not hold
	require.NoError(t, err)
	runSteps(t, p, []step{
		{"D1K", "D1K G31K"},
		{"F0", "G32K"},
	})
	require.NoError(t, dev.Free(other, 32*KiB))
	// 40 KiB do not fit in the free block, nor in the 32 KiB the device
	// has free; once the block goes back, the device's 64 KiB are free.
	runSteps(t, p, []step{{"D40K", "D40K G24K"}})
	st := p.Stats()
	assert.Equal(t, int64(1), st.Retries)
	assert.Equal(t, int64(1), st.DeviceFrees)
	assert.Equal(t, int64(64*KiB), dev.Stats().Used)
}

func TestReleaseAndRetry(t *testing.T) {
	p, dev := alloctest.New(t, 16*KiB, New, small)
	runSteps(t, p, []step{
		{"D4K", "D4K G4K"},
		{"F0", "G8K"},
		// A 12 KiB block does not fit beside the free 8 KiB one, which goes
		// back to the device; the retry succeeds.
		{"D12K", "D12K G0"},
		// An 8 KiB block does not fit in the 4 KiB left, and nothing is
		// free: a block of just the request does.
		{"D4K", "D12K G0 | D4K G0"},
		{"!D512", "D12K G0 | D4K G0"},
		{"F2", "D12K G0 | G4K"},
		{"D512", "D12K G0 | D512 G3584"},
	})
	st := p.Stats()
	assert.Equal(t, int64(3), st.Retries, "after the release, after the refusal of 8 KiB, and of 512 bytes")
	assert.Equal(t, int64(1), st.OOMs)
	assert.Equal(t, int64(1), st.DeviceFrees)
	assert.Equal(t, int64(3), st.DeviceMallocs)
	assert.Equal(t, int64(16*KiB), dev.Stats().Used)
}

func TestFreeSpaceAndRelease(t *testing.T) {
	p, dev := alloctest.New(t, GiB, New, small)
	largest, total := p.FreeSpace()
	assert.Zero(t, largest)
	assert.Zero(t, total)
	blocks := runSteps(t, p, []step{
		{"D1K", "D1K G7K"},
		{"D2K", "D1K D2K G5K"},
		{"D1K", "D1K D2K D1K G4K"},
		{"F1", "D1K F2K D1K G4K"},
		{"D9K", "D1K F2K D1K G4K | D9K G0"},
		{"S1K", "D1K F2K D1K G3K S1K | D9K G0"},
	})
	largest, total = p.FreeSpace()
	assert.Equal(t, int64(3*KiB), largest)
	assert.Equal(t, int64(5*KiB), total)

	// ReleaseAll returns only entirely free device blocks.
	require.NoError(t, p.ReleaseAll())
	assert.Equal(t, int64(17*KiB), dev.Stats().Used)
	require.NoError(t, p.Free(blocks[3]))
	require.NoError(t, p.ReleaseAll())
	require.NoError(t, p.check())
	assert.Equal(t, "D1K F2K D1K G3K S1K", p.layout())
	assert.Equal(t, int64(8*KiB), dev.Stats().Used)

	// Frees of blocks that are not live change nothing.
	for _, b := range []gpualloc.Block{
		blocks[3], // freed already
		{Addr: blocks[0].Addr, Size: blocks[0].Size, Requested: 1, Handle: blocks[0].Handle}, // changed
		{Addr: blocks[0].Addr + 512, Size: 512, Requested: 512, Handle: blocks[0].Handle},    // inside a block
		{},
	} {
		assert.ErrorIs(t, p.Free(b), gpualloc.ErrInvalidFree)
	}
	require.NoError(t, p.check())
	assert.Equal(t, "D1K F2K D1K G3K S1K", p.layout())
}

func TestReleaseAllDeviceError(t *testing.T) {
	p, err := New(alloctest.Refusing{Device: strategytest.NewDevice(GiB)}, small)
	require.NoError(t, err)
	alloctest.ReleaseRefused(t, p, "dualcursor", p.check, p.layout, "G8K")
}

func TestTooLarge(t *testing.T) {
	p, _ := alloctest.New(t, GiB, New, DefaultConfig())
	_, err := p.Alloc(1<<63 - 1)
	assert.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	_, err = p.Alloc(2 * GiB)
	assert.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, int64(2), p.Stats().OOMs)
	assert.Zero(t, p.Stats().DeviceMallocs)
	_, err = p.Alloc(0)
	assert.ErrorIs(t, err, gpualloc.ErrInvalidSize)
}
