package buddy_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/buddy"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// strategy is buddy to the shared tests.
var strategy = alloctest.Strategy[buddy.Config, *buddy.Pool]{Name: "buddy", New: buddy.New, Default: buddy.DefaultConfig()}

func TestConformance(t *testing.T) {
	for _, tt := range []struct {
		c   buddy.Config
		opt strategytest.Options
	}{
		// Arenas of 1 GiB on a device of 4 GiB, blocks up to 512 MiB.
		{buddy.DefaultConfig(), strategytest.Options{Capacity: 4 * GiB}},
		// Arenas of twice the largest block on the default 256 MiB device.
		{buddy.Config{MinBlock: 512, Arena: 64 * MiB}, strategytest.Options{}},
		// Small arenas: most large blocks get arenas of their own.
		{buddy.Config{MinBlock: 4 * KiB, Arena: MiB}, strategytest.Options{}},
		// Every block an arena of its own.
		{buddy.Config{MinBlock: 512, Arena: 512}, strategytest.Options{}},
		// Blocks aligned to no more than 256 bytes.
		{buddy.Config{MinBlock: 256, Arena: 16 * MiB}, strategytest.Options{Align: 256}},
		// Devices smaller than one arena: arenas of the largest power of
		// two the device grants, down to the block's own size.
		{buddy.DefaultConfig(), strategytest.Options{Capacity: 64 * MiB}},
		{buddy.DefaultConfig(), strategytest.Options{Capacity: 256 * MiB}},
		// A device of 100 MiB in arenas of 64 MiB: the second arena is
		// smaller.
		{buddy.Config{MinBlock: 512, Arena: 64 * MiB}, strategytest.Options{Capacity: 100 * MiB}},
	} {
		name := fmt.Sprintf("min_block=%d,arena=%d", tt.c.MinBlock, tt.c.Arena)
		if tt.opt.Capacity != 0 {
			name += fmt.Sprintf(",capacity=%d", tt.opt.Capacity)
		}
		t.Run(name, func(t *testing.T) {
			opt := tt.opt
			opt.Caching = true
			if opt.Align == 0 {
				opt.Align = virtual.Alignment
			}
			strategytest.Run(t, strategy.Open(tt.c), &opt)
		})
	}
}

func TestRoundSize(t *testing.T) {
	def := buddy.DefaultConfig()
	tests := []struct {
		c          buddy.Config
		size, want int64
	}{
		{def, 1, 512},
		{def, 511, 512},
		{def, 512, 512},
		{def, 513, 1024},
		{def, 4097, 8192},
		{def, 100000, 131072},
		{def, 5000000, 8 * MiB},
		{def, GiB, GiB},
		{def, GiB + 1, 2 * GiB},
		{def, 1 << 62, 1 << 62},
		{buddy.Config{MinBlock: 1, Arena: 1}, 1, 1},
		{buddy.Config{MinBlock: 1, Arena: 1}, 3, 4},
		{buddy.Config{MinBlock: 64 * KiB, Arena: MiB}, 65537, 128 * KiB},
		// Out of range.
		{def, 0, 0},
		{def, -1, 0},
		{def, 1<<62 + 1, 0},
		{def, math.MaxInt64, 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.c.RoundSize(tt.size), "%+v.RoundSize(%d)", tt.c, tt.size)
	}
}

func TestNewValidates(t *testing.T) {
	strategy.NewValidates(t, []alloctest.ConfigCase[buddy.Config]{
		{Config: buddy.Config{MinBlock: 1, Arena: 1}},
		{Config: buddy.Config{MinBlock: 512, Arena: 1 << 62}},
		{Config: buddy.Config{MinBlock: 0, Arena: GiB}, Err: "buddy: min_block=0: must be a power of two"},
		{Config: buddy.Config{MinBlock: -512, Arena: GiB}, Err: "buddy: min_block=-512: must be a power of two"},
		{Config: buddy.Config{MinBlock: 1000, Arena: GiB}, Err: "buddy: min_block=1000: must be a power of two"},
		{Config: buddy.Config{MinBlock: 512, Arena: 0}, Err: "buddy: arena=0: must be a power of two"},
		{Config: buddy.Config{MinBlock: 512, Arena: 3 * GiB}, Err: "buddy: arena=3221225472: must be a power of two"},
		{Config: buddy.Config{MinBlock: 4096, Arena: 2048}, Err: "buddy: arena=2048: must be at least min_block (4096)"},
	})
}

