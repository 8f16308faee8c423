package planned

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPeriod checks step detection on sequences of request sizes: the
// longest recurring suffix, its shortest period, at least min_step long
// and seen twice.
func TestPeriod(t *testing.T) {
	rep := func(prefix []int64, step []int64, n int, tail ...int64) []int64 {
		s := append([]int64(nil), prefix...)
		for range n {
			s = append(s, step...)
		}
		return append(s, tail...)
	}
	layer := []int64{3, 1, 4, 1}
	step := append(append(append([]int64{9}, layer...), layer...), 7) // layers recur inside the step
	for _, tc := range []struct {
		name     string
		sizes    []int64
		minStep  int
		start, p int
		ok       bool
	}{
		{"steps after a prefix", rep([]int64{5, 6}, step, 4), 4, 2, 10, true},
		{"a partial step at the end", rep([]int64{5, 6}, step, 3, 9, 3, 1), 4, 2, 10, true},
		{"the first step differs", rep(append([]int64{5}, 2, 3, 1, 4, 1, 3, 1, 4, 1, 7), step, 3), 4, 2, 10, true},
		{"min_step rules out a shorter period", rep(nil, []int64{1, 2}, 6), 3, 0, 4, true},
		{"seen once is no step", rep([]int64{5}, step, 1), 4, 0, 0, false},
		{"nothing recurs", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 0, 0, false},
		{"too short for min_step", rep(nil, step, 3), 16, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder()
			for i, s := range tc.sizes {
				r.alloc(uint64(i), s)
			}
			start, p, ok := r.period(tc.minStep)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Equal(t, [2]int{tc.start, tc.p}, [2]int{start, p})
			}
		})
	}
}
