package gmlake_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/gmlake"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

func TestRoundSize(t *testing.T) {
	for _, c := range []struct{ size, want int64 }{
		{0, 0}, {1, 512}, {511, 512}, {512, 512}, {513, 1024},
		{MiB, MiB}, {MiB - 1, MiB}, {MiB + 1, 2 * MiB}, {2 * MiB, 2 * MiB},
		{3 * MiB, 4 * MiB}, {5000000, 6 * MiB}, {512*MiB - 1, 512 * MiB}, {1<<63 - 1, 0},
	} {
		assert.Equal(t, c.want, gmlake.RoundSize(c.size), "RoundSize(%d)", c.size)
	}
}

// op is one step of a rule's script: alloc id of size bytes, free id, or
// release (id < 0, size 0).
type op struct {
	id   int
	size int64
}

func alloc(id int, size int64) op { return op{id, size} }
func free(id int) op              { return op{id, 0} }

var release = op{-1, 0}

// after is what a rule expects once its script ran: the device's calls,
// and the last block's address relative to others (same: the same address
// as block same; 0: not checked).
type after struct {
	creates, mallocs, maps, reserves int64
	used                             int64 // bytes the device holds
	freeTotal, freeLargest           int64
	lastSize                         int64
	sameAddr                         int // the last block has the address block sameAddr had, if not 0
	ranges                           int // reserved ranges, if not 0
}

