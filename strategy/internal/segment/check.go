package segment

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpualloc/gpualloc"
)

// This file holds what tests use: a check of every invariant, and hooks to
// build any state and to read it back, as the Go runtime's
// export_test.go does for its page allocator.

// Check verifies the heap's invariants and returns its free blocks in
// address order, for the caller to compare with its index:
//
//   - the blocks of each segment tile it exactly, in address order, with
//     consistent Prev and Next links, and no two free blocks are adjacent;
//   - block sizes are multiples of Round, live ones at least MinBlock;
//   - FreeBytes is the sum of the free blocks, the live blocks are as many
//     as the handles given out, and every node is either in a segment or
//     unused;
//   - Stats agree: Reserved is the sum of the segments, Allocated and
//     Requested the sums over the live blocks.
//
// It takes O(blocks + segments) time.
func (h *Heap) Check() ([]int32, error) {
	var free []int32
	var freeBytes, reserved, allocated, requested int64
	var liveBlocks, reached int
	segs := h.sortedSegments()
	for _, s := range segs {
		reserved += s.size
		if h.Nodes[s.first].Prev != 0 {
			return nil, fmt.Errorf("segment %#x+%d: first block %d has a Prev", s.addr, s.size, s.first)
		}
		addr := s.addr
		var prev int32
		for n := s.first; n != 0; n = h.Nodes[n].Next {
			nd := &h.Nodes[n]
			reached++
			if reached > len(h.Nodes) {
				return nil, fmt.Errorf("segment %#x+%d: its blocks form a cycle", s.addr, s.size)
			}
			switch {
			case nd.Addr != addr:
				return nil, fmt.Errorf("segment %#x+%d: block %d at %#x, want %#x", s.addr, s.size, n, nd.Addr, addr)
			case nd.Prev != prev:
				return nil, fmt.Errorf("segment %#x+%d: block %d at %#x has Prev %d, want %d", s.addr, s.size, n, nd.Addr, nd.Prev, prev)
			case nd.Size <= 0 || nd.Size%h.c.Round != 0:
				return nil, fmt.Errorf("segment %#x+%d: block %d at %#x has size %d, not a positive multiple of %d", s.addr, s.size, n, nd.Addr, nd.Size, h.c.Round)
			case nd.Free && prev != 0 && h.Nodes[prev].Free:
				return nil, fmt.Errorf("segment %#x+%d: free blocks at %#x and %#x are adjacent", s.addr, s.size, h.Nodes[prev].Addr, nd.Addr)
			case !nd.Free && nd.Size < h.c.MinBlock:
				return nil, fmt.Errorf("segment %#x+%d: live block at %#x has size %d < min block %d", s.addr, s.size, nd.Addr, nd.Size, h.c.MinBlock)
			case !nd.Free && (nd.Requested < 1 || nd.Requested > nd.Size):
				return nil, fmt.Errorf("segment %#x+%d: live block at %#x of %d bytes has Requested %d", s.addr, s.size, nd.Addr, nd.Size, nd.Requested)
			}
			if nd.Free {
				free = append(free, n)
				freeBytes += nd.Size
			} else {
				liveBlocks++
				allocated += nd.Size
				requested += nd.Requested
			}
			addr += uint64(nd.Size)
			prev = n
		}
		if end := s.addr + uint64(s.size); addr != end {
			return nil, fmt.Errorf("segment %#x+%d: blocks end at %#x, want %#x", s.addr, s.size, addr, end)
		}
	}
	if reached+len(h.spare)+1 != len(h.Nodes) {
		return nil, fmt.Errorf("%d blocks in segments and %d unused records, but %d records", reached, len(h.spare), len(h.Nodes)-1)
	}
	for _, n := range h.spare {
		if h.Nodes[n] != (Node{}) {
			return nil, fmt.Errorf("unused record %d is not cleared: %+v", n, h.Nodes[n])
		}
	}
	st := h.M.Stats()
	var bad []string
	eq := func(what string, got, want int64) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s = %d, want %d", what, got, want))
		}
	}
	eq("FreeBytes", h.free, freeBytes)
	eq("live blocks", int64(h.Live.Len()), int64(liveBlocks))
	eq("Stats.Reserved", st.Reserved, reserved)
	eq("Stats.Allocated", st.Allocated, allocated)
	eq("Stats.Requested", st.Requested, requested)
	eq("Stats.Allocs-Frees", st.Allocs-st.Frees, int64(liveBlocks))
	if len(bad) > 0 {
		return nil, fmt.Errorf("heap does not add up: %v", bad)
	}
	return free, nil
}

