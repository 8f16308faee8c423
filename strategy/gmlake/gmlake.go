package gmlake

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/internal/torchsize"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "gmlake"

// An Allocator is GMLake's caching allocator. It implements
// [gpualloc.Allocator], [gpualloc.StreamAllocator],
// [gpualloc.StatsReporter], [gpualloc.Releaser], [gpualloc.Specer] and
// [gpualloc.FreeSpaceReporter]. It is not safe for concurrent use.
type Allocator struct {
	b    gpualloc.Backend
	vm   gpualloc.VirtualMemory // nil: no stitching, large segments from Malloc
	c    Config
	spec string

	nodes []segment.Node // pBlocks and small blocks; nodes[0] is unused
	meta  []meta         // beside nodes
	spare []int32

	segs      []segRec // segments; a zero size marks an unused slot
	spareSegs []int32

	chunks      []chunk // physical chunks of the large segments
	spareChunks []int32

	sb      []sblock       // stitched blocks; sb[0] is unused
	sbNodes []segment.Node // their index nodes (Addr, Size, Requested)
	spareSB []int32

	pools []*streamPools
	live  blocktable.Table[int32] // live blocks: node > 0, -sBlock < 0

	m        gpualloc.Meter
	devAlloc int64 // device allocations so far (Malloc and Create)
	free     int64 // bytes of free pBlocks and free small blocks
	fused    int64 // bytes of stitched blocks made and not collected (total_fuse_size)
}

// meta is what a block records beside its segment.Node.
type meta struct {
	seg   int32 // index in Allocator.segs
	pool  int32 // index in Allocator.pools
	small bool  // of the small pool
	lent  bool  // a pBlock whose chunks a live sBlock uses
}

// A segRec is a segment: a Malloc of the small pool (or of the large pool
// without virtual memory), or a range of the large pool mapped to chunks.
type segRec struct {
	addr   uint64
	size   int64
	first  int32   // the block at addr
	chunks []int32 // the chunks mapped in order, nil for a Malloc
	mapped int     // mappings of its chunks into sBlocks
}

// A chunk is 2 MiB of physical memory: one Create, mapped in its segment
// and in the sBlocks that stitch it.
type chunk struct {
	h     uint64
	owner int32   // the pBlock that holds it, kept while its segment has mappings
	used  bool    // in use by a live block, kept while it has mappings
	sb    []int32 // the sBlocks that map it
}

// An sblock is a stitched block (sBlock): a range of its own to which the
// chunks of several pBlocks are mapped. While live, its first used chunks
// hold the block handed out.
type sblock struct {
	chunks []int32 // mapped in order at base + i*ChunkSize; -1 once unmapped
	used   int     // chunks of the live block, 0 when not live
	freeN  int     // chunks not in use
	pool   int32
	live   bool
	inSet  bool // in its pool's set of reusable sBlocks
	doomed bool // a chunk was released under it: collect it when freed
}

// streamPools are a stream's pools: free small blocks and free pBlocks,
// each ordered by (size, address), and reusable sBlocks, ordered likewise.
type streamPools struct {
	stream       uint64
	small, large segment.Sorted
	fused        segment.Sorted // over sbNodes
}

func (p *streamPools) set(small bool) *segment.Sorted {
	if small {
		return &p.small
	}
	return &p.large
}

