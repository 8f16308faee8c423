package blocktable

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

func TestTable(t *testing.T) {
	var tb Table[int64]
	assert.Nil(t, tb.Get(0, 0), "a zero handle is never live")
	h1 := tb.Put(0x1000, 10)
	h2 := tb.Put(0x2000, 20)
	assert.Equal(t, uint64(1), h1)
	assert.Equal(t, uint64(2), h2)
	require.NotNil(t, tb.Get(h1, 0x1000))
	assert.Equal(t, int64(10), *tb.Get(h1, 0x1000))
	assert.Nil(t, tb.Get(h1, 0x2000), "wrong address")
	assert.Nil(t, tb.Get(3, 0x1000), "handle never handed out")
	assert.Equal(t, 2, tb.Len())
	tb.Delete(h1)
	assert.Nil(t, tb.Get(h1, 0x1000), "deleted")
	assert.Equal(t, 1, tb.Len())
	h3 := tb.Put(0x3000, 30)
	assert.Equal(t, h1, h3, "records are reused")
	assert.Nil(t, tb.Get(h3, 0x1000), "a reused handle does not find the old block")
	assert.Equal(t, int64(30), *tb.Get(h3, 0x3000))
}

func TestTableRandom(t *testing.T) {
	var tb Table[uint64]
	live := map[uint64]uint64{} // handle -> addr
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		if len(live) > 0 && rng.IntN(2) == 0 {
			for h, addr := range live {
				require.NotNil(t, tb.Get(h, addr))
				require.Equal(t, addr, *tb.Get(h, addr))
				tb.Delete(h)
				delete(live, h)
				break
			}
			continue
		}
		addr := uint64(i) << 9
		h := tb.Put(addr, addr)
		_, dup := live[h]
		require.False(t, dup, "handle %d handed out twice", h)
		live[h] = addr
		require.Equal(t, len(live), tb.Len())
	}
}

func TestTableAllocatesNothingInSteadyState(t *testing.T) {
	var tb Table[int64]
	for i := range 100 {
		tb.Put(uint64(i), 0)
	}
	for h := uint64(1); h <= 100; h++ {
		tb.Delete(h)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		h := tb.Put(42, 1)
		tb.Delete(h)
	})
	assert.Zero(t, allocs)
}

func TestFreeErrors(t *testing.T) {
	b := gpualloc.Block{Addr: 0x1000, Size: 512, Requested: 100, Handle: 7}
	err := NotLive("bestfit", b)
	assert.EqualError(t, err, "bestfit: free of 0x1000 (512 bytes): no live block there: invalid free")
	assert.ErrorIs(t, err, gpualloc.ErrInvalidFree)
	err = Mismatch("bfc", b, 1024, 1000)
	assert.EqualError(t, err, "bfc: free of 0x1000 with Size 512, Requested 100: the live block there has Size 1024, Requested 1000: invalid free")
	assert.ErrorIs(t, err, gpualloc.ErrInvalidFree)
}
