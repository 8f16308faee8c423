package plan

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeakOrder: on a problem whose peak (at time 2: buffers 1, 4, 5 and
// 6, 14 bytes) every other order breaks up, placing first the buffers that
// end before it, the order of the peak places it at the lower bound, and
// Solve's heuristics alone find it.
func TestPeakOrder(t *testing.T) {
	p := Problem{Buffers: []Buffer{
		buf("0", 0, 1, 1), buf("1", 1, 3, 4), buf("2", 0, 2, 5), buf("3", 0, 1, 4),
		buf("4", 2, 3, 4), buf("5", 1, 3, 3), buf("6", 2, 3, 3),
	}}
	require.Equal(t, int64(14), LowerBound(p.Buffers))
	require.Equal(t, int64(2), peakTime(p.Buffers))
	pl := newPlacer(p.Buffers)
	for _, o := range orders {
		for f := range fitNames {
			off := make([]int64, len(p.Buffers))
			h, err := pl.run(context.Background(), o, f, off)
			require.NoError(t, err)
			require.NoError(t, Check(p, (&Solution{Offsets: off}).Placements(p), 0))
			if o.name == "peak" {
				assert.Equal(t, int64(14), h, "peak/%s", fitNames[f])
			} else {
				assert.Greater(t, h, int64(14), "%s/%s", o.name, fitNames[f])
			}
		}
	}
	sol, err := Solve(context.Background(), p, Options{NoSearch: true})
	require.NoError(t, err)
	assert.Equal(t, int64(14), sol.Height)
	assert.True(t, sol.Optimal)
	assert.Equal(t, "peak/firstfit", sol.Method)
}

// TestPeakTime: the first time at which the live bytes are at their peak,
// the ends of lifetimes coming before the starts at the same time.
func TestPeakTime(t *testing.T) {
	assert.Equal(t, int64(0), peakTime(nil))
	assert.Equal(t, int64(3), peakTime([]Buffer{buf("a", 0, 3, 2), buf("b", 3, 5, 2), buf("c", 3, 4, 1)}))
	assert.Equal(t, int64(1), peakTime([]Buffer{buf("a", 0, 2, 2), buf("b", 1, 5, 2), buf("c", 4, 6, 2)}))
}
