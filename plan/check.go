package plan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// A Placement is a buffer and the offset it was given: a row of
// MiniMalloc's solution CSV (id,lower,upper,size,offset).
type Placement struct {
	Buffer
	Offset int64
}

// Placements returns the buffers of p with the offsets of s, in the order
// of p.
func (s *Solution) Placements(p Problem) []Placement {
	out := make([]Placement, len(p.Buffers))
	for i, b := range p.Buffers {
		out[i] = Placement{Buffer: b, Offset: s.Offsets[i]}
	}
	return out
}

// Check verifies a placement of p without trusting how it was made: every
// buffer of p appears exactly once in placed (by ID) with its lifetime and
// size unchanged, no buffer is placed that p does not have, every offset is
// >= 0, offset + size does not pass 2^63-1 and, when capacity > 0, is at
// most capacity, and no two buffers live at the same time overlap in
// memory. It returns the first fault found, or nil. IDs of p must be
// distinct. It shares no code with Solve.
//
// It sweeps the lifetimes in time order and compares each buffer with the
// buffers live when it starts: O(n log n + n·k) for k live buffers.
func Check(p Problem, placed []Placement, capacity int64) error {
	want := make(map[string]int, len(p.Buffers))
	for i, b := range p.Buffers {
		if _, dup := want[b.ID]; dup {
			return fmt.Errorf("problem has buffer %q twice", b.ID)
		}
		want[b.ID] = i
	}
	seen := make([]bool, len(p.Buffers))
	for _, q := range placed {
		i, ok := want[q.ID]
		switch {
		case !ok:
			return fmt.Errorf("buffer %q is not in the problem", q.ID)
		case seen[i]:
			return fmt.Errorf("buffer %q is placed twice", q.ID)
		}
		seen[i] = true
		if b := p.Buffers[i]; b.Lower != q.Lower || b.Upper != q.Upper || b.Size != q.Size {
			return fmt.Errorf("buffer %q: lifetime [%d, %d) size %d, want [%d, %d) size %d", q.ID, q.Lower, q.Upper, q.Size, b.Lower, b.Upper, b.Size)
		}
		switch {
		case q.Offset < 0:
			return fmt.Errorf("buffer %q: negative offset %d", q.ID, q.Offset)
		case q.Size <= 0 || q.Upper <= q.Lower:
			return fmt.Errorf("buffer %q: lifetime [%d, %d) size %d: not a buffer", q.ID, q.Lower, q.Upper, q.Size)
		case q.Offset > math.MaxInt64-q.Size:
			return fmt.Errorf("buffer %q: offset %d + size %d is beyond 2^63-1 bytes", q.ID, q.Offset, q.Size)
		case capacity > 0 && q.Offset > capacity-q.Size:
			return fmt.Errorf("buffer %q: [%d, %d) ends beyond the capacity %d", q.ID, q.Offset, q.Offset+q.Size, capacity)
		}
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("buffer %q is not placed", p.Buffers[i].ID)
		}
	}
	order := make([]int, len(placed))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(placed[a].Lower, placed[b].Lower) })
	var live []int
	for _, i := range order {
		q := &placed[i]
		// Drop the buffers that ended; compare with the others.
		live = slices.DeleteFunc(live, func(j int) bool { return placed[j].Upper <= q.Lower })
		for _, j := range live {
			o := &placed[j]
			if q.Offset < o.Offset+o.Size && o.Offset < q.Offset+q.Size {
				return fmt.Errorf("buffers %q ([%d, %d) at %d) and %q ([%d, %d) at %d) overlap in time and memory",
					o.ID, o.Lower, o.Upper, o.Offset, q.ID, q.Lower, q.Upper, q.Offset)
			}
		}
		live = append(live, i)
	}
	return nil
}
