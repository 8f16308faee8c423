package planned

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRegionPool checks a dropped plan's part 1 as a best-fit pool: the
// gaps between live blocks, the smallest that holds a request taken at its
// low end, and a freed block merged with the gaps on either side.
func TestRegionPool(t *testing.T) {
	r := newRegion()
	r.layout(4096, 4096+10*align)
	r.parts[0] = part{base: 1 << 20, size: 4096}
	r.parts[1] = part{base: 1 << 30, size: 10 * align}
	at := func(i int64) int64 { return 4096 + i*align }
	for _, s := range []span{{off: 0, size: 4096, req: 4096}, {off: at(2), size: align, req: 1}, {off: at(5), size: 2 * align, req: 1}} {
		r.insert(s)
	}
	r.pool()
	gaps := func() (g []gap) {
		r.gaps.Ascend(func(x gap) bool { g = append(g, x); return true })
		return g
	}
	require.Equal(t, []gap{{2 * align, at(0)}, {2 * align, at(3)}, {3 * align, at(7)}}, gaps())
	s, ok := r.take(align + 1) // two units: the lowest of the smallest gaps
	require.True(t, ok)
	require.Equal(t, span{off: at(0), size: 2 * align, req: align + 1, k: gapBlock}, s)
	_, ok = r.take(4 * align)
	require.False(t, ok, "no gap of four units")
	require.Equal(t, uint64(1<<30)+uint64(2*align), r.addr(at(2)))
	require.True(t, r.remove(span{off: at(5), size: 2 * align, req: 1}))
	require.Equal(t, []gap{{7 * align, at(3)}}, gaps(), "merged with both sides")
	require.False(t, r.remove(span{off: at(5), size: 2 * align, req: 1}), "twice")
	require.True(t, r.remove(s))
	require.True(t, r.remove(span{off: at(2), size: align, req: 1}))
	require.Equal(t, []gap{{10 * align, at(0)}}, gaps())
	require.Equal(t, 1, r.parts[0].live)
	require.Zero(t, r.parts[1].live)
}
