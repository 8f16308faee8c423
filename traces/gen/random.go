package gen

import (
	"fmt"
	"math"

	"github.com/gpualloc/gpualloc/traces"
)

// checkRandom refuses a number of events whose clock, 1 to 4 µs an event,
// would pass [limit].
func checkRandom(o Options) error {
	if o.Events > limit/4 {
		return fmt.Errorf("gen: events %d: the trace's clock, 1 to 4 µs an event, would pass 2^62 µs; at most %d", o.Events, int64(limit/4))
	}
	return nil
}

// runRandom emits o.Events events: allocations of log-uniform sizes in
// [1, o.MaxSize], each freed at a random later event. An alloc comes with
// probability 1 - live/MaxLive, so about MaxLive/2 allocations are live;
// towards the end only frees come, so that every allocation is freed.
func runRandom(e *emitter, o Options) {
	live := make([]tensor, 0, min(int64(o.MaxLive), o.Events/2+1)) // never more live than allocs
	logMax := math.Log(float64(o.MaxSize) + 1)
	for left := o.Events; left > 0 && e.err == nil; left-- { // a failed write ends it
		n := len(live)
		canAlloc := n < o.MaxLive && left >= int64(n)+2
		if canAlloc && (n == 0 || e.rng.IntN(o.MaxLive) >= n) {
			size := max(int64(math.Exp(e.rng.Float64()*logMax)), 1)
			size = min(size, o.MaxSize)
			e.nextID++
			live = append(live, tensor{e.nextID, size})
			e.write(traces.Event{Op: traces.OpAlloc, ID: e.nextID, Size: size, TimeUS: e.now})
		} else if n > 0 {
			i := e.rng.IntN(n)
			t := live[i]
			live[i] = live[n-1]
			live = live[:n-1]
			e.write(traces.Event{Op: traces.OpFree, ID: t.id, Size: t.size, TimeUS: e.now})
		} else {
			// A single event left and nothing live: an alloc could not be
			// freed, so the trace ends one event short.
			return
		}
		e.now += 1 + e.rng.Int64N(4)
	}
}