func (h *Heap) sortedSegments() []seg {
	var segs []seg
	for _, s := range h.segs {
		if s.size != 0 {
			segs = append(segs, s)
		}
	}
	slices.SortFunc(segs, func(a, b seg) int { return cmp.Compare(a.addr, b.addr) })
	return segs
}

// A LayoutBlock is a block of a segment in a test's description of a heap.
type LayoutBlock struct {
	Size int64
	Free bool
}

// A LayoutSegment is a segment and its blocks, in address order.
type LayoutSegment struct {
	Addr   uint64
	Blocks []LayoutBlock
}

// Layout returns the heap's segments, in address order, with their blocks.
func (h *Heap) Layout() []LayoutSegment {
	var out []LayoutSegment
	for _, s := range h.sortedSegments() {
		ls := LayoutSegment{Addr: s.addr}
		for n := s.first; n != 0; n = h.Nodes[n].Next {
			ls.Blocks = append(ls.Blocks, LayoutBlock{Size: h.Nodes[n].Size, Free: h.Nodes[n].Free})
		}
		out = append(out, ls)
	}
	return out
}

// Build sets up an empty heap in the state segs describes: for each
// segment, in order, a device allocation of the sum of its blocks' sizes,
// tiled by those blocks. Free blocks go into the index; each live one is
// handed out as if for a request of its whole size, and Build returns them
// in order. A block size that is not a positive multiple of Round, a live
// block below MinBlock, or two adjacent free blocks are errors.
func (h *Heap) Build(segs [][]LayoutBlock) ([]gpualloc.Block, error) {
	if len(h.Nodes) != 1 {
		return nil, fmt.Errorf("%s: Build on a heap that is not empty", h.Name)
	}
	var live []gpualloc.Block
	for i, blocks := range segs {
		var size int64
		for j, b := range blocks {
			switch {
			case b.Size <= 0 || b.Size%h.c.Round != 0:
				return nil, fmt.Errorf("segment %d, block %d: size %d is not a positive multiple of %d", i, j, b.Size, h.c.Round)
			case !b.Free && b.Size < h.c.MinBlock:
				return nil, fmt.Errorf("segment %d, block %d: live block of %d bytes < min block %d", i, j, b.Size, h.c.MinBlock)
			case b.Free && j > 0 && blocks[j-1].Free:
				return nil, fmt.Errorf("segment %d, blocks %d and %d: adjacent free blocks", i, j-1, j)
			}
			size += b.Size
		}
		if size == 0 {
			return nil, fmt.Errorf("segment %d: no blocks", i)
		}
		addr, err := h.b.Malloc(size)
		if err != nil {
			return nil, err
		}
		n := h.addSegment(addr, size)
		for _, b := range blocks {
			var rem int32
			if rest := h.Nodes[n].Size - b.Size; rest > 0 {
				rem = h.newNode()
				nodes := h.Nodes
				nodes[rem] = Node{Addr: nodes[n].Addr + uint64(b.Size), Size: rest, Prev: n, Free: true}
				nodes[n].Next = rem
				nodes[n].Size = b.Size
			}
			if b.Free {
				h.idx.Insert(h.Nodes, n)
			} else {
				addr, size, handle, _ := h.Take(n, b.Size, b.Size, true)
				live = append(live, gpualloc.Block{Addr: addr, Size: size, Requested: size, Handle: handle})
			}
			n = rem
		}
	}
	return live, nil
}
