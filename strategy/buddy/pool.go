package buddy

// Representation
//
// Every block of every arena, free, live or split, is a node in one slice,
// and the two halves of a split block are always a pair of adjacent nodes,
// 2q and 2q+1. The buddy of a block at offset o of size s is the block at
// offset o XOR s from the arena's base (see buddyOffset): split puts the
// left half at the parent's offset and the right half at buddyOffset of it,
// in the pair's second node, so the buddy's record is node i^1, found
// without a search and without a table indexed by address. Each node knows
// its parent, so Free climbs from a block to the arena's root, merging as
// long as the buddy is free; an arena's root is paired with a node that is
// never free, which ends the climb.
//
// Free blocks are on intrusive doubly linked lists, one per order, linked
// by node index, so a buddy is taken off its list in O(1) wherever it is.
// A bit mask of the non-empty lists finds the smallest order that can serve
// a request with one count of trailing zeros. Pairs that merging sets free
// go on a list of unused pairs, from which splitting takes them again, so in
// steady state nothing is allocated.
//
// A Block's Handle is the node's index, with a generation number of the
// node above it that Alloc bumps, so that a stale Block is refused even when
// its node holds a live block again.

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
)

// name is the strategy's registry name.
const name = "buddy"

// node states
const (
	stateUnused uint8 = iota // on the list of unused pairs, or the partner of an arena's root
	stateFree                // a free block, on the free list of its order
	stateLive                // a block handed out
	stateSplit               // split into two halves: the pair of nodes at next
)

// A node is a block of an arena: free, live or split.
type node struct {
	off uint64 // offset from the arena's base
	req int64  // bytes asked for, while live
	// prev and next link the free list of the node's order while it is
	// free (0 ends a list). While split, next is the first node of its
	// halves; while unused, the first node of a pair links the list of
	// unused pairs through next.
	prev, next int32
	parent     int32  // the node this one is a half of; 0 for a root
	arena      int32  // index in Pool.arenas
	gen        uint32 // generation, bumped by every Alloc of the node
	order      uint8  // log2 of the block's size in MinBlocks
	state      uint8
}

// An arena is a region held from the device.
type arena struct {
	base uint64 // device address
	size int64  // bytes, a power of two
	root int32  // node of the whole arena; 0 while the slot is unused
}

// A Pool is a binary buddy allocator. It implements [gpualloc.Allocator],
// [gpualloc.StatsReporter], [gpualloc.Releaser], [gpualloc.Specer] and
// [gpualloc.FreeSpaceReporter]. A Pool is not safe for concurrent use.
type Pool struct {
	b          gpualloc.Backend
	c          Config
	spec       string
	minShift   uint  // log2(MinBlock)
	arenaOrder uint  // order of an arena of Config.Arena bytes
	held       int64 // bytes in arenas

	nonEmpty uint64    // bit k set when free list k is not empty
	heads    [64]int32 // first node of each order's free list; 0 when empty
	nodes    []node    // nodes 0 and 1 are never used: index 0 is nil
	unused   int32     // first node of the first unused pair; 0 when none

	arenas []arena
	spare  []int32 // unused slots of arenas

	m gpualloc.Meter
}

// New returns an empty buddy pool that takes its memory from b. An invalid
// configuration is an error that names the parameter and wraps a
// [*gpualloc.ParamError]: MinBlock or Arena not a power of two, Arena below
// MinBlock.
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	if b == nil {
		return nil, errors.New(name + ": nil Backend")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	minShift := uint(bits.TrailingZeros64(uint64(c.MinBlock)))
	return &Pool{
		b:          b,
		c:          c,
		spec:       fmt.Sprintf("%s:min_block=%d,arena=%d", name, c.MinBlock, c.Arena),
		minShift:   minShift,
		arenaOrder: uint(bits.TrailingZeros64(uint64(c.Arena))) - minShift,
		nodes:      make([]node, 2, 64),
	}, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }

// Spec returns the pool's full spec, as "buddy:min_block=512,arena=1073741824".
func (p *Pool) Spec() string { return p.spec }

// Stats returns the pool's counters.
func (p *Pool) Stats() gpualloc.Stats { return p.m.Stats() }

// FreeSpace reports the largest free block and the free bytes of all the
// arenas the pool holds. It implements [gpualloc.FreeSpaceReporter] in
// O(1).
func (p *Pool) FreeSpace() (largest, total int64) {
	if p.nonEmpty != 0 {
		largest = p.c.MinBlock << (63 - bits.LeadingZeros64(p.nonEmpty))
	}
	return largest, p.held - p.m.Stats().Allocated
}

