package snapshot

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// firstIn, which passes over runs of addresses all named after now, finds
// what a scan of every address in the range finds.
func TestNamedFirstIn(t *testing.T) {
	// 3,000 addresses in runs of namedRun, those of every other run named
	// only after all those of the others, each half in a random order,
	// then named again at random.
	rng := rand.New(rand.NewPCG(1, 2))
	var early, late []TraceEntry
	for i := range 3000 {
		e := TraceEntry{Action: Alloc, Addr: uint64(i) * 512, Size: 512}
		if i/namedRun%2 == 0 {
			early = append(early, e)
		} else {
			late = append(late, e)
		}
	}
	rng.Shuffle(len(early), func(i, j int) { early[i], early[j] = early[j], early[i] })
	rng.Shuffle(len(late), func(i, j int) { late[i], late[j] = late[j], late[i] })
	tr := append(early, late...)
	for range 2000 {
		tr = append(tr, tr[rng.IntN(len(tr))])
	}
	n := newNamed(TraceOf(tr))
	require.Greater(t, len(n.addrs), 4*namedRun)
	scan := func(lo, hi uint64) (uint64, bool) {
		for i, a := range n.addrs {
			if a >= lo && a < hi && n.first[i] < n.now {
				return a, true
			}
		}
		return 0, false
	}
	for range 20_000 {
		n.now = int32(rng.IntN(len(tr) + 1))
		lo := uint64(rng.IntN(3100)) * 512
		hi := lo + uint64(rng.IntN(3100))*512
		wa, wok := scan(lo, hi)
		a, ok := n.firstIn(lo, hi)
		require.Equal(t, wok, ok, "[%#x, %#x) before %d", lo, hi, n.now)
		require.Equal(t, wa, a, "[%#x, %#x) before %d", lo, hi, n.now)
	}
}
