package snapshot

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// quadraticSegments is how the rebuild added the snapshot's segments before
// it sorted them: one by one in the snapshot's order, each checked against
// every segment added before it. addSnapshotSegments must agree with it.
func quadraticSegments(segs []Segment) *rebuild {
	r := &rebuild{unplaced: map[uint64]TraceEntry{}}
	for i := range segs {
		rs, msg := newSnapshotSegment(&segs[i])
		if msg == "" {
			for _, o := range r.segs {
				if rs.addr < o.end() && o.addr < rs.end() {
					msg = fmt.Sprintf("segment %s: overlaps the segment at %s", hex(rs.addr), hex(o.addr))
					break
				}
			}
		}
		if msg != "" {
			r.fail("%s", msg)
			r.unplace(&segs[i])
			continue
		}
		r.segs = append(r.segs, rs)
	}
	sort.Slice(r.segs, func(i, j int) bool { return r.segs[i].addr < r.segs[j].addr })
	return r
}

func TestAddSnapshotSegmentsAsOneByOne(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 1 + rng.IntN(60)
		var segs []Segment
		for range n {
			addr := uint64(rng.IntN(40)) << 20
			size := int64(1+rng.IntN(3)) << 20
			if seed%2 == 0 {
				addr = uint64(rng.IntN(1000)) << 22 // mostly disjoint
			}
			sg := Segment{Address: addr, TotalSize: size, Stream: 7}
			switch rng.IntN(4) {
			case 0: // one live block
				sg.Blocks = []Block{{Address: addr, Size: size, RequestedSize: size - 8, State: ActiveAllocated}}
			case 1: // a live block and a free one
				sg.Blocks = []Block{{Address: addr, Size: 512, RequestedSize: 500, State: ActiveAllocated}, {Address: addr + 512, Size: size - 512, State: Inactive}}
			case 2: // blocks that do not cover it
				sg.Blocks = []Block{{Address: addr + 512, Size: 512, RequestedSize: 8, State: ActiveAllocated}}
			}
			segs = append(segs, sg)
		}
		want := quadraticSegments(segs)
		got := &rebuild{unplaced: map[uint64]TraceEntry{}}
		got.addSnapshotSegments(segs, -1)
		require.Equal(t, want.err, got.err, "seed %d", seed)
		require.Equal(t, want.unplaced, got.unplaced, "seed %d", seed)
		require.Equal(t, want.segs, got.segs, "seed %d", seed)
	}
}
