package dualcursor

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "dualcursor"

// A side is where a block lies in its device block: below the gap between
// the cursors (low), above it (high), or the gap itself.
type side uint8

const (
	low side = iota
	high
	gapSide
)

// A block is a region taken from the device, tiled by nodes in address
// order: the low side's, the gap, the high side's.
type block struct {
	addr uint64
	size int64
	gap  int32 // the node of the gap; 0 marks an unused slot
}

// A Pool is a dual-cursor allocator: static memory from one end of each
// device block, dynamic memory from the other, freed ranges reused on
// their own side. It implements [gpualloc.Allocator],
// [gpualloc.CategoryAllocator], [gpualloc.StatsReporter],
// [gpualloc.Releaser], [gpualloc.FreeSpaceReporter] and [gpualloc.Specer].
// A Pool is not safe for concurrent use.
type Pool struct {
	b    gpualloc.Backend
	c    Config
	spec string
	m    gpualloc.Meter

	// nodes holds every range, free, live or gap; nodes[0] is unused, so
	// that 0 means none. sides[i] is the side of nodes[i].
	nodes []segment.Node
	sides []side
	spare []int32 // unused indexes of nodes

	idx    [2]segment.Sorted // free ranges of the low and the high side, by (size, address)
	blocks []block
	nblock int // blocks in use
	live   blocktable.Table[int32]
	free   int64 // bytes of free ranges and gaps
	freed  bool  // a block has been freed: the end of the before_first_free rule

	staticSide side // low or high, from Config.StaticEnd
}

// New returns a pool that takes its memory from b as c says. It takes no
// memory until the first allocation. An invalid configuration is an error
// that names the parameter and wraps a [*gpualloc.ParamError]: Align not a
// power of two of at least 256, Pad or Block negative, Grow, Unknown or
// StaticEnd unknown, Static holding a value that is no category.
func New(b gpualloc.Backend, c Config) (*Pool, error) {
	if b == nil {
		return nil, errors.New(name + ": nil Backend")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := &Pool{b: b, c: c, nodes: make([]segment.Node, 1, 64), sides: make([]side, 1, 64), staticSide: high}
	if c.StaticEnd == EndLow {
		p.staticSide = low
	}
	p.spec = fmt.Sprintf("%s:align=%d,pad=%d,block=%d,grow=%s,static=%s,unknown=%s,static_end=%s",
		name, c.Align, c.Pad, c.Block, c.Grow, c.Static, c.Unknown, c.StaticEnd)
	return p, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.c }

// Spec returns the pool's full spec, as
// "dualcursor:align=512,pad=32,block=1073741824,grow=block,static=parameter+optimizer_state,unknown=before_first_free,static_end=high".
func (p *Pool) Spec() string { return p.spec }

// Stats returns the pool's counters.
func (p *Pool) Stats() gpualloc.Stats { return p.m.Stats() }

// Alloc is AllocCategory of an allocation of unknown category.
func (p *Pool) Alloc(size int64) (gpualloc.Block, error) {
	return p.AllocCategory(size, 0, gpualloc.CategoryUnknown)
}

// AllocCategory returns a block of [Config.RoundSize](size) bytes for an
// allocation of category cat: static memory if [Config.IsStatic] says so,
// else dynamic. The stream is ignored. On its side, the block is the best
// fit among the freed ranges of every device block (the smallest, then the
// lowest address), cut from the range's end nearer the side's own end;
// else it is cut from the gap between the cursors of the first device block
// whose gap is large enough, moving the side's cursor; else the pool takes
// a new device block as its growth policy says. If the device is out of
// memory, the pool returns its entirely free device blocks and asks again,
// then asks for a block of just the size needed; if that fails too, or the
// policy is GrowNone, the error wraps [gpualloc.ErrOutOfMemory] and the
// pool stays usable.
func (p *Pool) AllocCategory(size int64, _ uint64, cat gpualloc.Category) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: %w", name, size, gpualloc.ErrInvalidSize)
	}
	rounded := p.c.RoundSize(size)
	if rounded == 0 {
		p.m.CountOOM()
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: too large: %w", name, size, gpualloc.ErrOutOfMemory)
	}
	s := p.staticSide ^ 1
	if p.c.IsStatic(cat, p.freed) {
		s = p.staticSide
	}
	hit := true
	var n int32
	if f := p.idx[s].TakeBest(p.nodes, rounded); f != 0 {
		n = p.split(f, rounded, s)
	} else {
		g := p.gapFor(rounded)
		if g == 0 {
			var err error
			if g, err = p.grow(size, rounded); err != nil {
				return gpualloc.Block{}, err
			}
			hit = false
		}
		n = p.carve(g, rounded, s)
	}
	nd := &p.nodes[n]
	nd.Free, nd.Requested = false, size
	p.free -= rounded
	handle := p.live.Put(nd.Addr, n)
	p.m.CountAlloc(size, rounded, hit)
	return gpualloc.Block{Addr: nd.Addr, Size: rounded, Requested: size, Handle: handle}, nil
}

