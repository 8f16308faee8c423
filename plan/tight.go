package plan

import (
	"math/rand/v2"
	"strconv"
)

// Tight returns a problem of n buffers whose optimum is known: the
// rectangle of height capacity over the time [0, horizon) cut into n
// rectangles that tile it exactly, each a buffer, in a shuffled order. At
// every time the live buffers add up to capacity, so the lower bound and
// the optimum are both capacity: the tight instances of MiniMalloc's
// "challenging" benchmarks, where lower bound = capacity.
//
// The cuts are guillotine cuts: n-1 times the largest rectangle (by area,
// in proportion to the whole) is cut in two, across time or across memory
// at random (the longer side more often), at a uniform point. It needs
// capacity and horizon of at least n so that every cut is possible; it
// panics otherwise. The same rng state gives the same problem.
func Tight(n int, capacity, horizon int64, rng *rand.Rand) Problem {
	if n < 1 || capacity < int64(n) || horizon < int64(n) {
		panic("plan: Tight needs n >= 1 and capacity, horizon >= n")
	}
	type rect struct{ t0, t1, s0, s1 int64 }
	// rel is a rectangle's area relative to the whole, for choosing.
	rel := func(r rect) float64 {
		return float64(r.t1-r.t0) / float64(horizon) * float64(r.s1-r.s0) / float64(capacity)
	}
	rects := []rect{{0, horizon, 0, capacity}}
	for len(rects) < n {
		// The largest rectangle that can be cut.
		bi := -1
		for i, r := range rects {
			if (r.t1-r.t0 > 1 || r.s1-r.s0 > 1) && (bi < 0 || rel(r) > rel(rects[bi])) {
				bi = i
			}
		}
		r := rects[bi]
		w := float64(r.t1-r.t0) / float64(horizon)
		h := float64(r.s1-r.s0) / float64(capacity)
		acrossTime := r.t1-r.t0 > 1 && (r.s1-r.s0 == 1 || rng.Float64()*(w+h) < w)
		a, b := r, r
		if acrossTime {
			cut := r.t0 + 1 + rng.Int64N(r.t1-r.t0-1)
			a.t1, b.t0 = cut, cut
		} else {
			cut := r.s0 + 1 + rng.Int64N(r.s1-r.s0-1)
			a.s1, b.s0 = cut, cut
		}
		rects[bi] = a
		rects = append(rects, b)
	}
	rng.Shuffle(len(rects), func(i, j int) { rects[i], rects[j] = rects[j], rects[i] })
	p := Problem{Buffers: make([]Buffer, n)}
	for i, r := range rects {
		p.Buffers[i] = Buffer{ID: "b" + strconv.Itoa(i), Lower: r.t0, Upper: r.t1, Size: r.s1 - r.s0}
	}
	return p
}
