package segment

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortedRandom runs random inserts, removes and best-fit takes on a
// Sorted index and checks each take and Max against a brute-force search,
// and the index's structure after every operation.
func TestSortedRandom(t *testing.T) {
	for _, spread := range []int{1, 3, 40} { // few sizes (deep trees) to many classes
		r := rand.New(rand.NewPCG(uint64(spread), 1))
		nodes := make([]Node, 1, 2001)
		var ix Sorted
		var in []int32 // blocks in the index
		var out []int32
		// take removes a random block from *s and returns it.
		take := func(s *[]int32) int32 {
			k := r.IntN(len(*s))
			x := (*s)[k]
			*s = slices.Delete(*s, k, k+1)
			return x
		}
		addrs := r.Perm(2000) // distinct addresses in random order
		for i := 1; i <= 2000; i++ {
			// Sizes: multiples of 512 spread over 2^spread... classes, with
			// many duplicates, so that ties on size are decided by address.
			size := int64(512 * (1 + r.IntN(1<<min(spread, 20))))
			nodes = append(nodes, Node{Addr: uint64(addrs[i-1]) << 12, Size: size, Free: true})
			out = append(out, int32(i))
		}
		for step := range 8000 {
			switch op := r.IntN(3); {
			case op == 0 && len(out) > 0:
				x := take(&out)
				ix.Insert(nodes, x)
				in = append(in, x)
			case op == 1 && len(in) > 0:
				x := take(&in)
				ix.Remove(nodes, x)
				out = append(out, x)
			default:
				size := int64(1 + r.IntN(512<<min(spread, 20)))
				var want int32
				for _, x := range in {
					if nodes[x].Size >= size && (want == 0 || less(nodes, x, want)) {
						want = x
					}
				}
				got := ix.TakeBest(nodes, size)
				if got != want {
					t.Fatalf("spread %d, step %d: TakeBest(%d) = %d, want %d", spread, step, size, got, want)
				}
				if got != 0 {
					in = slices.DeleteFunc(in, func(x int32) bool { return x == got })
					out = append(out, got)
				}
			}
			var max int32
			for _, x := range in {
				if max == 0 || less(nodes, max, x) {
					max = x
				}
			}
			if got := ix.Max(nodes); got != max {
				t.Fatalf("spread %d, step %d: Max = %d, want %d", spread, step, got, max)
			}
			if step%64 == 0 || len(in) < 8 {
				order, err := ix.Check(nodes)
				if err != nil {
					t.Fatalf("spread %d, step %d: %v", spread, step, err)
				}
				if len(order) != len(in) || ix.Len() != len(in) {
					t.Fatalf("spread %d, step %d: %d blocks in order, Len %d, want %d", spread, step, len(order), ix.Len(), len(in))
				}
			}
		}
	}
}

func TestSortedRemoveAbsentPanics(t *testing.T) {
	nodes := []Node{{}, {Addr: 0x1000, Size: 512, Free: true}, {Addr: 0x2000, Size: 512, Free: true}}
	var ix Sorted
	ix.Insert(nodes, 1)
	defer func() {
		if recover() == nil {
			t.Error("Remove of a block not in the index did not panic")
		}
	}()
	ix.Remove(nodes, 2)
}
