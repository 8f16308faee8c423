package gmlake

import (
	"errors"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// This file holds the stitched blocks (sBlocks): ranges of their own to
// which the chunks of several free pBlocks are mapped, made when no free
// block fits, reused, freed and collected.

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
				a.cache.Streams[s.pool].X.fused.Remove(a.sbNodes, o)
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
		a.cache.Streams[s.pool].X.fused.Insert(a.sbNodes, o)
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
	set := &a.cache.Streams[pi].X.fused
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
		if a.cache.Nodes[p].Free {
			a.carve(p)
		}
	}
	return o
}

// carve takes the free pBlock p, some of whose chunks are now in use, out
// of its pool and splits it into runs of used chunks, lent, and runs of
// free chunks, back in the pool.
func (a *Allocator) carve(p int32) {
	mt := a.cache.Meta[p]
	set := a.cache.Set(mt.Pool, false)
	set.Remove(a.cache.Nodes, p)
	a.cache.FreeBytes -= a.cache.Nodes[p].Size
	n := p
	for {
		s, first, last := a.chunkRange(n)
		used := a.chunks[s.X.chunks[first]].used
		i := first + 1
		for i < last && a.chunks[s.X.chunks[i]].used == used {
			i++
		}
		if i < last {
			a.split(n, int64(i-first)*ChunkSize)
		}
		if used {
			a.cache.Nodes[n].Free = false
			a.cache.Meta[n].X.lent = true
		} else {
			a.cache.Nodes[n].Free = true
			set.Insert(a.cache.Nodes, n)
			a.cache.FreeBytes += a.cache.Nodes[n].Size
		}
		if i == last {
			return
		}
		n = a.cache.Nodes[n].Next
	}
}

// handOutFused hands out the live sBlock o.
func (a *Allocator) handOutFused(o int32, requested int64, stream uint64, before int64) gpualloc.Block {
	sn := &a.sbNodes[o]
	size := int64(a.sb[o].used) * ChunkSize
	sn.Requested = requested
	handle := a.cache.Live.Put(sn.Addr, -o)
	a.cache.M.CountAlloc(requested, size, a.devAlloc == before)
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
	set := a.cache.Set(pi, false)
	if set.Len() < 2 {
		return 0, nil
	}
	var taken []int32
	var sum int64
	for sum < rounded {
		n := set.Max(a.cache.Nodes)
		if n == 0 {
			break
		}
		set.Remove(a.cache.Nodes, n)
		taken = append(taken, n)
		sum += a.cache.Nodes[n].Size
	}
	if sum < rounded {
		for _, n := range taken {
			set.Insert(a.cache.Nodes, n)
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
			set.Insert(a.cache.Nodes, n)
		}
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			return 0, nil
		}
		return 0, err
	}
	if excess := sum - rounded; excess >= ChunkSize {
		last := taken[len(taken)-1]
		r := a.split(last, a.cache.Nodes[last].Size-excess)
		set.Insert(a.cache.Nodes, r)
	}
	o := a.newSB()
	var cs []int32
	for _, n := range taken {
		s, first, last := a.chunkRange(n)
		cs = append(cs, s.X.chunks[first:last]...)
	}
	for i, c := range cs {
		if err := a.vm.Map(base+uint64(i)*ChunkSize, a.chunks[c].h); err != nil {
			for j := range i {
				if a.vm.Unmap(base+uint64(j)*ChunkSize, ChunkSize) == nil {
					a.cache.M.CountUnmap()
				}
			}
			a.vm.Unreserve(base, rounded)
			for _, n := range taken {
				set.Insert(a.cache.Nodes, n)
			}
			a.recycleSB(o)
			return 0, err
		}
		a.cache.M.CountMap()
	}
	for _, n := range taken {
		s, first, last := a.chunkRange(n)
		if s.X.mapped == 0 {
			// The first mappings of the segment: owners and use are kept
			// from now on.
			for m := s.First; m != 0; m = a.cache.Nodes[m].Next {
				_, f, l := a.chunkRange(m)
				for _, c := range s.X.chunks[f:l] {
					a.chunks[c].owner = m
					a.chunks[c].used = !a.cache.Nodes[m].Free && m != n
				}
			}
		}
		s.X.mapped += last - first
		a.cache.Nodes[n].Free = false
		a.cache.Meta[n].X.lent = true
		a.cache.FreeBytes -= a.cache.Nodes[n].Size
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
		if a.cache.Meta[p].X.lent && a.chunksFree(p) {
			a.release(p)
		}
	}
	if a.sb[o].doomed {
		return a.collectOne(o)
	}
	a.maybeReusable(o)
	return nil
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
		a.cache.Streams[s.pool].X.fused.Remove(a.sbNodes, o)
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
		a.cache.M.CountUnmap()
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
	a.cache.Segs[a.cache.Meta[ch.owner].Seg].X.mapped--
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
