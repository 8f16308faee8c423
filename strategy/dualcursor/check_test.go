package dualcursor

import (
	"fmt"
	"strings"

	"github.com/gpualloc/gpualloc"
)

// The pool's own invariants, which the tests check after every operation.

// first returns the first node of device block bl.
func (p *Pool) first(bl block) int32 {
	n := bl.gap
	for p.nodes[n].Prev != 0 {
		n = p.nodes[n].Prev
	}
	return n
}

// layout describes the pool's device blocks, in the order they were taken,
// separated by " | ": each range in address order as "S" (live static),
// "D" (live dynamic), "F" (freed) or "G" (the gap) and its size, as "D1K",
// "G1023K", "S512".
func (p *Pool) layout() string {
	var out []string
	for _, bl := range p.blocks {
		if bl.gap == 0 {
			continue
		}
		var rs []string
		for n := p.first(bl); n != 0; n = p.nodes[n].Next {
			nd := p.nodes[n]
			kind := "F"
			switch {
			case p.sides[n] == gapSide:
				kind = "G"
			case !nd.Free && p.sides[n] == p.staticSide:
				kind = "S"
			case !nd.Free:
				kind = "D"
			}
			rs = append(rs, kind+sizeText(nd.Size))
		}
		out = append(out, strings.Join(rs, " "))
	}
	return strings.Join(out, " | ")
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// check verifies the pool's invariants: each device block is tiled, in
// address order, by its low side's ranges, exactly one gap (possibly
// empty), and its high side's ranges; no free range touches another or the
// gap; every free range is in its side's index and nothing else is; the
// free bytes, the live blocks and the reserved bytes add up.
func (p *Pool) check() error {
	var free, reserved int64
	var freeRanges, live, blocks int
	for i, bl := range p.blocks {
		if bl.gap == 0 {
			continue
		}
		blocks++
		reserved += bl.size
		end := bl.addr
		s := low
		gaps := 0
		var prev int32
		for n := p.first(bl); n != 0; prev, n = n, p.nodes[n].Next {
			nd := p.nodes[n]
			switch {
			case nd.Prev != prev:
				return fmt.Errorf("block %d: node %d's Prev is %d, want %d", i, n, nd.Prev, prev)
			case nd.Addr != end:
				return fmt.Errorf("block %d: node %d at %#x, want %#x", i, n, nd.Addr, end)
			case nd.Size < 0 || nd.Size == 0 && p.sides[n] != gapSide:
				return fmt.Errorf("block %d: node %d of %d bytes", i, n, nd.Size)
			case nd.Size%p.c.Align != 0:
				return fmt.Errorf("block %d: node %d of %d bytes, not a multiple of %d", i, n, nd.Size, p.c.Align)
			}
			end += uint64(nd.Size)
			if p.sides[n] == gapSide {
				gaps++
				if n != bl.gap || !nd.Free {
					return fmt.Errorf("block %d: stray gap node %d", i, n)
				}
				s = high
				free += nd.Size
				continue
			}
			if p.sides[n] != s {
				return fmt.Errorf("block %d: node %d on side %d, lies on side %d", i, n, p.sides[n], s)
			}
			if nd.Free {
				freeRanges++
				free += nd.Size
				if nd.Requested != 0 {
					return fmt.Errorf("block %d: free node %d has Requested %d", i, n, nd.Requested)
				}
				for _, m := range []int32{nd.Prev, nd.Next} {
					if m != 0 && p.nodes[m].Free {
						return fmt.Errorf("block %d: free node %d touches free node %d (side %d)", i, n, m, p.sides[m])
					}
				}
			} else {
				live++
				if nd.Requested < 1 || p.c.RoundSize(nd.Requested) != nd.Size {
					return fmt.Errorf("block %d: live node %d of %d bytes for %d", i, n, nd.Size, nd.Requested)
				}
			}
		}
		if gaps != 1 || end != bl.addr+uint64(bl.size) {
			return fmt.Errorf("block %d: %d gaps, tiles to %#x, want 1 and %#x", i, gaps, end, bl.addr+uint64(bl.size))
		}
	}
	if n := p.idx[0].Len() + p.idx[1].Len(); n != freeRanges {
		return fmt.Errorf("%d free ranges, %d in the indexes", freeRanges, n)
	}
	for s := range p.idx {
		free, err := p.idx[s].Check(p.nodes)
		if err != nil {
			return fmt.Errorf("index of side %d: %w", s, err)
		}
		for _, n := range free {
			if p.sides[n] != side(s) || !p.nodes[n].Free {
				return fmt.Errorf("index of side %d holds node %d (side %d, free %v)", s, n, p.sides[n], p.nodes[n].Free)
			}
		}
	}
	st := p.Stats()
	switch {
	case free != p.free:
		return fmt.Errorf("free bytes %d, counted %d", free, p.free)
	case live != p.live.Len():
		return fmt.Errorf("%d live ranges, %d in the table", live, p.live.Len())
	case blocks != p.nblock:
		return fmt.Errorf("%d device blocks, counted %d", blocks, p.nblock)
	case reserved != st.Reserved:
		return fmt.Errorf("reserved %d, stats say %d", reserved, st.Reserved)
	case reserved-free != st.Allocated:
		return fmt.Errorf("allocated %d, stats say %d", reserved-free, st.Allocated)
	case p.c.Grow == GrowNone && blocks > 1:
		return fmt.Errorf("%d device blocks with grow=none", blocks)
	}
	return nil
}

var _ gpualloc.CategoryAllocator = (*Pool)(nil)