func TestRegistry(t *testing.T) {
	strategy.Params(t, "Buddy", []string{"min_block", "arena"}, []string{"512", "1073741824"})
	spec := func(c buddy.Config) string { return fmt.Sprintf("buddy:min_block=%d,arena=%d", c.MinBlock, c.Arena) }
	strategy.Select(t, GiB, spec, []alloctest.SelectCase[buddy.Config]{
		{Spec: "buddy", Want: buddy.DefaultConfig()},
		{Spec: "BUDDY:min_block=4KiB,arena=256MiB", Want: buddy.Config{MinBlock: 4096, Arena: 256 * MiB}},
		{Spec: "buddy:arena=512", Want: buddy.Config{MinBlock: 512, Arena: 512}},
		{Spec: "buddy:min_block=1000", Err: "buddy: min_block=1000: must be a power of two"},
		{Spec: "buddy:arena=1.5GiB", Err: "buddy: arena=1.5GiB: must be a power of two"},
		{Spec: "buddy:min_block=2MiB,arena=1MiB", Err: "buddy: arena=1MiB: must be at least min_block (2097152)"},
		{Spec: "buddy:min_block=big", Err: "buddy: min_block=big: not a size: want bytes or a number with a unit such as MiB"},
		{Spec: "buddy:page=4096", Err: `buddy: unknown parameter "page" (known: min_block, arena)`},
	})
	strategy.DefaultSpec(t, "buddy:min_block=512,arena=1073741824")
}

func TestInterfaces(t *testing.T) {
	var a gpualloc.Allocator
	a, err := buddy.New(strategytest.NewDevice(GiB), buddy.DefaultConfig())
	require.NoError(t, err)
	assert.Implements(t, (*gpualloc.StatsReporter)(nil), a)
	assert.Implements(t, (*gpualloc.Releaser)(nil), a)
	assert.Implements(t, (*gpualloc.Specer)(nil), a)
	assert.Implements(t, (*gpualloc.FreeSpaceReporter)(nil), a)
}

func alloc(t *testing.T, p *buddy.Pool, size int64) gpualloc.Block {
	t.Helper()
	b, err := p.Alloc(size)
	require.NoError(t, err, "Alloc(%d)", size)
	return b
}

func TestFreeSpace(t *testing.T) {
	p, _ := alloctest.New(t, GiB, buddy.New, buddy.Config{MinBlock: 512, Arena: MiB})
	largest, total := p.FreeSpace()
	assert.Zero(t, largest)
	assert.Zero(t, total)

	a := alloc(t, p, 1)
	largest, total = p.FreeSpace()
	assert.Equal(t, int64(512*KiB), largest)
	assert.Equal(t, int64(MiB-512), total)

	b := alloc(t, p, 512*KiB)
	largest, total = p.FreeSpace()
	assert.Equal(t, int64(256*KiB), largest)
	assert.Equal(t, int64(512*KiB-512), total)

	require.NoError(t, p.Free(a))
	largest, total = p.FreeSpace()
	assert.Equal(t, int64(512*KiB), largest)
	assert.Equal(t, int64(512*KiB), total)
	require.NoError(t, p.Free(b))
	largest, total = p.FreeSpace()
	assert.Equal(t, int64(MiB), largest)
	assert.Equal(t, int64(MiB), total)
	require.NoError(t, p.ReleaseAll())
	largest, total = p.FreeSpace()
	assert.Zero(t, largest)
	assert.Zero(t, total)
}

// When the device refuses a new arena, the pool returns its empty arenas
// and retries once.
func TestOutOfMemoryReleasesEmptyArenas(t *testing.T) {
	p, dev := alloctest.New(t, 4*MiB, buddy.New, buddy.Config{MinBlock: 512, Arena: MiB})
	var blocks []gpualloc.Block
	for range 4 {
		blocks = append(blocks, alloc(t, p, MiB))
	}
	_, err := p.Alloc(1)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "buddy: alloc of 1 bytes (512 rounded): device refused arenas of 1048576 bytes down to 512: virtual: device 0: malloc of 512 bytes with 4194304 of 4194304 bytes in use: out of memory")
	st := p.Stats()
	assert.Equal(t, int64(1), st.OOMs)
	assert.Equal(t, int64(1), st.Retries)
	assert.Zero(t, st.DeviceFrees, "no arena was empty")
	assert.Equal(t, int64(2+11), dev.Stats().FailedMallocs, "1 MiB twice, then every power of two down to 512 bytes")

	// Two arenas empty: a request of 2 MiB needs an arena of its own, which
	// the device has room for only once they are returned.
	require.NoError(t, p.Free(blocks[0]))
	require.NoError(t, p.Free(blocks[1]))
	big := alloc(t, p, 2*MiB)
	st = p.Stats()
	assert.Equal(t, int64(2), st.Retries)
	assert.Equal(t, int64(2), st.DeviceFrees)
	assert.Equal(t, int64(1), st.OOMs)
	assert.Equal(t, int64(4*MiB), dev.Stats().Used)

	// Still usable after all that.
	require.NoError(t, p.Free(blocks[2]))
	small := alloc(t, p, 1)
	require.NoError(t, p.Free(small))
	require.NoError(t, p.Free(blocks[3]))
	require.NoError(t, p.Free(big))
	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used)
	assert.Zero(t, p.Stats().Reserved)
}

