package pytorch_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
)

const es = "expandable_segments:True"

func TestExpandableGrowth(t *testing.T) {
	a, dev := newAlloc(t, es, 8*GiB)
	// Large pool: 20 MiB pages; the range grows at its end.
	b1 := alloc(t, a, 15*MiB, 0)
	assert.Equal(t, int64(20*MiB), dev.Stats().Used)
	b2 := alloc(t, a, 10*MiB, 0) // 5 MiB free at the end, grown by one page
	assert.Equal(t, b1.End(), b2.Addr)
	assert.Equal(t, int64(40*MiB), dev.Stats().Used)
	assert.Equal(t, int64(2), dev.Stats().Mallocs)
	b3 := alloc(t, a, 50*MiB, 0) // 15 MiB free, 35 more: two pages
	assert.Equal(t, b2.End(), b3.Addr)
	assert.Equal(t, int64(80*MiB), dev.Stats().Used)
	st := a.Stats()
	assert.Equal(t, int64(80*MiB), st.Reserved)
	assert.Equal(t, int64(80*MiB), a.MemoryStats().ReservedBytes.Current)
	assert.Equal(t, int64(4), st.DeviceMallocs)
	// Small pool: 2 MiB pages, a range of its own.
	s1 := alloc(t, a, 600*KiB, 0)
	s2 := alloc(t, a, 400*KiB, 0)
	assert.Equal(t, s1.End(), s2.Addr)
	assert.Equal(t, int64(82*MiB), dev.Stats().Used)
	s3 := alloc(t, a, 1000*KiB, 0) // fits in the first 2 MiB page
	assert.Equal(t, s2.End(), s3.Addr)
	assert.Equal(t, int64(82*MiB), dev.Stats().Used)
	s4 := alloc(t, a, 1000*KiB, 0) // grows the small range by one page
	assert.Equal(t, s3.End(), s4.Addr)
	assert.Equal(t, int64(84*MiB), dev.Stats().Used)
	assert.False(t, s1.Addr >= b1.Addr && s1.Addr < b1.Addr+uint64(8*GiB))
	for _, b := range []gpualloc.Block{b1, b2, b3, s1, s2, s3, s4} {
		require.NoError(t, a.Free(b))
	}
	require.NoError(t, a.ReleaseAll())
	assert.Equal(t, int64(0), dev.Stats().Used)
	assert.Equal(t, int64(0), a.Stats().Reserved)
}

func TestExpandableLowestFit(t *testing.T) {
	a, dev := newAlloc(t, es, 8*GiB)
	b1 := alloc(t, a, 20*MiB, 0)
	b2 := alloc(t, a, 20*MiB, 0)
	b3 := alloc(t, a, 20*MiB, 0)
	require.NoError(t, a.Free(b1))
	require.NoError(t, a.Free(b2))
	require.NoError(t, a.ReleaseAll()) // unmaps the first two pages
	assert.Equal(t, int64(20*MiB), dev.Stats().Used)
	// A 30 MiB request maps at the lowest address that fits: the hole.
	b4 := alloc(t, a, 30*MiB, 0)
	assert.Equal(t, b1.Addr, b4.Addr)
	assert.Equal(t, int64(60*MiB), dev.Stats().Used)
	// 10 MiB are free after b4, in the second page.
	b5 := alloc(t, a, 10*MiB, 0)
	assert.Equal(t, b4.End(), b5.Addr)
	assert.Equal(t, int64(60*MiB), dev.Stats().Used)
	// A request larger than the hole goes after b3.
	require.NoError(t, a.Free(b4))
	require.NoError(t, a.Free(b5))
	require.NoError(t, a.ReleaseAll())
	b6 := alloc(t, a, 50*MiB, 0)
	assert.Equal(t, b3.End(), b6.Addr, "the 40 MiB hole is too small and b3 is live: 50 MiB go after b3")
}

func TestExpandableReleasePartial(t *testing.T) {
	a, dev := newAlloc(t, es, 8*GiB)
	b1 := alloc(t, a, 30*MiB, 0) // pages 0 and 1
	b2 := alloc(t, a, 5*MiB, 0)  // in page 1
	require.NoError(t, a.Free(b1))
	require.NoError(t, a.ReleaseAll()) // page 0 wholly free, page 1 not
	assert.Equal(t, int64(20*MiB), dev.Stats().Used)
	assert.Equal(t, int64(20*MiB), a.Stats().Reserved)
	largest, total := a.FreeSpace()
	assert.Equal(t, int64(15*MiB), total)
	assert.Equal(t, int64(10*MiB), largest)
	require.NoError(t, a.Free(b2))
	require.NoError(t, a.ReleaseAll())
	assert.Equal(t, int64(0), dev.Stats().Used)
	assert.Equal(t, dev.Stats().Mallocs, dev.Stats().Frees)
}