// split hands out rounded bytes of the free range f of side s, which the
// caller took out of its index: the whole range, or its end nearer the
// side's own end, the rest staying free and indexed. It returns the live
// node.
func (p *Pool) split(f int32, rounded int64, s side) int32 {
	rest := p.nodes[f].Size - rounded
	if rest == 0 {
		return f
	}
	x := p.newNode(s)
	nodes := p.nodes
	if s == low {
		nodes[x].Addr = nodes[f].Addr
		p.linkBefore(x, f)
		nodes[f].Addr += uint64(rounded)
	} else {
		nodes[x].Addr = nodes[f].Addr + uint64(rest)
		p.linkAfter(x, f)
	}
	nodes[x].Size = rounded
	nodes[f].Size = rest
	p.idx[s].Insert(nodes, f)
	return x
}

// carve hands out rounded bytes of the gap g from its side-s end: the low
// side's cursor moves up, the high side's down. It returns the live node.
func (p *Pool) carve(g int32, rounded int64, s side) int32 {
	x := p.newNode(s)
	nodes := p.nodes
	gp := &nodes[g]
	if s == low {
		nodes[x].Addr = gp.Addr
		gp.Addr += uint64(rounded)
		p.linkBefore(x, g)
	} else {
		nodes[x].Addr = gp.Addr + uint64(gp.Size-rounded)
		p.linkAfter(x, g)
	}
	gp.Size -= rounded
	nodes[x].Size = rounded
	return x
}

// gapFor returns the gap of the first device block, in the order they were
// taken, that holds rounded bytes, or 0.
func (p *Pool) gapFor(rounded int64) int32 {
	for i := range p.blocks {
		if g := p.blocks[i].gap; g != 0 && p.nodes[g].Size >= rounded {
			return g
		}
	}
	return 0
}

// grow takes a new device block for a request of size bytes, rounded to
// rounded, and returns its gap, the whole block.
func (p *Pool) grow(size, rounded int64) (int32, error) {
	if p.c.Grow == GrowNone && p.nblock > 0 {
		p.m.CountOOM()
		return 0, fmt.Errorf("%s: alloc of %d bytes: the cursors of the block meet and grow=none: %w", name, size, gpualloc.ErrOutOfMemory)
	}
	// After a release the device's free memory, and with block=0 the size
	// of a block, have changed.
	resize := func() int64 { return p.blockSize(rounded) }
	addr, want, err := segment.MallocRetry(p.b, &p.m, resize(), rounded, p.releaseFree, resize)
	if err != nil {
		return 0, fmt.Errorf("%s: alloc of %d bytes: device block of %d bytes: %w", name, size, want, err)
	}
	p.m.CountDeviceMalloc(want)
	return p.addBlock(addr, want), nil
}

// blockSize returns the size of the next device block for a request of
// rounded bytes: Block rounded up to Align, or the device's free memory
// rounded down to Align when Block is 0, and at least rounded.
func (p *Pool) blockSize(rounded int64) int64 {
	mask := p.c.Align - 1
	size := p.c.Block
	switch {
	case size == 0:
		free, _ := p.b.MemInfo()
		size = free &^ mask
	case size <= 1<<63-1-mask:
		size = (size + mask) &^ mask
	default:
		size &^= mask
	}
	return max(size, rounded)
}

// addBlock records a device block of size bytes at addr, as one gap.
func (p *Pool) addBlock(addr uint64, size int64) int32 {
	g := p.newNode(gapSide)
	nd := &p.nodes[g]
	nd.Addr, nd.Size, nd.Free = addr, size, true
	p.free += size
	p.nblock++
	for i := range p.blocks {
		if p.blocks[i].gap == 0 {
			p.blocks[i] = block{addr, size, g}
			return g
		}
	}
	p.blocks = append(p.blocks, block{addr, size, g})
	return g
}