// A device malloc that fails with room to spare is retried.
func TestRetryAfterRefusal(t *testing.T) {
	p, dev := alloctest.New(t, GiB, buddy.New, buddy.Config{MinBlock: 512, Arena: MiB})
	dev.FailMallocs(1)
	b := alloc(t, p, 100)
	st := p.Stats()
	assert.Equal(t, int64(1), st.Retries)
	assert.Equal(t, int64(1), st.DeviceMallocs)
	assert.Zero(t, st.OOMs)

	dev.FailMallocs(2)
	_, err := p.Alloc(2 * MiB)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	st = p.Stats()
	assert.Equal(t, int64(2), st.Retries)
	assert.Equal(t, int64(1), st.OOMs)
	require.NoError(t, p.Free(b))

	// A request no larger than an arena, refused twice: half an arena.
	require.NoError(t, p.ReleaseAll())
	dev.FailMallocs(2)
	b = alloc(t, p, 100)
	assert.Equal(t, []virtual.Region{{Addr: b.Addr, Size: 512 * KiB}}, dev.Regions())
	st = p.Stats()
	assert.Equal(t, int64(3), st.Retries)
	assert.Equal(t, int64(1), st.OOMs)
	require.NoError(t, p.Free(b))
}

// asking is a backend that records the size of every Malloc asked of it,
// granted or refused.
type asking struct {
	*virtual.Device
	asked []int64
}

func (a *asking) Malloc(size int64) (uint64, error) {
	a.asked = append(a.asked, size)
	return a.Device.Malloc(size)
}

// take returns the sizes asked since the last call.
func (a *asking) take() []int64 {
	r := a.asked
	a.asked = nil
	return r
}

// On a device smaller than one arena the pool takes the largest arena the
// device grants: a full one refused, it returns its empty arenas and asks
// again, then asks for halves down to the block's own size.
func TestDeviceSmallerThanArena(t *testing.T) {
	dev := &asking{Device: strategytest.NewDevice(768 * MiB)}
	p, err := buddy.New(dev, buddy.DefaultConfig())
	require.NoError(t, err)

	a := alloc(t, p, 1)
	assert.Equal(t, []int64{GiB, GiB, 512 * MiB}, dev.take())
	assert.Equal(t, []virtual.Region{{Addr: a.Addr, Size: 512 * MiB}}, dev.Regions())
	st, ds := p.Stats(), dev.Stats()
	assert.Equal(t, int64(1), st.DeviceMallocs)
	assert.Equal(t, int64(512*MiB), st.Reserved)
	assert.Equal(t, int64(1), st.Retries)
	assert.Zero(t, st.OOMs)
	assert.Equal(t, int64(2), ds.FailedMallocs)
	largest, total := p.FreeSpace()
	assert.Equal(t, int64(256*MiB), largest)
	assert.Equal(t, int64(512*MiB-512), total)

	// The arena's upper half serves a block of 256 MiB.
	b := alloc(t, p, 200*MiB)
	assert.Empty(t, dev.take())
	assert.Equal(t, a.Addr+256*MiB, b.Addr)

	// Another: a second arena, of the 256 MiB the device has left.
	c := alloc(t, p, 256*MiB)
	assert.Equal(t, []int64{GiB, GiB, 512 * MiB, 256 * MiB}, dev.take())
	assert.Equal(t, []virtual.Region{{Addr: a.Addr, Size: 512 * MiB}, {Addr: c.Addr, Size: 256 * MiB}}, dev.Regions())
	assert.Equal(t, int64(768*MiB), dev.Stats().Used)

	// Smaller requests come from the first arena's free blocks.
	d := alloc(t, p, 64*MiB)
	assert.Empty(t, dev.take())

	// A third block of 256 MiB fits nowhere: every size down to its own
	// is refused, and the pool says so.
	_, err = p.Alloc(200 * MiB)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.EqualError(t, err, "buddy: alloc of 209715200 bytes (268435456 rounded): device refused arenas of 1073741824 bytes down to 268435456: virtual: device 0: malloc of 268435456 bytes with 805306368 of 805306368 bytes in use: out of memory")
	assert.Equal(t, []int64{GiB, GiB, 512 * MiB, 256 * MiB}, dev.take())
	st = p.Stats()
	assert.Equal(t, int64(1), st.OOMs)
	assert.Equal(t, int64(3), st.Retries)
	assert.Equal(t, int64(2), st.DeviceMallocs)
	assert.Zero(t, st.DeviceFrees)

	// The pool is still usable: b's block, once freed, serves the request.
	require.NoError(t, p.Free(b))
	b2 := alloc(t, p, 200*MiB)
	assert.Equal(t, b.Addr, b2.Addr)
	assert.Empty(t, dev.take())

	// Everything back to the device: the next arena is again the largest
	// the device grants.
	for _, blk := range []gpualloc.Block{a, b2, c, d} {
		require.NoError(t, p.Free(blk))
	}
	require.NoError(t, p.ReleaseAll())
	assert.Empty(t, dev.Regions())
	e := alloc(t, p, 300*MiB)
	assert.Equal(t, []int64{GiB, GiB, 512 * MiB}, dev.take())
	assert.Equal(t, []virtual.Region{{Addr: e.Addr, Size: 512 * MiB}}, dev.Regions())
	require.NoError(t, p.Free(e))
	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used)
	assert.Zero(t, dev.Stats().InvalidCalls)
}