// New returns an allocator that takes its memory from b with configuration
// c. On a b that is a [gpualloc.VirtualMemory] whose granularity divides
// 2 MiB, large segments are made of 2 MiB chunks and stitched; on any other
// b they come from Malloc and nothing is stitched (glake's vmmDefragment=0).
// A setting out of range is an error that names it and wraps a
// [*gpualloc.ParamError].
func New(b gpualloc.Backend, c Config) (*Allocator, error) {
	if b == nil {
		return nil, errors.New(name + ": nil Backend")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	a := &Allocator{b: b, c: c, spec: c.spec(),
		nodes: make([]segment.Node, 1, 64), meta: make([]meta, 1, 64),
		sb: make([]sblock, 1, 8), sbNodes: make([]segment.Node, 1, 8)}
	if vm, ok := b.(gpualloc.VirtualMemory); ok {
		if g := vm.Granularity(); g > 0 && ChunkSize%g == 0 {
			a.vm = vm
		}
	}
	return a, nil
}

// Config returns the allocator's configuration.
func (a *Allocator) Config() Config { return a.c }

// Stitching reports whether the allocator stitches: whether its backend
// has virtual memory.
func (a *Allocator) Stitching() bool { return a.vm != nil }

// Spec returns the allocator's full spec, every setting with its value.
func (a *Allocator) Spec() string { return a.spec }

// Stats returns the allocator's counters.
func (a *Allocator) Stats() gpualloc.Stats { return a.m.Stats() }

// Alloc is AllocStream on stream 0.
func (a *Allocator) Alloc(size int64) (gpualloc.Block, error) { return a.AllocStream(size, 0) }

// AllocStream returns a block for a request of size bytes on stream, as
// GMLake's DeviceCachingAllocator::malloc does; see the package
// documentation for the order of its steps. A failure wraps
// [gpualloc.ErrOutOfMemory]; the allocator stays usable.
func (a *Allocator) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: %w", name, size, gpualloc.ErrInvalidSize)
	}
	rounded := RoundSize(size)
	if rounded == 0 {
		a.m.CountOOM()
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: rounded size overflows: %w", name, size, gpualloc.ErrOutOfMemory)
	}
	small := rounded <= torchsize.SmallSize
	pi := a.poolIndex(stream)
	set := a.pools[pi].set(small)
	before := a.devAlloc
	// get_free_block: the best free block of the pool, else (large pool) a
	// reusable sBlock within the reuse limit.
	if n := set.TakeBest(a.nodes, rounded); n != 0 {
		return a.handOut(n, rounded, size, stream, before), nil
	}
	if !small {
		if s := a.reuseFused(pi, rounded); s != 0 {
			return a.handOutFused(s, size, stream, before), nil
		}
	}
	// get_fused_fragmented_blocks(0), realloc_block,
	// get_fused_fragmented_blocks(1), release_cached_blocks and
	// realloc_block, get_fused_fragmented_blocks(2).
	for step := 0; ; step++ {
		var n, s int32
		var err error
		switch step {
		case 0, 2, 4:
			if !small {
				s, err = a.stitch(pi, rounded, step/2)
			}
		case 1:
			n, err = a.newSegment(rounded, pi, small)
		case 3:
			if err = a.releaseCached(); err == nil {
				a.m.CountRetry()
				n, err = a.newSegment(rounded, pi, small)
			}
		default:
			a.m.CountOOM()
			return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes (%d rounded): segment of %d bytes: %w",
				name, size, rounded, torchsize.AllocationSize(rounded), gpualloc.ErrOutOfMemory)
		}
		switch {
		case err != nil:
			return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes (%d rounded): %w", name, size, rounded, err)
		case s != 0:
			return a.handOutFused(s, size, stream, before), nil
		case n != 0:
			return a.handOut(n, rounded, size, stream, before), nil
		}
	}
}

// poolIndex returns the index of stream's pools, made on first use.
func (a *Allocator) poolIndex(stream uint64) int32 {
	for i, p := range a.pools {
		if p.stream == stream {
			return int32(i)
		}
	}
	a.pools = append(a.pools, &streamPools{stream: stream})
	return int32(len(a.pools) - 1)
}

// handOut hands out the free block n, out of its pool, for a request of
// requested bytes rounded to rounded: the rest is split off as a free block
// when at least 512 bytes (small pool) or 2 MiB (large pool, kGranularity)
// remain (should_split).
func (a *Allocator) handOut(n int32, rounded, requested int64, stream uint64, before int64) gpualloc.Block {
	mt := a.meta[n]
	rest := a.nodes[n].Size - rounded
	if (mt.small && rest >= torchsize.MinBlockSize) || (!mt.small && rest >= ChunkSize) {
		r := a.split(n, rounded)
		a.pools[mt.pool].set(mt.small).Insert(a.nodes, r)
	}
	nd := &a.nodes[n]
	nd.Free = false
	nd.Requested = requested
	a.free -= nd.Size
	a.markChunks(n, true)
	handle := a.live.Put(nd.Addr, n)
	a.m.CountAlloc(requested, nd.Size, a.devAlloc == before)
	return gpualloc.Block{Addr: nd.Addr, Size: nd.Size, Requested: requested, Stream: stream, Handle: handle}
}

// split cuts block n at size bytes and returns the new block after it,
// with n's meta, free and in no pool.
func (a *Allocator) split(n int32, size int64) int32 {
	r := a.newNode()
	segment.SplitAt(a.nodes, n, r, size)
	a.meta[r] = a.meta[n]
	a.setOwner(r)
	return r
}

