package plan

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// staggered is a problem whose optimum, 7, is above its peak of live
// bytes, 6: three long buffers start one after another (sizes 2, 1, 2)
// and every time of [0, 5) is filled up to 6 by one short buffer, which
// needs the memory the long ones leave in one piece. At time 2, where all
// three live, the long ones must be side by side at an end; the one of
// size 1 then lies at an end or between the other two, and either way one
// time of [1, 4) has its free memory cut in two.
func staggered() Problem {
	return Problem{Buffers: []Buffer{
		buf("L0", 0, 3, 2), buf("L1", 1, 4, 1), buf("L2", 2, 5, 2),
		buf("S0", 0, 1, 4), buf("S1", 1, 2, 3), buf("S2", 2, 3, 1), buf("S3", 3, 4, 3), buf("S4", 4, 5, 4),
	}}
}

// filled returns a random problem of staggered's kind: a few long buffers
// over times [0, 5), and at each time one short buffer that fills the
// live bytes up to a height of 4 to 7. Its optimum is often above its
// peak.
func filled(rng *rand.Rand) Problem {
	h := 4 + rng.Int64N(4)
	const T = 5
	var p Problem
	var load [T]int64
	for j := range 3 + rng.IntN(2) {
		lo := rng.Int64N(T - 1)
		hi := lo + 2 + rng.Int64N(T-lo-1)
		size := 1 + rng.Int64N(3)
		fits := true
		for k := lo; k < hi; k++ {
			fits = fits && load[k]+size <= h
		}
		if !fits {
			continue
		}
		for k := lo; k < hi; k++ {
			load[k] += size
		}
		p.Buffers = append(p.Buffers, buf(fmt.Sprint("L", j), lo, hi, size))
	}
	for k := range int64(T) {
		if load[k] < h {
			p.Buffers = append(p.Buffers, buf(fmt.Sprint("S", k), k, k+1, h-load[k]))
		}
	}
	return p
}

func TestProvenBoundAbovePeak(t *testing.T) {
	p := staggered()
	require.Equal(t, int64(6), LowerBound(p.Buffers))
	require.Equal(t, int64(7), bruteForce(p.Buffers))
	for _, w := range []int{1, 2} {
		s := solveChecked(t, p, Options{Workers: w, TimeLimit: time.Minute})
		assert.Equal(t, int64(7), s.Height)
		assert.Equal(t, int64(6), s.LowerBound)
		assert.Equal(t, int64(7), s.ProvenBound, "the search proves 6 infeasible")
		assert.True(t, s.Optimal)
	}
}

// TestProvenBoundNeverAboveOptimum checks the proved bound and Optimal
// against brute force on small random problems, many with their optimum
// above the peak, with time limits from plenty down to almost none: the
// bound is at least the peak and never above the optimum, and Optimal
// says exactly whether the bound meets the height, which then is the
// optimum.
func TestProvenBoundNeverAboveOptimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	abovePeak := 0
	for i := range 400 {
		var p Problem
		switch {
		case i%10 == 0:
			p = variant(staggered(), rng)
		case i%2 == 0:
			p = filled(rng)
		default:
			p = randomProblem(rng, 3+rng.IntN(5), 3+rng.Int64N(6), 1+rng.Int64N(20))
		}
		opt := bruteForce(p.Buffers)
		limit := []time.Duration{time.Minute, time.Millisecond, time.Microsecond}[i%3]
		s := solveChecked(t, p, Options{Workers: 1 + i%2, TimeLimit: limit})
		require.GreaterOrEqual(t, s.ProvenBound, s.LowerBound, "case %d", i)
		require.LessOrEqual(t, s.ProvenBound, opt, "case %d: %+v", i, p)
		require.GreaterOrEqual(t, s.Height, opt, "case %d", i)
		require.Equal(t, s.Height == s.ProvenBound, s.Optimal, "case %d", i)
		if limit == time.Minute {
			require.True(t, s.Optimal, "case %d: %+v", i, p)
		}
		if s.Optimal {
			require.Equal(t, opt, s.Height, "case %d", i)
		}
		if s.ProvenBound > s.LowerBound {
			abovePeak++
		}
	}
	assert.GreaterOrEqual(t, abovePeak, 20, "problems whose proved bound is above the peak")
}

// variant returns p with its buffers shuffled, its times scaled and
// perhaps reversed, and its sizes scaled: the same problem to the search,
// its optimum scaled as its sizes.
func variant(p Problem, rng *rand.Rand) Problem {
	k, m := 1+rng.Int64N(3), 1+rng.Int64N(5)
	var end int64
	for _, b := range p.Buffers {
		end = max(end, b.Upper)
	}
	mirror := rng.IntN(2) == 0
	q := Problem{Buffers: make([]Buffer, len(p.Buffers))}
	for i, b := range p.Buffers {
		if mirror {
			b.Lower, b.Upper = end-b.Upper, end-b.Lower
		}
		q.Buffers[i] = Buffer{ID: b.ID, Lower: k * b.Lower, Upper: k * b.Upper, Size: m * b.Size}
	}
	rng.Shuffle(len(q.Buffers), func(i, j int) { q.Buffers[i], q.Buffers[j] = q.Buffers[j], q.Buffers[i] })
	return q
}

// padded is staggered with its sizes scaled by 10,000 (peak 60,000,
// optimum 70,000), beside 300 buffers of one byte, all live at once at
// other times: with maxSearchPairs lowered, too many pairs for the exact
// search on the whole problem, so only a proof on a window of time can
// raise its bound.
func padded() Problem {
	p := staggered()
	for i := range p.Buffers {
		p.Buffers[i].Size *= 10_000
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range 300 {
		lo := 10 + rng.Int64N(100)
		p.Buffers = append(p.Buffers, buf(fmt.Sprint("P", i), lo, lo+200+rng.Int64N(100), 1))
	}
	return p
}

func TestWindowProofRaisesBound(t *testing.T) {
	p := padded()
	defer func(old int64) { maxSearchPairs = old }(maxSearchPairs)
	maxSearchPairs = 10_000
	require.Equal(t, int64(60_000), LowerBound(p.Buffers))
	require.Greater(t, overlapPairs(p.Buffers), maxSearchPairs, "too large for the search on the whole")
	for _, w := range []int{1, 2} {
		s := solveChecked(t, p, Options{Workers: w, TimeLimit: time.Minute})
		assert.Equal(t, int64(70_000), s.ProvenBound)
		assert.Equal(t, int64(70_000), s.Height)
		assert.True(t, s.Optimal)
	}
}

// TestCapacityWithoutWholeSearch asks padded, too large for the exact
// search on the whole, for a placement within a capacity: the moves find
// one within 70,000 bytes, and a window's proof shows that none is within
// 65,000, though that is above the peak.
func TestCapacityWithoutWholeSearch(t *testing.T) {
	p := padded()
	defer func(old int64) { maxSearchPairs = old }(maxSearchPairs)
	maxSearchPairs = 10_000
	s := solveChecked(t, p, Options{Capacity: 70_000, TimeLimit: time.Minute})
	assert.LessOrEqual(t, s.Height, int64(70_000))
	_, err := Solve(context.Background(), p, Options{Capacity: 65_000, TimeLimit: time.Minute})
	require.ErrorIs(t, err, ErrNoPlacement)
	assert.Contains(t, err.Error(), "proven, none within 65000 bytes")
}
