package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// somasProblem returns about n buffers of the shape of a graph compiler's
// lifetimes for one training step with activation recomputation, as
// MindSpore's SOMAS sees them: long-lived buffers (activations saved from
// a layer's forward to its backward, gradients held to the end of the
// step, recomputed activations) interleaved with many short-lived ones
// (temporaries consumed by the next one to three operators, workspaces),
// sizes spread over three orders of magnitude and not multiples of one
// another. Saved activations of the micro-batches in flight cross rather
// than nest, and noise on their frees breaks the stack order of a pure
// forward-backward: the live bytes reach nearly their peak at many times,
// each with different buffers, which is what keeps greedy placements a
// few percent above the peak.
func somasProblem(n int, seed uint64) Problem {
	rng := rand.New(rand.NewPCG(seed, 0x50a5))
	var (
		p Problem
		t int64
	)
	add := func(lo, hi, size int64) {
		p.Buffers = append(p.Buffers, Buffer{ID: fmt.Sprint(len(p.Buffers)), Lower: lo, Upper: hi, Size: size})
	}
	// size draws a size log-uniformly in [lo, hi) bytes, a multiple of 512.
	size := func(lo, hi float64) int64 {
		s := int64(math.Exp(math.Log(lo)+rng.Float64()*(math.Log(hi)-math.Log(lo)))) &^ 511
		return max(s, 512)
	}
	temp := func() { add(t, t+1+rng.Int64N(3), size(64<<10, 48<<20)) }
	const inFlight = 2
	layers := 24
	type saved struct{ lo, size int64 }
	var queue [][][]saved
	forward := func() [][]saved {
		st := make([][]saved, layers)
		for l := range layers {
			for range 3 + rng.IntN(3) {
				st[l] = append(st[l], saved{t, size(1<<20, 96<<20)})
				for range rng.IntN(4) {
					temp()
				}
				t++
			}
		}
		return st
	}
	backward := func(st [][]saved) {
		for l := layers - 1; l >= 0; l-- {
			// Recomputed activations of the layer, held through its
			// backward.
			var rec []saved
			for range 1 + rng.IntN(3) {
				rec = append(rec, saved{t, size(1<<20, 64<<20)})
				temp()
				t++
			}
			s := st[l]
			for i := len(s) - 1; i >= 0; i-- {
				for range 1 + rng.IntN(3) {
					temp()
				}
				t++
				add(s[i].lo, t+rng.Int64N(4), s[i].size)
			}
			for _, r := range rec {
				add(r.lo, t+1+rng.Int64N(3), r.size)
			}
			t++
		}
	}
	for len(p.Buffers) < n {
		queue = append(queue, forward())
		if len(queue) == inFlight {
			backward(queue[0])
			queue = queue[1:]
			// A few gradient buckets, held to the end of the step.
			for range 2 {
				add(t, -1, size(4<<20, 32<<20))
			}
		}
	}
	for _, st := range queue {
		backward(st)
	}
	for i := range p.Buffers {
		if p.Buffers[i].Upper < 0 {
			p.Buffers[i].Upper = t + 1
		}
	}
	return p
}