// chunkRange returns the chunks of pBlock n: indexes into its segment's.
func (a *Allocator) chunkRange(n int32) (s *segRec, first, last int) {
	s = &a.segs[a.meta[n].seg]
	first = int((a.nodes[n].Addr - s.addr) / ChunkSize)
	return s, first, first + int(a.nodes[n].Size/ChunkSize)
}

// setOwner records n as the owner of its chunks, while its segment has
// mappings into sBlocks.
func (a *Allocator) setOwner(n int32) {
	if a.meta[n].small {
		return
	}
	s, first, last := a.chunkRange(n)
	if s.mapped == 0 {
		return
	}
	for _, c := range s.chunks[first:last] {
		a.chunks[c].owner = n
	}
}

// markChunks marks the chunks of pBlock n used or free, while its segment
// has mappings, and updates the sBlocks that map them.
func (a *Allocator) markChunks(n int32, used bool) {
	if a.meta[n].small {
		return
	}
	s, first, last := a.chunkRange(n)
	if s.mapped == 0 {
		return
	}
	for _, c := range s.chunks[first:last] {
		a.markChunk(c, used, 0)
	}
}

// markChunk marks chunk c used or free and updates the free counts of the
// sBlocks that map it, but by (which accounts for it itself): a not live
// sBlock is reusable exactly while all its chunks are free.
func (a *Allocator) markChunk(c int32, used bool, by int32) {
	ch := &a.chunks[c]
	if ch.used == used {
		return
	}
	ch.used = used
	for _, o := range ch.sb {
		if o == by {
			continue
		}
		s := &a.sb[o]
		if used {
			s.freeN--
			if s.inSet {
				a.pools[s.pool].fused.Remove(a.sbNodes, o)
				s.inSet = false
			}
		} else {
			s.freeN++
			a.maybeReusable(o)
		}
	}
}

// maybeReusable puts the sBlock s in its pool's set of reusable sBlocks if
// it is not live and all its chunks are free.
func (a *Allocator) maybeReusable(o int32) {
	s := &a.sb[o]
	if !s.live && !s.inSet && !s.doomed && s.freeN == len(s.chunks) {
		a.pools[s.pool].fused.Insert(a.sbNodes, o)
		s.inSet = true
	}
}

// reuseFused takes out of the pool the smallest reusable sBlock of at
// least rounded bytes if it is at most ReuseLimit times rounded
// (get_free_block's sBlock branch), and puts its first rounded bytes of
// chunks in use: the pBlocks that hold them are split at chunk boundaries
// into runs lent to the sBlock and runs that stay free. It returns 0 if
// there is no such sBlock.
func (a *Allocator) reuseFused(pi int32, rounded int64) int32 {
	if a.vm == nil {
		return 0
	}
	set := &a.pools[pi].fused
	o := set.TakeBest(a.sbNodes, rounded)
	if o == 0 {
		return 0
	}
	if float64(a.sbNodes[o].Size) > float64(rounded)*a.c.ReuseLimit {
		set.Insert(a.sbNodes, o)
		return 0
	}
	s := &a.sb[o]
	s.inSet = false
	k := int(rounded / ChunkSize)
	var owners []int32
	for _, c := range s.chunks[:k] {
		if p := a.chunks[c].owner; len(owners) == 0 || owners[len(owners)-1] != p {
			owners = append(owners, p)
		}
		a.markChunk(c, true, o)
	}
	s.freeN -= k
	s.used = k
	s.live = true
	for _, p := range owners {
		if a.nodes[p].Free {
			a.carve(p)
		}
	}
	return o
}

// carve takes the free pBlock p, some of whose chunks are now in use, out
// of its pool and splits it into runs of used chunks, lent, and runs of
// free chunks, back in the pool.
func (a *Allocator) carve(p int32) {
	mt := a.meta[p]
	set := a.pools[mt.pool].set(false)
	set.Remove(a.nodes, p)
	a.free -= a.nodes[p].Size
	n := p
	for {
		s, first, last := a.chunkRange(n)
		used := a.chunks[s.chunks[first]].used
		i := first + 1
		for i < last && a.chunks[s.chunks[i]].used == used {
			i++
		}
		if i < last {
			a.split(n, int64(i-first)*ChunkSize)
		}
		if used {
			a.nodes[n].Free = false
			a.meta[n].lent = true
		} else {
			a.nodes[n].Free = true
			set.Insert(a.nodes, n)
			a.free += a.nodes[n].Size
		}
		if i == last {
			return
		}
		n = a.nodes[n].Next
	}
}