// The first arena on devices of several capacities, with the default 1 GiB
// arenas and a request of one byte: the largest power of two the device
// grants, at least the block's 512 bytes.
func TestFirstArenaOnSmallDevices(t *testing.T) {
	for _, tt := range []struct {
		capacity, want int64 // want 0: out of memory
	}{
		{4 * GiB, GiB},
		{GiB, GiB},
		{GiB - 1, 512 * MiB},
		{512 * MiB, 512 * MiB},
		{300 * MiB, 256 * MiB},
		{64 * MiB, 64 * MiB},
		{1000, 512},
		{512, 512},
		{511, 0},
	} {
		t.Run(fmt.Sprint(tt.capacity), func(t *testing.T) {
			dev := &asking{Device: strategytest.NewDevice(tt.capacity)}
			p, err := buddy.New(dev, buddy.DefaultConfig())
			require.NoError(t, err)
			b, err := p.Alloc(1)
			var want []int64
			for size := int64(GiB); size >= max(tt.want, 512); size /= 2 {
				want = append(want, size)
				if size == GiB && size != tt.want {
					want = append(want, size) // asked again after releasing nothing
				}
			}
			assert.Equal(t, want, dev.take(), "sizes asked of the device")
			if tt.want == 0 {
				require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
				assert.Empty(t, dev.Regions())
				assert.Equal(t, int64(1), p.Stats().OOMs)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []virtual.Region{{Addr: b.Addr, Size: tt.want}}, dev.Regions())
			// The block's buddy is free, unless the block is the whole arena.
			largest, total := p.FreeSpace()
			if tt.want == 512 {
				assert.Zero(t, largest)
			} else {
				assert.Equal(t, tt.want/2, largest)
			}
			assert.Equal(t, tt.want-512, total)
			require.NoError(t, p.Free(b))
		})
	}
}

// A request that fits nowhere on a small device fails with every size down
// to the block's own refused, and the pool stays usable.
func TestOutOfMemoryOnSmallDevice(t *testing.T) {
	dev := &asking{Device: strategytest.NewDevice(64 * MiB)}
	p, err := buddy.New(dev, buddy.DefaultConfig())
	require.NoError(t, err)

	// Larger than the device.
	_, err = p.Alloc(100 * MiB)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, []int64{GiB, GiB, 512 * MiB, 256 * MiB, 128 * MiB}, dev.take())
	assert.Zero(t, dev.Stats().Used)

	a := alloc(t, p, 1)
	assert.Equal(t, []int64{GiB, GiB, 512 * MiB, 256 * MiB, 128 * MiB, 64 * MiB}, dev.take())

	// The device is full: a block of 64 MiB fits nowhere, nor one of 512
	// bytes once the arena's last free block is taken.
	_, err = p.Alloc(64 * MiB)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, []int64{GiB, GiB, 512 * MiB, 256 * MiB, 128 * MiB, 64 * MiB}, dev.take())
	b := alloc(t, p, 32*MiB)
	assert.Empty(t, dev.take())
	st := p.Stats()
	assert.Equal(t, int64(2), st.OOMs)
	assert.Equal(t, int64(3), st.Retries)
	assert.Equal(t, int64(1), st.DeviceMallocs)

	// Still usable: with a freed, the whole arena serves 64 MiB.
	require.NoError(t, p.Free(a))
	require.NoError(t, p.Free(b))
	c := alloc(t, p, 64*MiB)
	assert.Empty(t, dev.take())
	assert.Equal(t, a.Addr, c.Addr)
	_, err = p.Alloc(1)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Len(t, dev.take(), 2+21, "1 GiB twice, then every power of two down to 512 bytes")
	require.NoError(t, p.Free(c))
	d := alloc(t, p, 1)
	assert.Empty(t, dev.take())
	require.NoError(t, p.Free(d))
	require.NoError(t, p.ReleaseAll())
	assert.Zero(t, dev.Stats().Used)
	assert.Equal(t, int64(3), p.Stats().OOMs)
}