// Alloc returns a block of [Config.RoundSize](size) bytes, a power of two.
// It takes the most recently freed block of the smallest order that is
// large enough and splits it by halves down to the size, leaving the upper
// halves free. If no free block is large enough, it takes a new arena of
// Config.Arena bytes from the device, or one of the block's size for a
// request larger than that; if the device refuses, the pool returns its
// entirely free arenas to the device and tries once more; if the device
// refuses again, the pool asks for arenas of half the size, halving down to
// the block's own size, and takes the first one the device grants. Only if
// the device refuses them all does Alloc fail, with an error that wraps
// [gpualloc.ErrOutOfMemory]. The pool stays usable after a failure.
func (p *Pool) Alloc(size int64) (gpualloc.Block, error) {
	var k uint // order of the block
	if size > p.c.MinBlock {
		if size > maxBlock {
			p.m.CountOOM()
			return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: larger than the largest block (2^62 bytes): %w",
				name, size, gpualloc.ErrOutOfMemory)
		}
		k = uint(bits.Len64(uint64(size-1))) - p.minShift
	} else if size < 1 {
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: %w", name, size, gpualloc.ErrInvalidSize)
	}
	var i int32
	hit := true
	if m := p.nonEmpty >> k; m != 0 {
		j := (k + uint(bits.TrailingZeros64(m))) & 63
		i = p.heads[j]
		p.pop(i, j)
		if j > k {
			i = p.split(i, j, k)
		}
	} else {
		var err error
		if i, err = p.grow(k); err != nil {
			return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes (%d rounded): %w", name, size, int64(1)<<(k+p.minShift), err)
		}
		hit = false
	}
	n := &p.nodes[i]
	n.state = stateLive
	n.req = size
	n.gen++
	bs := int64(1) << (k + p.minShift)
	p.m.CountAlloc(size, bs, hit)
	return gpualloc.Block{
		Addr:      p.arenas[n.arena].base + n.off,
		Size:      bs,
		Requested: size,
		Handle:    uint64(n.gen)<<32 | uint64(i),
	}, nil
}

// Free returns a live block to its arena and merges it with its buddy as
// long as the buddy is free, up to the whole arena; no memory goes back to
// the device (see [Pool.ReleaseAll]). A block that is not live, or whose
// Addr, Size or Requested differ from what Alloc returned, gives an error
// wrapping [gpualloc.ErrInvalidFree] and changes nothing.
func (p *Pool) Free(b gpualloc.Block) error {
	idx := b.Handle & (1<<32 - 1)
	if idx >= uint64(len(p.nodes)) {
		return p.invalidFree(b)
	}
	n := &p.nodes[idx]
	if n.state != stateLive || uint64(n.gen) != b.Handle>>32 || n.req != b.Requested ||
		int64(1)<<(uint(n.order)+p.minShift) != b.Size || p.arenas[n.arena].base+n.off != b.Addr {
		return p.invalidFree(b)
	}
	p.m.CountFree(n.req, b.Size)
	i, k := int32(idx), uint(n.order)
	for {
		s := i ^ 1
		if p.nodes[s].state != stateFree {
			break
		}
		p.unlink(s, k)
		parent := p.nodes[i].parent
		p.releasePair(i &^ 1)
		i = parent
		k++
	}
	p.push(i, k)
	return nil
}

// invalidFree describes a Block that Free refuses.
func (p *Pool) invalidFree(b gpualloc.Block) error {
	idx := b.Handle & (1<<32 - 1)
	if idx < uint64(len(p.nodes)) {
		n := &p.nodes[idx]
		if n.state == stateLive && p.arenas[n.arena].base+n.off == b.Addr && uint64(n.gen) == b.Handle>>32 {
			size := int64(1) << (uint(n.order) + p.minShift)
			return blocktable.Mismatch(name, b, size, n.req)
		}
	}
	return blocktable.NotLive(name, b)
}

// ReleaseAll returns every entirely free arena to the device. Arenas that
// hold a live block stay, whole. An arena the device refuses to free is
// dropped all the same, and the device's errors are joined in the one
// returned.
func (p *Pool) ReleaseAll() error {
	if err := p.releaseEmpty(); err != nil {
		return fmt.Errorf("%s: release: %w", name, err)
	}
	return nil
}

// releaseEmpty frees the arenas whose root is free, in the order of their
// slots.
func (p *Pool) releaseEmpty() error {
	var errs []error
	for s := range p.arenas {
		a := &p.arenas[s]
		if a.root == 0 || p.nodes[a.root].state != stateFree {
			continue
		}
		p.unlink(a.root, uint(p.nodes[a.root].order))
		p.releasePair(a.root)
		p.held -= a.size
		if err := p.b.Free(a.base, a.size); err != nil {
			errs = append(errs, err)
		} else {
			p.m.CountDeviceFree(a.size)
		}
		*a = arena{}
		p.spare = append(p.spare, int32(s))
	}
	return errors.Join(errs...)
}