// handOutFused hands out the live sBlock o.
func (a *Allocator) handOutFused(o int32, requested int64, stream uint64, before int64) gpualloc.Block {
	sn := &a.sbNodes[o]
	size := int64(a.sb[o].used) * ChunkSize
	sn.Requested = requested
	handle := a.live.Put(sn.Addr, -o)
	a.m.CountAlloc(requested, size, a.devAlloc == before)
	return gpualloc.Block{Addr: sn.Addr, Size: size, Requested: requested, Stream: stream, Handle: handle}
}

// stitch makes a live sBlock of rounded bytes out of the stream's free
// pBlocks (get_fused_fragmented_blocks at the given time): if the request
// is of the large pool and at least FragLimit, time is at least
// DefragLevel, the pool holds at least two free pBlocks and the largest of
// them, taken from the largest down, add up to rounded bytes, then the last
// one taken is split so that they add up exactly, a range is reserved and
// their chunks are mapped into it in that order. It returns 0 otherwise.
func (a *Allocator) stitch(pi int32, rounded int64, time int) (int32, error) {
	if a.vm == nil || rounded < a.c.FragLimit || time < a.c.DefragLevel {
		return 0, nil
	}
	set := &a.pools[pi].large
	if set.Len() < 2 {
		return 0, nil
	}
	var taken []int32
	var sum int64
	for sum < rounded {
		n := set.Max(a.nodes)
		if n == 0 {
			break
		}
		set.Remove(a.nodes, n)
		taken = append(taken, n)
		sum += a.nodes[n].Size
	}
	if sum < rounded {
		for _, n := range taken {
			set.Insert(a.nodes, n)
		}
		return 0, nil
	}
	base, err := a.vm.Reserve(rounded)
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		// Out of address space: collect the sBlocks not live and retry.
		if err = a.collect(); err == nil {
			base, err = a.vm.Reserve(rounded)
		}
	}
	if err != nil {
		for _, n := range taken {
			set.Insert(a.nodes, n)
		}
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			return 0, nil
		}
		return 0, err
	}
	if excess := sum - rounded; excess >= ChunkSize {
		last := taken[len(taken)-1]
		r := a.split(last, a.nodes[last].Size-excess)
		set.Insert(a.nodes, r)
	}
	o := a.newSB()
	var cs []int32
	for _, n := range taken {
		s, first, last := a.chunkRange(n)
		cs = append(cs, s.chunks[first:last]...)
	}
	for i, c := range cs {
		if err := a.vm.Map(base+uint64(i)*ChunkSize, a.chunks[c].h); err != nil {
			for j := range i {
				if a.vm.Unmap(base+uint64(j)*ChunkSize, ChunkSize) == nil {
					a.m.CountUnmap()
				}
			}
			a.vm.Unreserve(base, rounded)
			for _, n := range taken {
				set.Insert(a.nodes, n)
			}
			a.recycleSB(o)
			return 0, err
		}
		a.m.CountMap()
	}
	for _, n := range taken {
		s, first, last := a.chunkRange(n)
		if s.mapped == 0 {
			// The first mappings of the segment: owners and use are kept
			// from now on.
			for m := s.first; m != 0; m = a.nodes[m].Next {
				_, f, l := a.chunkRange(m)
				for _, c := range s.chunks[f:l] {
					a.chunks[c].owner = m
					a.chunks[c].used = !a.nodes[m].Free && m != n
				}
			}
		}
		s.mapped += last - first
		a.nodes[n].Free = false
		a.meta[n].lent = true
		a.free -= a.nodes[n].Size
	}
	for _, c := range cs {
		a.markChunk(c, true, o)
		a.chunks[c].sb = append(a.chunks[c].sb, o)
	}
	a.sb[o] = sblock{chunks: cs, used: len(cs), pool: pi, live: true}
	a.sbNodes[o] = segment.Node{Addr: base, Size: rounded}
	a.fused += rounded
	if a.fused > a.c.AutoGC {
		if err := a.collect(); err != nil {
			return o, err
		}
	}
	return o, nil
}