// TestRules runs each rule's script on a fresh allocator and device.
func TestRules(t *testing.T) {
	def := gmlake.DefaultConfig()
	stitch := def
	stitch.FragLimit = 0
	reuse12 := stitch
	reuse12.ReuseLimit = 1.2
	level1 := stitch
	level1.DefragLevel = 1
	gc := stitch
	gc.AutoGC = 20 * MiB
	// two free pBlocks of 14 and 12 MiB, in segments of their own
	twoFree := []op{alloc(1, 12*MiB), alloc(2, 14*MiB), free(1), free(2)}
	with := func(ops ...op) []op { return append(append([]op{}, twoFree...), ops...) }
	for _, c := range []struct {
		name     string
		c        gmlake.Config
		capacity int64
		noVM     bool
		ops      []op
		want     after
	}{
		{"small requests take 2 MiB segments from Malloc", def, GiB, false,
			[]op{alloc(1, 100)},
			after{mallocs: 1, used: 2 * MiB, freeTotal: 2*MiB - 512, freeLargest: 2*MiB - 512, lastSize: 512}},
		{"requests under 10 MiB take 20 MiB of 2 MiB chunks, split at 2 MiB", def, GiB, false,
			[]op{alloc(1, 3*MiB)},
			after{creates: 10, maps: 10, reserves: 1, used: 20 * MiB, freeTotal: 16 * MiB, freeLargest: 16 * MiB, lastSize: 4 * MiB}},
		{"larger requests take their size rounded to 2 MiB", def, GiB, false,
			[]op{alloc(1, 12*MiB+1)},
			after{creates: 7, maps: 7, reserves: 1, used: 14 * MiB, lastSize: 14 * MiB}},
		{"the best free pBlock first", stitch, GiB, false,
			with(alloc(3, 13*MiB)),
			after{creates: 13, maps: 13, reserves: 2, used: 26 * MiB, freeTotal: 12 * MiB, freeLargest: 12 * MiB, lastSize: 14 * MiB, sameAddr: 2}},
		{"no block fits: stitch the largest free pBlocks, split the last", stitch, GiB, false,
			with(alloc(3, 20*MiB)),
			after{creates: 13, maps: 13 + 10, reserves: 3, used: 26 * MiB, freeTotal: 6 * MiB, freeLargest: 6 * MiB, lastSize: 20 * MiB}},
		{"below frag_limit: a new segment, as PyTorch", def, GiB, false,
			with(alloc(3, 20*MiB)),
			after{creates: 23, maps: 23, reserves: 3, used: 46 * MiB, freeTotal: 26 * MiB, freeLargest: 14 * MiB, lastSize: 20 * MiB}},
		{"not enough free pBlocks: a new segment", stitch, GiB, false,
			with(alloc(3, 28*MiB)),
			after{creates: 27, maps: 27, reserves: 3, used: 54 * MiB, freeTotal: 26 * MiB, freeLargest: 14 * MiB, lastSize: 28 * MiB}},
		{"one free pBlock is not stitched", stitch, GiB, false,
			[]op{alloc(1, 12*MiB), free(1), alloc(2, 14*MiB)},
			after{creates: 13, maps: 13, reserves: 2, used: 26 * MiB, freeTotal: 12 * MiB, freeLargest: 12 * MiB, lastSize: 14 * MiB}},
		{"a free sBlock is reused whole", stitch, GiB, false,
			with(alloc(3, 20*MiB), free(3), alloc(4, 20*MiB)),
			after{creates: 13, maps: 23, reserves: 3, used: 26 * MiB, freeTotal: 6 * MiB, freeLargest: 6 * MiB, lastSize: 20 * MiB, sameAddr: 3}},
		{"a free sBlock within reuse_limit serves a smaller request from its first chunks", stitch, GiB, false,
			with(alloc(3, 20*MiB), free(3), alloc(4, 16*MiB)),
			after{creates: 13, maps: 23, reserves: 3, used: 26 * MiB, freeTotal: 10 * MiB, freeLargest: 10 * MiB, lastSize: 16 * MiB, sameAddr: 3}},
		{"a free sBlock beyond reuse_limit is not reused: stitch anew", reuse12, GiB, false,
			with(alloc(3, 20*MiB), free(3), alloc(4, 16*MiB)),
			after{creates: 13, maps: 23 + 8, reserves: 4, used: 26 * MiB, freeTotal: 10 * MiB, freeLargest: 10 * MiB, lastSize: 16 * MiB}},
		{"an sBlock whose chunks are in use is not reusable", stitch, GiB, false,
			with(alloc(3, 20*MiB), free(3), alloc(4, 12*MiB), alloc(5, 20*MiB)),
			after{creates: 23, maps: 33, reserves: 4, used: 46 * MiB, freeTotal: 14 * MiB, freeLargest: 14 * MiB, lastSize: 20 * MiB}},
		{"freeing the sBlock frees its pBlocks, merged", stitch, GiB, false,
			with(alloc(3, 20*MiB), free(3)),
			after{creates: 13, maps: 23, reserves: 3, used: 26 * MiB, freeTotal: 26 * MiB, freeLargest: 20 * MiB}},
		{"defrag_level=1: allocate first while the device has room", level1, GiB, false,
			with(alloc(3, 20*MiB)),
			after{creates: 23, maps: 23, reserves: 3, used: 46 * MiB, freeTotal: 26 * MiB, freeLargest: 14 * MiB, lastSize: 20 * MiB}},
		{"defrag_level=1: stitch once the device refuses", level1, 40 * MiB, false,
			// 7 chunks are made before the device refuses the 8th, and
			// given back.
			with(alloc(3, 20*MiB)),
			after{creates: 20, maps: 30, reserves: 4, used: 26 * MiB, freeTotal: 6 * MiB, freeLargest: 6 * MiB, lastSize: 20 * MiB, ranges: 3}},
		{"auto_gc: beyond it the sBlocks not live are collected", gc, GiB, false,
			with(alloc(3, 20*MiB), free(3), alloc(4, 2*MiB), alloc(5, 22*MiB)),
			after{creates: 13, maps: 23 + 11, reserves: 4, used: 26 * MiB, freeTotal: 2 * MiB, freeLargest: 2 * MiB, lastSize: 22 * MiB, ranges: 3}},
		{"auto_gc not reached: the sBlocks stay", stitch, GiB, false,
			with(alloc(3, 20*MiB), free(3), alloc(4, 2*MiB), alloc(5, 22*MiB)),
			after{creates: 13, maps: 23 + 11, reserves: 4, used: 26 * MiB, freeTotal: 2 * MiB, freeLargest: 2 * MiB, lastSize: 22 * MiB, ranges: 4}},
		{"release returns everything, sBlocks included", stitch, GiB, false,
			with(alloc(3, 20*MiB), free(3), release),
			after{creates: 13, maps: 23, reserves: 3}},
		{"release collects an sBlock on a released segment", stitch, GiB, false,
			with(alloc(3, 20*MiB), free(3), alloc(4, 14*MiB), release),
			after{creates: 13, maps: 23, reserves: 3, used: 14 * MiB, ranges: 1}},
		{"release unmaps the chunks a live sBlock does not use", stitch, GiB, false,
			// sBlock 4 of A, B and C; block 5 uses A and B; C is released.
			[]op{alloc(1, 14*MiB), alloc(2, 12*MiB), alloc(3, 10*MiB), free(1), free(2), free(3),
				alloc(4, 36*MiB), free(4), alloc(5, 26*MiB), release},
			after{creates: 18, maps: 36, reserves: 4, used: 26 * MiB, ranges: 3}},
		{"without virtual memory: large segments from Malloc, no stitching", stitch, GiB, true,
			with(alloc(3, 20*MiB)),
			after{mallocs: 3, used: 46 * MiB, freeTotal: 26 * MiB, freeLargest: 14 * MiB, lastSize: 20 * MiB}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := strategytest.NewDevice(c.capacity)
			var b gpualloc.Backend = dev
			if c.noVM {
				b = plain{dev}
			}
			a, err := gmlake.New(b, c.c)
			require.NoError(t, err)
			blocks := map[int]gpualloc.Block{}
			addrs := map[int]uint64{}
			var last gpualloc.Block
			for _, o := range c.ops {
				switch {
				case o.id < 0:
					require.NoError(t, a.ReleaseAll())
				case o.size == 0:
					require.NoError(t, a.Free(blocks[o.id]))
					delete(blocks, o.id)
				default:
					blk, err := a.Alloc(o.size)
					require.NoError(t, err, "alloc %d", o.id)
					require.True(t, dev.Holds(blk.Addr, blk.Size), "block %d in mapped memory", o.id)
					blocks[o.id], addrs[o.id], last = blk, blk.Addr, blk
				}
			}
			require.NoError(t, dev.Err())
			st := dev.Stats()
			largest, total := a.FreeSpace()
			got := after{creates: st.Creates, mallocs: st.Mallocs, maps: st.Maps, reserves: st.Reserves, used: st.Used,
				freeTotal: total, freeLargest: largest, sameAddr: c.want.sameAddr}
			if c.want.ranges != 0 {
				got.ranges = st.Ranges
			}
			if c.ops[len(c.ops)-1].size > 0 {
				got.lastSize = last.Size
			}
			assert.Equal(t, c.want, got)
			if c.want.sameAddr != 0 {
				assert.Equal(t, addrs[c.want.sameAddr], last.Addr, "the last block's address")
			}
			for _, blk := range blocks {
				require.NoError(t, a.Free(blk))
			}
			require.NoError(t, a.ReleaseAll())
			st = dev.Stats()
			assert.Zero(t, st.Used, "everything freed and released")
			assert.Zero(t, st.Ranges, "no range left reserved")
			require.NoError(t, dev.Err())
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		spec, want string
	}{
		{"gmlake:frag_limit=-1", "frag_limit"},
		{"gmlake:reuse_limit=0", "reuse_limit"},
		{"gmlake:reuse_limit=x", "reuse_limit"},
		{"gmlake:reuse_limit=+Inf", "reuse_limit"},
		{"gmlake:defrag_level=3", "defrag_level"},
		{"gmlake:defrag_level=a", "defrag_level"},
		{"gmlake:auto_gc=0", "auto_gc"},
	} {
		sp, err := gpualloc.ParseSpec(c.spec)
		require.NoError(t, err)
		p, err := gpualloc.Resolve(sp, nil)
		if err == nil {
			_, err = p.Open(strategytest.NewDevice(GiB))
		}
		require.Error(t, err, c.spec)
		assert.Contains(t, err.Error(), c.want, c.spec)
	}
	a, err := gmlake.New(strategytest.NewDevice(GiB), gmlake.DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "gmlake:frag_limit=536870912,reuse_limit=10,defrag_level=0,auto_gc=1073741824000", a.Spec())
	assert.True(t, a.Stitching())
}

// TestNewValidates checks New on configurations built directly, which the
// registry's parsing (TestConfigErrors) cannot all reach.
func TestNewValidates(t *testing.T) {
	s := alloctest.Strategy[gmlake.Config, *gmlake.Allocator]{Name: "gmlake", New: gmlake.New, Default: gmlake.DefaultConfig()}
	s.NewValidates(t, []alloctest.ConfigCase[gmlake.Config]{
		{Config: gmlake.Config{ReuseLimit: 1.5, DefragLevel: 2, AutoGC: 1}},
		{Config: gmlake.Config{FragLimit: -1, ReuseLimit: 10, AutoGC: 1}, Err: "gmlake: frag_limit=-1: must not be negative"},
		{Config: gmlake.Config{ReuseLimit: 0, AutoGC: 1}, Err: "gmlake: reuse_limit=0: must be a positive number"},
		{Config: gmlake.Config{ReuseLimit: 10, DefragLevel: 3, AutoGC: 1}, Err: "gmlake: defrag_level=3: must be 0, 1 or 2"},
		{Config: gmlake.Config{ReuseLimit: 10}, Err: "gmlake: auto_gc=0: must be positive"},
	})
}