func TestExpandableStreams(t *testing.T) {
	a, dev := newAlloc(t, es, 8*GiB)
	b0 := alloc(t, a, 5*MiB, 0)
	b1 := alloc(t, a, 5*MiB, 1) // stream 1 has a range of its own
	assert.Equal(t, int64(40*MiB), dev.Stats().Used)
	assert.NotEqual(t, b0.End(), b1.Addr)
	require.NoError(t, a.Free(b0))
	b2 := alloc(t, a, 5*MiB, 1) // from stream 1's page, not stream 0's
	assert.Equal(t, b1.End(), b2.Addr)
	assert.Equal(t, int64(40*MiB), dev.Stats().Used)
}

func TestExpandableOOM(t *testing.T) {
	a, dev := newAlloc(t, es, 100*MiB)
	b1 := alloc(t, a, 70*MiB, 0) // 4 pages: 80 MiB
	_, err := a.Alloc(35 * MiB)  // 25 MiB more than the 10 MiB free: 2 pages, the second refused
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.Equal(t, int64(80*MiB), dev.Stats().Used, "the page mapped before the refusal is given back")
	assert.Equal(t, int64(1), a.MemoryStats().NumOOMs.Current)
	b2 := alloc(t, a, 25*MiB, 0) // one page more is fine
	assert.Equal(t, b1.End(), b2.Addr)
	require.NoError(t, a.Free(b1))
	require.NoError(t, a.Free(b2))
	require.NoError(t, a.ReleaseAll())
	assert.Equal(t, int64(0), dev.Stats().Used)
}

func TestExpandableSplit(t *testing.T) {
	a, _ := newAlloc(t, es, 8*GiB)
	// In the large pool too a remainder of 512 bytes or more is split off.
	b1 := alloc(t, a, 20*MiB-512, 0)
	b2 := alloc(t, a, 2*MiB, 0)
	assert.Equal(t, int64(20*MiB-512), b1.Size)
	assert.Equal(t, b1.End(), b2.Addr)
}

// TestExpandableRandom replays random traces and checks the invariants
// strategytest checks, except that blocks lie in backend memory: with
// expandable segments block addresses are virtual.
func TestExpandableRandom(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		for _, conf := range []string{es, es + ",max_split_size_mb:40", es + ",garbage_collection_threshold:0.5,memory_fraction:0.8"} {
			r := rand.New(rand.NewPCG(seed, 7))
			a, dev := newAlloc(t, conf, 256*MiB)
			var live []gpualloc.Block
			var allocated int64
			for op := 0; op < 4000; op++ {
				switch x := r.IntN(100); {
				case x < 55 || len(live) == 0:
					size := int64(r.IntN(40*MiB)) + 1
					if r.IntN(2) == 0 {
						size = int64(r.IntN(MiB)) + 1
					}
					b, err := a.AllocStream(size, uint64(r.IntN(2)))
					if err != nil {
						require.True(t, errors.Is(err, gpualloc.ErrOutOfMemory), "%v", err)
						continue
					}
					for _, o := range live {
						require.False(t, b.Addr < o.End() && o.Addr < b.End(), "overlap %+v %+v", b, o)
					}
					require.Zero(t, b.Addr%512)
					live = append(live, b)
					allocated += b.Size
				case x < 97:
					i := r.IntN(len(live))
					require.NoError(t, a.Free(live[i]))
					allocated -= live[i].Size
					live[i] = live[len(live)-1]
					live = live[:len(live)-1]
				default:
					require.NoError(t, a.ReleaseAll())
				}
				st, ds := a.Stats(), dev.Stats()
				require.Zero(t, ds.InvalidCalls, "%v", dev.Err())
				require.Equal(t, ds.Used, st.Reserved)
				require.Equal(t, ds.Used, a.MemoryStats().ReservedBytes.Current)
				require.Equal(t, ds.Mallocs, st.DeviceMallocs)
				require.Equal(t, ds.Frees, st.DeviceFrees)
				require.Equal(t, allocated, st.Allocated)
				largest, total := a.FreeSpace()
				require.LessOrEqual(t, largest, total)
				require.LessOrEqual(t, total, ds.Used-allocated)
			}
			for _, b := range live {
				require.NoError(t, a.Free(b))
			}
			require.NoError(t, a.ReleaseAll())
			require.Zero(t, dev.Stats().Used, "%s seed %d", conf, seed)
			_, total := a.FreeSpace()
			require.Zero(t, total)
		}
	}
}

var _ = pytorch.DefaultConfig