// newSegment makes a segment for a block of rounded bytes (realloc_block)
// and returns its one block, free and not in any pool; 0 when the device
// refuses. With virtual memory a large segment is a reserved range with a
// 2 MiB chunk created and mapped at each of its pages.
func (a *Allocator) newSegment(rounded int64, pi int32, small bool) (int32, error) {
	size := torchsize.AllocationSize(rounded)
	if small || a.vm == nil {
		addr, err := a.b.Malloc(size)
		if err != nil {
			if errors.Is(err, gpualloc.ErrOutOfMemory) {
				return 0, nil
			}
			return 0, err
		}
		a.countMalloc(size)
		return a.addSegment(addr, size, pi, small, nil), nil
	}
	base, err := a.vm.Reserve(size)
	if err != nil {
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			return 0, nil
		}
		return 0, err
	}
	cs := make([]int32, 0, size/ChunkSize)
	for i := range size / ChunkSize {
		h, err := a.vm.Create(ChunkSize)
		if err == nil {
			a.countMalloc(ChunkSize)
			if err = a.vm.Map(base+uint64(i)*ChunkSize, h); err == nil {
				a.m.CountMap()
				c := a.newChunk()
				a.chunks[c] = chunk{h: h}
				cs = append(cs, c)
				continue
			}
			if rerr := a.vm.Release(h); rerr == nil {
				a.m.CountDeviceFree(ChunkSize)
			}
		}
		uerr := a.unmapRelease(base, cs)
		uerr = errors.Join(uerr, a.vm.Unreserve(base, size))
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			return 0, uerr
		}
		return 0, errors.Join(err, uerr)
	}
	return a.addSegment(base, size, pi, false, cs), nil
}

// unmapRelease unmaps the chunks cs mapped from base and releases them.
func (a *Allocator) unmapRelease(base uint64, cs []int32) error {
	var errs []error
	for i, c := range cs {
		if err := a.vm.Unmap(base+uint64(i)*ChunkSize, ChunkSize); err != nil {
			errs = append(errs, err)
			continue
		}
		a.m.CountUnmap()
		if err := a.vm.Release(a.chunks[c].h); err != nil {
			errs = append(errs, err)
			continue
		}
		a.m.CountDeviceFree(ChunkSize)
		a.recycleChunk(c)
	}
	return errors.Join(errs...)
}

func (a *Allocator) countMalloc(size int64) {
	a.devAlloc++
	a.m.CountDeviceMalloc(size)
}

// addSegment records a segment and returns its one block, free and in no
// pool.
func (a *Allocator) addSegment(addr uint64, size int64, pi int32, small bool, cs []int32) int32 {
	a.free += size
	n := a.newNode()
	a.nodes[n] = segment.Node{Addr: addr, Size: size, Free: true}
	s := segRec{addr: addr, size: size, first: n, chunks: cs}
	var si int32
	if k := len(a.spareSegs); k > 0 {
		si = a.spareSegs[k-1]
		a.spareSegs = a.spareSegs[:k-1]
		a.segs[si] = s
	} else {
		si = int32(len(a.segs))
		a.segs = append(a.segs, s)
	}
	a.meta[n] = meta{pool: pi, seg: si, small: small}
	return n
}

// Free returns a live block. A pBlock or small block goes back to its
// pool, merged with the free blocks just before and after it in its
// segment; an sBlock's chunks are freed, the pBlocks that held them go back
// to their pool once all their chunks are free, and the sBlock itself
// becomes reusable if all its chunks are free (else it waits, fragmented,
// for them or for collection). No memory goes back to the device. A block
// that is not live, or whose Size or Requested differ from what Alloc
// returned, gives an error wrapping [gpualloc.ErrInvalidFree] and changes
// nothing.
func (a *Allocator) Free(b gpualloc.Block) error {
	p := a.live.Get(b.Handle, b.Addr)
	if p == nil {
		return blocktable.NotLive(name, b)
	}
	if x := *p; x < 0 {
		o := -x
		size, req := int64(a.sb[o].used)*ChunkSize, a.sbNodes[o].Requested
		if size != b.Size || req != b.Requested {
			return blocktable.Mismatch(name, b, size, req)
		}
		a.live.Delete(b.Handle)
		a.m.CountFree(req, size)
		return a.freeFused(o)
	}
	n := *p
	nd := &a.nodes[n]
	if nd.Size != b.Size || nd.Requested != b.Requested {
		return blocktable.Mismatch(name, b, nd.Size, nd.Requested)
	}
	a.live.Delete(b.Handle)
	a.m.CountFree(nd.Requested, nd.Size)
	nd.Requested = 0
	a.markChunks(n, false)
	a.release(n)
	return nil
}