// grow takes a new arena from the device for a block of order k and returns
// the node of a block of order k at its start, not on any free list.
//
// It asks for an arena of Config.Arena bytes, or of the block's size if that
// is larger. If the device refuses, it returns the pool's entirely free
// arenas and asks once more; if the device refuses again, it asks for an
// arena of half the size, then half that, down to the block's own size, and
// takes the first one the device grants. Only when the device refuses them
// all does it fail, with the device's last refusal, which wraps
// [gpualloc.ErrOutOfMemory]. That is at most 2+log2(Arena/block) device
// calls, and 2 for a block larger than an arena, made only when no free
// block is large enough.
func (p *Pool) grow(k uint) (int32, error) {
	order := max(k, p.arenaOrder)
	size := int64(1) << (order + p.minShift)
	base, err := p.b.Malloc(size)
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		if err := p.releaseEmpty(); err != nil {
			return 0, err
		}
		p.m.CountRetry()
		base, err = p.b.Malloc(size)
		// Smaller arenas, largest first, down to one of the block's size.
		full := size
		for order > k && errors.Is(err, gpualloc.ErrOutOfMemory) {
			order--
			size >>= 1
			base, err = p.b.Malloc(size)
		}
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			p.m.CountOOM()
			if size < full {
				err = fmt.Errorf("device refused arenas of %d bytes down to %d: %w", full, size, err)
			}
		}
	}
	if err != nil {
		return 0, err
	}
	p.m.CountDeviceMalloc(size)
	root := p.newArena(base, size, order)
	if order > k {
		return p.split(root, order, k), nil
	}
	return root, nil
}

// newArena records an arena of size bytes (order order) at base and returns
// its root node, on no free list.
func (p *Pool) newArena(base uint64, size int64, order uint) int32 {
	s := blocktable.Slot(&p.arenas, &p.spare)
	q := p.pair()
	r := &p.nodes[q]
	r.off, r.req, r.prev, r.next, r.parent, r.arena, r.order, r.state = 0, 0, 0, 0, 0, s, uint8(order), stateFree
	p.nodes[q+1].state = stateUnused // the root's partner: never free, so merging stops at the root
	p.arenas[s] = arena{base: base, size: size, root: q}
	p.held += size
	return q
}

// split splits the block of node i, of order j and on no free list, by
// halves down to order k: at each step the upper half goes on the free list
// of its order and the lower half is split again. It returns the node of the
// block of order k at the start of i's, on no free list.
func (p *Pool) split(i int32, j, k uint) int32 {
	for j > k {
		j--
		q := p.pair() // may move p.nodes
		nodes := p.nodes
		par := &nodes[i]
		par.state = stateSplit
		par.next = q
		l, r := &nodes[q], &nodes[q+1]
		l.off, l.req, l.prev, l.next, l.parent, l.arena, l.order, l.state = par.off, 0, 0, 0, i, par.arena, uint8(j), stateFree
		r.off, r.req, r.parent, r.arena, r.order = buddyOffset(par.off, uint64(1)<<(j+p.minShift)), 0, i, par.arena, uint8(j)
		p.push(q+1, j)
		i = q
	}
	return i
}

// buddyOffset returns the offset of the buddy of the block of size bytes at
// offset off from its arena's base: the other half of the block of 2*size
// bytes that contains it. size is a power of two and off a multiple of it.
// Offsets are from the arena's base, not device addresses, since a device
// may align an arena's base to no more than 512 bytes.
func buddyOffset(off, size uint64) uint64 { return off ^ size }

// pair returns the first node of an unused pair, growing p.nodes if there
// is none.
func (p *Pool) pair() int32 {
	if q := p.unused; q != 0 {
		p.unused = p.nodes[q].next
		return q
	}
	q := int32(len(p.nodes))
	if q < 0 || q > 1<<31-2 {
		panic(name + ": more than 2^31 blocks")
	}
	p.nodes = append(p.nodes, node{}, node{})
	return q
}

// releasePair puts the pair of nodes q and q+1 on the list of unused pairs.
func (p *Pool) releasePair(q int32) {
	p.nodes[q].state = stateUnused
	p.nodes[q+1].state = stateUnused
	p.nodes[q].next = p.unused
	p.unused = q
}

// push puts node i, of order k, at the head of free list k.
func (p *Pool) push(i int32, k uint) {
	k &= 63
	n := &p.nodes[i]
	h := p.heads[k]
	n.state = stateFree
	n.prev = 0
	n.next = h
	if h != 0 {
		p.nodes[h].prev = i
	}
	p.heads[k] = i
	p.nonEmpty |= 1 << k
}

// pop takes node i, the head of free list k, off the list.
func (p *Pool) pop(i int32, k uint) {
	k &= 63
	next := p.nodes[i].next
	p.heads[k] = next
	if next != 0 {
		p.nodes[next].prev = 0
	} else {
		p.nonEmpty &^= 1 << k
	}
}

// unlink takes node i off free list k, wherever it is on it.
func (p *Pool) unlink(i int32, k uint) {
	k &= 63
	n := &p.nodes[i]
	if n.prev != 0 {
		p.nodes[n.prev].next = n.next
	} else {
		p.heads[k] = n.next
		if n.next == 0 {
			p.nonEmpty &^= 1 << k
		}
	}
	if n.next != 0 {
		p.nodes[n.next].prev = n.prev
	}
}
