package sim

import (
	"math/rand/v2"
	"testing"
)

// TestStartTable checks the table of ranges by start address against a map
// over random puts and deletes, with clustered and unaligned keys.
func TestStartTable(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var tb startTable
		want := map[uint64]int32{}
		var keys []uint64
		for n := range 5000 {
			if len(keys) > 0 && rng.IntN(2) == 0 {
				i := rng.IntN(len(keys))
				k := keys[i]
				keys[i] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
				tb.del(k, want[k])
				delete(want, k)
			} else {
				k := 1<<40 + uint64(rng.IntN(1<<16))*uint64(1+rng.IntN(3)*255)
				if _, ok := want[k]; ok {
					continue
				}
				want[k] = int32(n + 1)
				keys = append(keys, k)
				tb.put(k, int32(n+1))
			}
			if tb.n != len(want) {
				t.Fatalf("seed %d step %d: %d entries, want %d", seed, n, tb.n, len(want))
			}
			for _, k := range keys[max(len(keys)-8, 0):] {
				if got := tb.get(k); got != want[k] {
					t.Fatalf("seed %d step %d: get(%#x) = %d, want %d", seed, n, k, got, want[k])
				}
			}
		}
		for k, id := range want {
			if got := tb.get(k); got != id {
				t.Fatalf("seed %d: get(%#x) = %d, want %d", seed, k, got, id)
			}
		}
	}
}