// release makes block n free, merged with its free neighbours, in its pool
// (free_block).
func (a *Allocator) release(n int32) {
	mt := a.meta[n]
	a.meta[n].lent = false
	nodes := a.nodes
	nodes[n].Free = true
	a.free += nodes[n].Size
	set := a.pools[mt.pool].set(mt.small)
	if prev := nodes[n].Prev; prev != 0 && nodes[prev].Free {
		set.Remove(nodes, prev)
		a.mergeNext(prev)
		n = prev
	}
	if next := nodes[n].Next; next != 0 && nodes[next].Free {
		set.Remove(nodes, next)
		a.mergeNext(n)
	}
	a.setOwner(n)
	set.Insert(a.nodes, n)
}

// mergeNext merges into block n the free block after it.
func (a *Allocator) mergeNext(n int32) { a.recycle(segment.MergeNext(a.nodes, n)) }

// freeFused frees the live sBlock o (update_block).
func (a *Allocator) freeFused(o int32) error {
	s := &a.sb[o]
	var owners []int32
	for _, c := range s.chunks[:s.used] {
		if p := a.chunks[c].owner; len(owners) == 0 || owners[len(owners)-1] != p {
			owners = append(owners, p)
		}
		a.markChunk(c, false, o)
	}
	s.freeN += s.used
	s.used = 0
	s.live = false
	a.sbNodes[o].Requested = 0
	for _, p := range owners {
		if a.meta[p].lent && a.chunksFree(p) {
			a.release(p)
		}
	}
	if a.sb[o].doomed {
		return a.collectOne(o)
	}
	a.maybeReusable(o)
	return nil
}

// chunksFree reports whether every chunk of pBlock p is free.
func (a *Allocator) chunksFree(p int32) bool {
	s, first, last := a.chunkRange(p)
	for _, c := range s.chunks[first:last] {
		if a.chunks[c].used {
			return false
		}
	}
	return true
}

