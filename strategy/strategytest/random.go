package strategytest

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/gpualloc/gpualloc"
)

// randomTrace runs Options.Ops random operations on h and then frees
// everything. The number of live blocks drifts towards a target that changes
// every few hundred operations, so the trace both fills the device (and runs
// out of memory) and empties it. Mixed in are ReleaseAll calls, invalid
// frees and sizes, and device mallocs that fail with room to spare.
func randomTrace(h *harness, seed uint64) error {
	err := runRandom(h, seed)
	if err != nil {
		return fmt.Errorf("seed %d: %w\n(to rerun only this trace, set Options.Seeds to []uint64{%d})", seed, err, seed)
	}
	return nil
}

func runRandom(h *harness, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0x6770_7561_6c6c_6f63))
	maxSize := h.opt.MaxSize
	// A few sizes recur, as a model's tensor shapes do, so caches get hits.
	hot := make([]int64, 6)
	for i := range hot {
		hot[i] = randSize(r, maxSize)
	}
	var freed []gpualloc.Block // recent frees, for double frees
	target := 1
	for i := range h.opt.Ops {
		if i%250 == 0 {
			target = 1 + r.IntN(256)
		}
		pAlloc := 0.3
		if len(h.live) < target {
			pAlloc = 0.75
		}
		var err error
		switch x := r.Float64(); {
		case x < 0.01:
			if h.releaser != nil {
				err = h.release()
			}
		case x < 0.02:
			err = randomInvalidFree(h, r, freed)
		case x < 0.025:
			err = h.allocInvalid(-r.Int64N(3))
		case x < 0.03:
			// The device refuses the next mallocs whatever its free
			// memory, as fragmentation or another process can make it.
			h.dev.FailMallocs(1 + r.IntN(2))
		case len(h.live) == 0 || x < pAlloc:
			size := randSize(r, maxSize)
			if r.IntN(4) == 0 {
				size = hot[r.IntN(len(hot))]
			}
			var stream uint64
			if h.streams != nil && r.IntN(3) == 0 {
				stream = 1 + r.Uint64N(3)
			}
			_, _, err = h.alloc(size, stream)
		default:
			b := h.live[r.IntN(len(h.live))]
			err = h.free(b)
			if len(freed) == 16 {
				freed = freed[1:]
			}
			freed = append(freed, b)
		}
		if err != nil {
			return err
		}
	}
	h.dev.FailMallocs(0)
	return h.drain()
}

// randomInvalidFree frees a block that is not live: one freed before (unless
// an identical block is live again), an address inside a live block, or an
// address never handed out.
func randomInvalidFree(h *harness, r *rand.Rand, freed []gpualloc.Block) error {
	switch r.IntN(3) {
	case 0:
		if len(freed) > 0 {
			b := freed[r.IntN(len(freed))]
			if _, live := h.index(b); !live {
				return h.freeInvalid(b, "a block already freed")
			}
		}
	case 1:
		if len(h.live) > 0 {
			b := h.live[r.IntN(len(h.live))]
			b.Addr++
			return h.freeInvalid(b, "an address inside a live block")
		}
	}
	return h.freeInvalid(gpualloc.Block{Addr: 0x1000, Size: 4096, Requested: 4096}, "a block never allocated")
}

// randSize draws a request size in [1, maxSize]: half log-uniform, a fifth
// powers of two and their neighbours, the rest small.
func randSize(r *rand.Rand, maxSize int64) int64 {
	var s int64
	switch k := r.IntN(10); {
	case k < 5:
		s = int64(math.Exp(r.Float64() * math.Log(float64(maxSize))))
	case k < 7:
		s = int64(1)<<r.IntN(bits.Len64(uint64(maxSize))) + r.Int64N(3) - 1
	default:
		s = 1 + r.Int64N(min(maxSize, 8192))
	}
	return min(max(s, 1), maxSize)
}