func TestTooLarge(t *testing.T) {
	p, dev := alloctest.New(t, GiB, buddy.New, buddy.DefaultConfig())
	for _, size := range []int64{1<<62 + 1, math.MaxInt64} {
		_, err := p.Alloc(size)
		require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	}
	assert.Equal(t, int64(2), p.Stats().OOMs)
	assert.Zero(t, dev.Stats().Mallocs+dev.Stats().FailedMallocs, "no device call")
	_, err := p.Alloc(1 << 62)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, int64(3), p.Stats().OOMs)
}

func TestInvalidFree(t *testing.T) {
	p, _ := alloctest.New(t, GiB, buddy.New, buddy.DefaultConfig())
	a := alloc(t, p, 1000)
	b := alloc(t, p, 1000)
	require.NoError(t, p.Free(a))
	c := alloc(t, p, 1000) // a's block again
	require.Equal(t, a.Addr, c.Addr)

	bad := []struct {
		b    gpualloc.Block
		want string
	}{
		{a, "buddy: free of 0x7f4000000000 (1024 bytes): no live block there: invalid free"},
		{gpualloc.Block{}, "buddy: free of 0x0 (0 bytes): no live block there: invalid free"},
		{gpualloc.Block{Addr: b.Addr, Size: b.Size, Requested: b.Requested, Handle: b.Handle + 1}, "buddy: free of 0x7f4000000400 (1024 bytes): no live block there: invalid free"},
		{gpualloc.Block{Addr: b.Addr, Size: 2048, Requested: b.Requested, Handle: b.Handle}, "buddy: free of 0x7f4000000400 with Size 2048, Requested 1000: the live block there has Size 1024, Requested 1000: invalid free"},
		{gpualloc.Block{Addr: b.Addr, Size: b.Size, Requested: 999, Handle: b.Handle}, "buddy: free of 0x7f4000000400 with Size 1024, Requested 999: the live block there has Size 1024, Requested 1000: invalid free"},
		{gpualloc.Block{Addr: b.Addr + 512, Size: b.Size, Requested: b.Requested, Handle: b.Handle}, "buddy: free of 0x7f4000000600 (1024 bytes): no live block there: invalid free"},
		{gpualloc.Block{Addr: b.Addr, Size: b.Size, Requested: b.Requested, Handle: math.MaxUint64}, "buddy: free of 0x7f4000000400 (1024 bytes): no live block there: invalid free"},
	}
	st := p.Stats()
	for _, tt := range bad {
		err := p.Free(tt.b)
		assert.ErrorIs(t, err, gpualloc.ErrInvalidFree)
		assert.EqualError(t, err, tt.want)
	}
	assert.Equal(t, st, p.Stats())
	require.NoError(t, p.Free(b))
	require.NoError(t, p.Free(c))
	assert.ErrorIs(t, p.Free(c), gpualloc.ErrInvalidFree)
}

// refusing is a backend whose Free fails.
type refusing struct{ *virtual.Device }

func (refusing) Free(uint64, int64) error { return errors.New("device busy") }

func TestReleaseAllDeviceError(t *testing.T) {
	p, err := buddy.New(refusing{strategytest.NewDevice(GiB)}, buddy.Config{MinBlock: 512, Arena: MiB})
	require.NoError(t, err)
	a := alloc(t, p, 1)
	b := alloc(t, p, 2*MiB)
	require.NoError(t, p.Free(a))
	require.NoError(t, p.Free(b))
	err = p.ReleaseAll()
	assert.EqualError(t, err, "buddy: release: device busy\ndevice busy")
	assert.Zero(t, p.Stats().DeviceFrees)
	largest, total := p.FreeSpace()
	assert.Zero(t, largest)
	assert.Zero(t, total)
	assert.NoError(t, p.ReleaseAll(), "the arenas the device refused left the pool")
}