// collect collects every sBlock that is not live
// (garbage_collect_fused_blocks).
func (a *Allocator) collect() error {
	var errs []error
	for o := int32(1); o < int32(len(a.sb)); o++ {
		if s := &a.sb[o]; s.chunks != nil && !s.live {
			if err := a.collectOne(o); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// collectOne unmaps the sBlock o, not live, and frees its range.
func (a *Allocator) collectOne(o int32) error {
	s := &a.sb[o]
	base, size := a.sbNodes[o].Addr, a.sbNodes[o].Size
	if s.inSet {
		a.pools[s.pool].fused.Remove(a.sbNodes, o)
	}
	var errs []error
	for i, c := range s.chunks {
		if c < 0 {
			continue
		}
		if err := a.vm.Unmap(base+uint64(i)*ChunkSize, ChunkSize); err != nil {
			errs = append(errs, err)
			continue
		}
		a.m.CountUnmap()
		a.unlinkChunk(c, o)
	}
	if len(errs) == 0 {
		if err := a.vm.Unreserve(base, size); err != nil {
			errs = append(errs, err)
		}
	}
	a.fused -= size
	a.recycleSB(o)
	return errors.Join(errs...)
}

// unlinkChunk removes the sBlock o from the mappers of chunk c.
func (a *Allocator) unlinkChunk(c, o int32) {
	ch := &a.chunks[c]
	for i, x := range ch.sb {
		if x == o {
			ch.sb = append(ch.sb[:i], ch.sb[i+1:]...)
			break
		}
	}
	a.segs[a.meta[ch.owner].seg].mapped--
}

// whole reports whether block n is free and a whole segment.
func (a *Allocator) whole(n int32) bool {
	nd := &a.nodes[n]
	return nd.Free && nd.Prev == 0 && nd.Next == 0
}

// releaseSegment returns to the device the segment of the free block n, a
// whole segment in its pool (release_block). The sBlocks that map its
// chunks are collected, or, if live (the chunk lies past their block),
// lose the chunk and are collected when freed.
func (a *Allocator) releaseSegment(n int32) error {
	mt := a.meta[n]
	si := mt.seg
	s := &a.segs[si]
	var errs []error
	if s.chunks == nil {
		if err := a.b.Free(s.addr, s.size); err != nil {
			return err
		}
		a.m.CountDeviceFree(s.size)
	} else {
		for _, c := range s.chunks {
			for len(a.chunks[c].sb) > 0 {
				o := a.chunks[c].sb[0]
				if !a.sb[o].live {
					if err := a.collectOne(o); err != nil {
						return err
					}
					continue
				}
				if err := a.dropChunk(o, c); err != nil {
					return err
				}
			}
		}
		if err := a.unmapRelease(s.addr, s.chunks); err != nil {
			return err
		}
		if err := a.vm.Unreserve(s.addr, s.size); err != nil {
			errs = append(errs, err)
		}
	}
	a.pools[mt.pool].set(mt.small).Remove(a.nodes, n)
	a.free -= s.size
	a.recycle(n)
	a.segs[si] = segRec{}
	a.spareSegs = append(a.spareSegs, si)
	return errors.Join(errs...)
}

// dropChunk unmaps chunk c from the live sBlock o, which maps it past its
// block, and dooms o.
func (a *Allocator) dropChunk(o, c int32) error {
	s := &a.sb[o]
	for i, x := range s.chunks {
		if x != c {
			continue
		}
		if err := a.vm.Unmap(a.sbNodes[o].Addr+uint64(i)*ChunkSize, ChunkSize); err != nil {
			return err
		}
		a.m.CountUnmap()
		a.unlinkChunk(c, o)
		s.chunks[i] = -1
		s.freeN--
		s.doomed = true
		return nil
	}
	return fmt.Errorf("%s: internal error: chunk %d not in sBlock %d", name, c, o)
}

// releaseCached returns every free whole segment of both pools to the
// device (release_cached_blocks). A segment the device refuses to free
// stays, and the errors are joined in the one returned.
func (a *Allocator) releaseCached() error {
	var errs []error
	for i := range a.segs {
		s := &a.segs[i]
		if s.size != 0 && a.whole(s.first) {
			if err := a.releaseSegment(s.first); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ReleaseAll returns every free whole segment to the device and collects
// every sBlock that is not live, as GMLake's emptyCache does. Live blocks
// and the segments that hold them stay.
func (a *Allocator) ReleaseAll() error {
	err := a.releaseCached()
	if a.vm != nil {
		err = errors.Join(err, a.collect())
	}
	if err != nil {
		return fmt.Errorf("%s: release: %w", name, err)
	}
	return nil
}

// FreeSpace returns the largest free block (a free pBlock, small block or
// reusable sBlock) and the bytes of free pBlocks and small blocks; an
// sBlock's bytes are those of its pBlocks.
func (a *Allocator) FreeSpace() (largest, total int64) {
	for _, p := range a.pools {
		if n := p.small.Max(a.nodes); n != 0 {
			largest = max(largest, a.nodes[n].Size)
		}
		if n := p.large.Max(a.nodes); n != 0 {
			largest = max(largest, a.nodes[n].Size)
		}
		if o := p.fused.Max(a.sbNodes); o != 0 {
			largest = max(largest, a.sbNodes[o].Size)
		}
	}
	return largest, a.free
}

func (a *Allocator) newNode() int32 {
	n := segment.NewNode(&a.nodes, &a.spare)
	if int(n) == len(a.meta) {
		a.meta = append(a.meta, meta{})
	}
	return n
}

func (a *Allocator) recycle(n int32) {
	a.meta[n] = meta{}
	segment.RecycleNode(a.nodes, &a.spare, n)
}

func (a *Allocator) newChunk() int32 {
	if k := len(a.spareChunks); k > 0 {
		c := a.spareChunks[k-1]
		a.spareChunks = a.spareChunks[:k-1]
		return c
	}
	a.chunks = append(a.chunks, chunk{})
	return int32(len(a.chunks) - 1)
}

func (a *Allocator) recycleChunk(c int32) {
	a.chunks[c] = chunk{}
	a.spareChunks = append(a.spareChunks, c)
}

func (a *Allocator) newSB() int32 {
	o := segment.NewNode(&a.sbNodes, &a.spareSB)
	if int(o) == len(a.sb) {
		a.sb = append(a.sb, sblock{})
	}
	return o
}

func (a *Allocator) recycleSB(o int32) {
	a.sb[o] = sblock{}
	segment.RecycleNode(a.sbNodes, &a.spareSB, o)
}
