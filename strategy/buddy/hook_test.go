package buddy

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// A span is one block of a layout: live or free, and its size in MinBlocks.
type span struct {
	live  bool
	units int64
}

// parseLayout parses a layout such as "A1 F1 F2 F4" (see build).
func parseLayout(layout string) ([]span, error) {
	var spans []span
	for _, f := range strings.Fields(layout) {
		if len(f) < 2 || (f[0] != 'A' && f[0] != 'F') {
			return nil, fmt.Errorf("layout %q: bad block %q: want A or F and a size in MinBlocks", layout, f)
		}
		n, err := strconv.ParseInt(f[1:], 10, 64)
		if err != nil || !isPow2(n) {
			return nil, fmt.Errorf("layout %q: bad block %q: the size must be a power of two", layout, f)
		}
		spans = append(spans, span{live: f[0] == 'A', units: n})
	}
	return spans, nil
}

// build returns a pool with configuration c, on a fresh device of capacity
// bytes, that holds one arena per layout: any starting state, for tests
// that check what an operation does to it.
//
// A layout lists an arena's blocks in address order, each "A" (live) or "F"
// (free) and its size in MinBlocks: "A1 F1 F2 F4" is an arena of 8
// MinBlocks whose first MinBlock is a live block. The blocks must tile the
// arena as the buddy system can, each at an offset that is a multiple of its
// size; the layout may leave free buddies unmerged, which [check] reports.
// The arena's size is the sum of its blocks, whatever c.Arena says. Free
// blocks are put on their lists so that each list holds them in address
// order from its head, arena by arena. Live blocks were asked for with their
// full size; build returns them in address order, arena by arena, and the
// pool's Stats count them and the device allocations of the arenas.
func build(t testing.TB, c Config, capacity int64, layouts ...string) (*Pool, *virtual.Device, []gpualloc.Block) {
	t.Helper()
	dev := strategytest.NewDevice(capacity)
	p, err := New(dev, c)
	if err != nil {
		t.Fatal(err)
	}
	type leaf struct {
		i int32
		k uint
	}
	var free []leaf
	var live []gpualloc.Block
	for _, layout := range layouts {
		spans, err := parseLayout(layout)
		if err != nil {
			t.Fatal(err)
		}
		var units int64
		for _, s := range spans {
			units += s.units
		}
		if !isPow2(units) {
			t.Fatalf("layout %q: the arena's %d MinBlocks are not a power of two", layout, units)
		}
		size := units * c.MinBlock
		base, err := dev.Malloc(size)
		if err != nil {
			t.Fatal(err)
		}
		p.m.CountDeviceMalloc(size)
		root := p.newArena(base, size, uint(bits.TrailingZeros64(uint64(units))))
		var fill func(i int32, spans []span) []span
		fill = func(i int32, spans []span) []span {
			n := &p.nodes[i]
			k := uint(n.order)
			if s := spans[0]; s.units == int64(1)<<k {
				if !s.live {
					free = append(free, leaf{i, k})
					return spans[1:]
				}
				size := c.MinBlock << k
				n.state, n.req = stateLive, size
				n.gen++
				p.m.CountAlloc(size, size, true)
				live = append(live, gpualloc.Block{
					Addr: p.arenas[n.arena].base + n.off, Size: size, Requested: size,
					Handle: uint64(n.gen)<<32 | uint64(i),
				})
				return spans[1:]
			} else if s.units > int64(1)<<k {
				t.Fatalf("layout %q: block %c%d at offset %d is not aligned to its size", layout, "FA"[b2i(s.live)], s.units, n.off/uint64(c.MinBlock))
			}
			q := p.split(i, k, k-1)
			p.unlink(q+1, k-1) // split left the upper half on its list
			spans = fill(q, spans)
			return fill(q+1, spans)
		}
		if rest := fill(root, spans); len(rest) != 0 {
			t.Fatalf("layout %q: blocks left over", layout)
		}
	}
	for i := len(free) - 1; i >= 0; i-- {
		p.push(free[i].i, free[i].k)
	}
	return p, dev, live
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A state is what describe reports of a pool.
type state struct {
	// Arenas are the layouts of the arenas (see build), by slot; "-" for
	// an unused slot.
	Arenas []string
	// Lists are the free lists, "order:[slot@offset ...]" from the head for
	// each non-empty list, offsets in MinBlocks.
	Lists string
}

func (s state) String() string { return fmt.Sprintf("arenas %q, lists %q", s.Arenas, s.Lists) }

// describe reports the blocks of every arena and the free lists.
func describe(p *Pool) state {
	var st state
	for _, a := range p.arenas {
		if a.root == 0 {
			st.Arenas = append(st.Arenas, "-")
			continue
		}
		var blocks []string
		var walk func(i int32)
		walk = func(i int32) {
			n := &p.nodes[i]
			switch n.state {
			case stateSplit:
				walk(n.next)
				walk(n.next + 1)
			case stateLive:
				blocks = append(blocks, fmt.Sprintf("A%d", 1<<n.order))
			case stateFree:
				blocks = append(blocks, fmt.Sprintf("F%d", 1<<n.order))
			default:
				blocks = append(blocks, fmt.Sprintf("?%d", 1<<n.order))
			}
		}
		walk(a.root)
		st.Arenas = append(st.Arenas, strings.Join(blocks, " "))
	}
	var lists []string
	for k, h := range p.heads {
		if h == 0 {
			continue
		}
		var entries []string
		for i, n := h, 0; i != 0 && n <= len(p.nodes); i, n = p.nodes[i].next, n+1 {
			entries = append(entries, fmt.Sprintf("%d@%d", p.nodes[i].arena, p.nodes[i].off/uint64(p.c.MinBlock)))
		}
		lists = append(lists, fmt.Sprintf("%d:[%s]", k, strings.Join(entries, " ")))
	}
	st.Lists = strings.Join(lists, " ")
	return st
}

// A leafBlock is a free or live block found by walking an arena's tree.
type leafBlock struct {
	slot  int32
	node  int32
	off   uint64
	order uint
	live  bool
}

// check verifies every invariant of p's structure and counters, computing
// what it compares with by brute force from the arenas' trees:
//
//   - each arena's blocks tile it exactly, each at an offset that is a
//     multiple of its size, the halves of a split block at its offset and at
//     the buddy offset (offset XOR half size), every record consistent;
//   - no two free buddies are left unmerged;
//   - the free lists hold exactly the free blocks, each on its order's list,
//     doubly linked both ways, and the mask of non-empty lists is right;
//   - every record is in an arena's tree or on the list of unused pairs;
//   - Stats (Requested, Allocated, Reserved, live count) and FreeSpace match
//     the blocks.
//
// It returns the live blocks, in address order.
func check(p *Pool) ([]gpualloc.Block, error) {
	var errs []error
	errorf := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(p.nodes) < 2 || p.nodes[0].state != stateUnused || p.nodes[1].state != stateUnused {
		return nil, errors.New("nodes 0 and 1 are in use")
	}
	minBlock := uint64(p.c.MinBlock)
	var leaves []leafBlock
	treeNodes := 0
	var held int64
	for s, a := range p.arenas {
		if a.root == 0 {
			if a != (arena{}) {
				errorf("unused arena slot %d is %+v", s, a)
			}
			continue
		}
		held += a.size
		r := &p.nodes[a.root]
		switch {
		case a.root < 2 || a.root&1 != 0:
			errorf("arena %d: root node %d is not the first of a pair", s, a.root)
			continue
		case r.parent != 0 || r.off != 0 || int64(minBlock<<r.order) != a.size:
			errorf("arena %d of %d bytes: root %+v", s, a.size, *r)
		case p.nodes[a.root+1].state != stateUnused:
			errorf("arena %d: the root's partner is in state %d", s, p.nodes[a.root+1].state)
		}
		treeNodes += 2
		end := uint64(0) // tiling cursor
		var walk func(i int32, depth int)
		walk = func(i int32, depth int) {
			n := &p.nodes[i]
			size := minBlock << n.order
			if n.arena != int32(s) {
				errorf("arena %d: node %d says arena %d", s, i, n.arena)
			}
			if n.off%size != 0 {
				errorf("arena %d: block at offset %d of %d bytes is not aligned to its size", s, n.off, size)
			}
			switch n.state {
			case stateSplit:
				q := n.next
				if q < 2 || q&1 != 0 || int(q)+1 >= len(p.nodes) || n.order == 0 || depth > 64 {
					errorf("arena %d: split node %d has halves at %d (order %d)", s, i, q, n.order)
					return
				}
				l, r := &p.nodes[q], &p.nodes[q+1]
				half := size / 2
				if l.parent != i || r.parent != i || l.order != n.order-1 || r.order != n.order-1 ||
					l.off != n.off || r.off != buddyOffset(l.off, half) || r.off != n.off+half {
					errorf("arena %d: split node %d %+v has halves %+v and %+v", s, i, *n, *l, *r)
					return
				}
				treeNodes += 2
				walk(q, depth+1)
				walk(q+1, depth+1)
			case stateFree, stateLive:
				if n.off != end {
					errorf("arena %d: block at offset %d, want %d (blocks must tile the arena)", s, n.off, end)
				}
				end = n.off + size
				leaves = append(leaves, leafBlock{slot: int32(s), node: i, off: n.off, order: uint(n.order), live: n.state == stateLive})
			default:
				errorf("arena %d: node %d in the tree is in state %d", s, i, n.state)
			}
		}
		walk(a.root, 0)
		if end != uint64(a.size) {
			errorf("arena %d: blocks cover %d of its %d bytes", s, end, a.size)
		}
	}
	if held != p.held {
		errorf("held = %d, arenas hold %d", p.held, held)
	}

	// No two free buddies unmerged, found by offset arithmetic alone.
	type key struct {
		slot  int32
		off   uint64
		order uint
	}
	freeAt := map[key]bool{}
	for _, l := range leaves {
		if !l.live {
			freeAt[key{l.slot, l.off, l.order}] = true
		}
	}
	for _, l := range leaves {
		if l.live || int64(minBlock<<l.order) == p.arenas[l.slot].size {
			continue
		}
		if b := buddyOffset(l.off, minBlock<<l.order); freeAt[key{l.slot, b, l.order}] {
			errorf("arena %d: free buddies of %d bytes at offsets %d and %d are not merged", l.slot, minBlock<<l.order, l.off, b)
		}
	}

	// Free lists.
	listed := map[int32]bool{}
	for k, h := range p.heads {
		if (h != 0) != (p.nonEmpty&(1<<k) != 0) {
			errorf("list %d: head %d, but bit %d of the mask is %v", k, h, k, p.nonEmpty&(1<<k) != 0)
		}
		prev := int32(0)
		for i := h; i != 0; i = p.nodes[i].next {
			if int(i) >= len(p.nodes) || listed[i] {
				errorf("list %d: node %d out of range or listed twice", k, i)
				break
			}
			listed[i] = true
			n := &p.nodes[i]
			if n.state != stateFree || int(n.order) != k || n.prev != prev {
				errorf("list %d: node %d %+v (prev %d)", k, i, *n, prev)
			}
			prev = i
		}
	}
	nFree := 0
	for _, l := range leaves {
		if !l.live {
			nFree++
			if !listed[l.node] {
				errorf("arena %d: free block at offset %d of order %d is on no list", l.slot, l.off, l.order)
			}
		}
	}
	if len(listed) != nFree {
		errorf("%d nodes on free lists, %d free blocks", len(listed), nFree)
	}

	// Unused pairs.
	unused := 0
	for q := p.unused; q != 0; q = p.nodes[q].next {
		if q < 2 || q&1 != 0 || int(q)+1 >= len(p.nodes) || unused > len(p.nodes) {
			errorf("unused pair at %d", q)
			break
		}
		if p.nodes[q].state != stateUnused || p.nodes[q+1].state != stateUnused {
			errorf("unused pair at %d in states %d, %d", q, p.nodes[q].state, p.nodes[q+1].state)
		}
		unused += 2
	}
	if 2+unused+treeNodes != len(p.nodes) {
		errorf("%d nodes: %d in trees, %d unused, 2 reserved: some are lost", len(p.nodes), treeNodes, unused)
	}

	// Counters against the blocks.
	var live []gpualloc.Block
	var requested, allocated, largest, total int64
	for _, l := range leaves {
		n := &p.nodes[l.node]
		size := int64(minBlock << l.order)
		if !l.live {
			largest = max(largest, size)
			total += size
			continue
		}
		requested += n.req
		allocated += size
		live = append(live, gpualloc.Block{
			Addr: p.arenas[l.slot].base + l.off, Size: size, Requested: n.req,
			Handle: uint64(n.gen)<<32 | uint64(l.node),
		})
	}
	st := p.Stats()
	if st.Requested != requested || st.Allocated != allocated || st.Allocs-st.Frees != int64(len(live)) {
		errorf("Stats: Requested %d, Allocated %d, Allocs-Frees %d; the blocks: %d, %d, %d live",
			st.Requested, st.Allocated, st.Allocs-st.Frees, requested, allocated, len(live))
	}
	if st.PeakRequested < st.Requested || st.PeakAllocated < st.Allocated || st.PeakReserved < st.Reserved {
		errorf("Stats: a peak below its value: %+v", st)
	}
	if gl, gt := p.FreeSpace(); gl != largest || gt != total {
		errorf("FreeSpace() = (%d, %d), the free blocks: largest %d, total %d", gl, gt, largest, total)
	}
	slices.SortFunc(live, func(a, b gpualloc.Block) int { return cmp.Compare(a.Addr, b.Addr) })
	return live, errors.Join(errs...)
}

func TestBuildDescribeRoundTrip(t *testing.T) {
	c := Config{MinBlock: 512, Arena: 8 * 512}
	layouts := []string{"A1 F1 F2 F4", "F8", "F2 A2 A4", "A16"}
	p, dev, live := build(t, c, 1<<20, layouts...)
	got := describe(p)
	if !slices.Equal(got.Arenas, layouts) {
		t.Errorf("arenas %q, want %q", got.Arenas, layouts)
	}
	if want := "0:[0@1] 1:[0@2 2@0] 2:[0@4] 3:[1@0]"; got.Lists != want {
		t.Errorf("lists %q, want %q", got.Lists, want)
	}
	blocks, err := check(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(blocks, live) {
		t.Errorf("live blocks %v, build returned %v", blocks, live)
	}
	if got, want := dev.Stats().Used, int64(8+8+8+16)*512; got != want || p.Stats().Reserved != want {
		t.Errorf("device holds %d bytes, Reserved %d; want %d", got, p.Stats().Reserved, want)
	}

	// check finds what build allows but a pool never does.
	p, _, _ = build(t, c, 1<<20, "F1 F1 A2 A4")
	if _, err := check(p); err == nil || !strings.Contains(err.Error(), "not merged") {
		t.Errorf("check of unmerged buddies: %v", err)
	}
}