// Free returns a live block to its side. It merges with the free ranges
// just before and after it; a range next to the gap joins the gap, so
// that the side's cursor moves back over every free range at its top. No
// memory goes back to the device. A block that is not live, or whose Size or
// Requested differ from what Alloc returned, gives an error wrapping
// [gpualloc.ErrInvalidFree] and changes nothing.
func (p *Pool) Free(b gpualloc.Block) error {
	pn := p.live.Get(b.Handle, b.Addr)
	if pn == nil {
		return blocktable.NotLive(name, b)
	}
	n := *pn
	nodes := p.nodes
	nd := &nodes[n]
	if nd.Size != b.Size || nd.Requested != b.Requested {
		return blocktable.Mismatch(name, b, nd.Size, nd.Requested)
	}
	p.live.Delete(b.Handle)
	p.m.CountFree(nd.Requested, nd.Size)
	p.free += nd.Size
	nd.Free, nd.Requested = true, 0
	p.freed = true
	s := p.sides[n]
	if prev := nd.Prev; prev != 0 && nodes[prev].Free {
		if p.sides[prev] != gapSide {
			p.idx[s].Remove(nodes, prev)
		}
		p.mergeNext(prev) // the gap, if prev is the gap
		n = prev
	}
	if next := nodes[n].Next; next != 0 && nodes[next].Free {
		if p.sides[next] == gapSide {
			// The gap takes n in: its start moves down to n's.
			nodes[next].Addr = nodes[n].Addr
			nodes[next].Size += nodes[n].Size
			p.unlink(n)
			p.recycle(n)
			n = next
		} else {
			p.idx[s].Remove(nodes, next)
			p.mergeNext(n)
		}
	}
	if p.sides[n] != gapSide {
		p.idx[s].Insert(nodes, n)
	}
	return nil
}

// mergeNext merges into the free node n the free node after it, which is
// out of any index.
func (p *Pool) mergeNext(n int32) {
	x := p.nodes[n].Next
	p.nodes[n].Size += p.nodes[x].Size
	p.unlink(x)
	p.recycle(x)
}

// ReleaseAll returns every entirely free device block to the device. Live
// blocks, and the device blocks that hold them, stay. A device block the
// device refuses to free stays too, and the device's errors are joined in
// the one returned.
func (p *Pool) ReleaseAll() error {
	if _, err := p.releaseFree(); err != nil {
		return fmt.Errorf("%s: release: %w", name, err)
	}
	return nil
}

// releaseFree returns the entirely free device blocks to the device, and
// the bytes it returned.
func (p *Pool) releaseFree() (released int64, err error) {
	for i := range p.blocks {
		bl := &p.blocks[i]
		if bl.gap == 0 || p.nodes[bl.gap].Size != bl.size {
			continue
		}
		if e := p.b.Free(bl.addr, bl.size); e != nil {
			err = errors.Join(err, e)
			continue
		}
		p.m.CountDeviceFree(bl.size)
		p.free -= bl.size
		released += bl.size
		p.recycle(bl.gap)
		*bl = block{}
		p.nblock--
	}
	return released, err
}

// FreeSpace returns the largest free range (a freed range or a gap) and
// the total free bytes in the device blocks the pool holds: the total in
// O(1), the largest in O(log k) for the free ranges of each side and
// O(blocks) for the gaps.
func (p *Pool) FreeSpace() (largest, total int64) {
	for s := range p.idx {
		if n := p.idx[s].Max(p.nodes); n != 0 {
			largest = max(largest, p.nodes[n].Size)
		}
	}
	for i := range p.blocks {
		if g := p.blocks[i].gap; g != 0 {
			largest = max(largest, p.nodes[g].Size)
		}
	}
	return largest, p.free
}

// newNode returns an unused node of side s, zeroed. It may replace p.nodes.
func (p *Pool) newNode(s side) int32 {
	n := segment.NewNode(&p.nodes, &p.spare)
	if int(n) == len(p.sides) {
		p.sides = append(p.sides, s)
	} else {
		p.sides[n] = s
	}
	return n
}

func (p *Pool) recycle(n int32) {
	p.nodes[n] = segment.Node{}
	p.spare = append(p.spare, n)
}

// linkBefore links the new node x before node y.
func (p *Pool) linkBefore(x, y int32) {
	nodes := p.nodes
	prev := nodes[y].Prev
	nodes[x].Prev, nodes[x].Next = prev, y
	nodes[y].Prev = x
	if prev != 0 {
		nodes[prev].Next = x
	}
}

// linkAfter links the new node x after node y.
func (p *Pool) linkAfter(x, y int32) {
	nodes := p.nodes
	next := nodes[y].Next
	nodes[x].Prev, nodes[x].Next = y, next
	nodes[y].Next = x
	if next != 0 {
		nodes[next].Prev = x
	}
}

// unlink takes node x out of its block's list.
func (p *Pool) unlink(x int32) {
	nodes := p.nodes
	prev, next := nodes[x].Prev, nodes[x].Next
	if prev != 0 {
		nodes[prev].Next = next
	}
	if next != 0 {
		nodes[next].Prev = prev
	}
}
