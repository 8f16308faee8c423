package pytorch

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
)

// name is the strategy's registry name.
const name = "pytorch"

// An Allocator is PyTorch's CUDA caching allocator. It implements
// [gpualloc.Allocator], [gpualloc.StreamAllocator],
// [gpualloc.StatsReporter], [gpualloc.Releaser], [gpualloc.Specer] and
// [gpualloc.FreeSpaceReporter]. It is not safe for concurrent use.
type Allocator struct {
	b    gpualloc.Backend
	vm   gpualloc.VirtualMemory // b's, for expandable segments; nil without
	c    Config
	spec string

	nodes []segment.Node // blocks; nodes[0] is unused
	meta  []meta         // per block, beside nodes
	spare []int32        // unused indexes of nodes

	segs      []segRec // segments; a zero size marks an unused slot
	spareSegs []int32

	pools []*streamPools // free blocks of each stream
	live  blocktable.Table[int32]

	m  gpualloc.Meter
	ms MemoryStats

	reserved int64 // bytes of segments held
	free     int64 // bytes of free blocks

	allowed int64    // allowed_memory_maximum; 0 without a memory fraction
	gcOn    bool     // garbage collection is enabled
	gcCount [2]int64 // get_free_blocks_call_count of the small (0) and large (1) pools

	xr       []*xrange // expandable segments; nil marks an unused slot
	nextBase uint64    // address of the next expandable segment without virtual memory
	pageMaps int64     // pages mapped so far
}

// meta is what a block records beside its segment.Node.
type meta struct {
	pool   int32 // index in Allocator.pools
	seg    int32 // index in Allocator.segs
	small  bool  // of the small pool
	gcBase int64 // the pool's gcCount when the block last entered it
	// exp marks a block of an expandable segment, seg then indexing
	// Allocator.xr; unmapped marks its unmapped blocks.
	exp, unmapped bool
}

// A segRec is a segment: one device allocation.
type segRec struct {
	addr  uint64
	size  int64
	first int32 // the block at addr; it stays that block while the segment lives
	small bool
}

// streamPools are a stream's two pools of free blocks, each ordered by
// (size, address): PyTorch's one set per pool ordered by (stream, size,
// address), cut by stream, which finds the same blocks.
type streamPools struct {
	stream       uint64
	small, large segment.Sorted
	unmapped     [2][]int32 // unmapped blocks of the small (0) and large (1) pools, by address
}

func (p *streamPools) set(small bool) *segment.Sorted {
	if small {
		return &p.small
	}
	return &p.large
}

func kind(small bool) int {
	if small {
		return 0
	}
	return 1
}

// New returns an allocator that takes its memory from b with configuration
// c. A setting out of range is an error that names it and wraps a
// [*gpualloc.ParamError].
func New(b gpualloc.Backend, c Config) (*Allocator, error) {
	if b == nil {
		return nil, errors.New(name + ": nil Backend")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	a := &Allocator{b: b, vm: virtualMemory(b), c: c, nodes: make([]segment.Node, 1, 64), meta: make([]meta, 1, 64), nextBase: xBase}
	if c.MemoryFraction > 0 {
		_, total := b.MemInfo()
		a.allowed = int64(c.MemoryFraction * float64(total))
		a.gcOn = c.GarbageCollectionThreshold > 0
	}
	a.spec = c.spec()
	return a, nil
}

// spec returns the full spec of c.
func (c Config) spec() string {
	split := "unlimited"
	if c.MaxSplitSize != unlimitedSplit {
		split = strconv.FormatInt(c.MaxSplitSize/mib, 10)
	}
	return fmt.Sprintf("%s:max_split_size_mb=%s,roundup_power2_divisions=%s,garbage_collection_threshold=%s,"+
		"expandable_segments=%t,max_non_split_rounding_mb=%d,memory_fraction=%s",
		name, split, formatDivisions(c.RoundupPower2Divisions),
		strconv.FormatFloat(c.GarbageCollectionThreshold, 'g', -1, 64), c.ExpandableSegments,
		c.MaxNonSplitRounding/mib, strconv.FormatFloat(c.MemoryFraction, 'g', -1, 64))
}

// Config returns the allocator's configuration.
func (a *Allocator) Config() Config { return a.c }

// Spec returns the allocator's full spec, every setting with its value.
func (a *Allocator) Spec() string { return a.spec }

// Stats returns the allocator's counters.
func (a *Allocator) Stats() gpualloc.Stats { return a.m.Stats() }

// Alloc is AllocStream on stream 0.
func (a *Allocator) Alloc(size int64) (gpualloc.Block, error) { return a.AllocStream(size, 0) }

// AllocStream returns a block for a request of size bytes on stream, as
// PyTorch's DeviceCachingAllocator::malloc does: the request is rounded
// ([Config.RoundSize]); the smallest free block of the stream's pool that
// fits (the lowest address among equals) is taken unless the max_split
// rules refuse it; else a new segment is allocated, after garbage
// collection if it is enabled; if the device refuses, oversize cached
// blocks are released (with a max split size) and then every cached
// segment, with a retry after each. The block is split when the pool's rule
// says so, the front part handed out. A failure wraps
// [gpualloc.ErrOutOfMemory]; the allocator stays usable.
func (a *Allocator) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: %w", name, size, gpualloc.ErrInvalidSize)
	}
	rounded := a.c.RoundSize(size)
	if rounded == 0 || segmentSize(rounded) == 0 {
		a.countOOM()
		return gpualloc.Block{}, fmt.Errorf("%s: alloc of %d bytes: rounded size overflows: %w", name, size, gpualloc.ErrOutOfMemory)
	}
	small := rounded <= smallSize
	pi := a.poolIndex(stream)
	set := a.pools[pi].set(small)
	k := kind(small)
	if a.gcOn {
		a.gcCount[k]++
	}
	n := a.getFreeBlock(set, rounded, k)
	hit := n != 0
	if !hit {
		maps := a.pageMaps
		var err error
		if n, err = a.newBlock(size, rounded, pi, small); err != nil {
			return gpualloc.Block{}, err
		}
		// An expandable segment may serve the request without mapping.
		hit = a.c.ExpandableSegments && a.pageMaps == maps
	}
	addr, bsize, handle := a.allocFound(n, rounded, size, hit, set, k)
	return gpualloc.Block{Addr: addr, Size: bsize, Requested: size, Stream: stream, Handle: handle}, nil
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

// getFreeBlock takes the best free block for rounded bytes out of set, or
// returns 0 (get_free_block).
func (a *Allocator) getFreeBlock(set *segment.Sorted, rounded int64, k int) int32 {
	n := set.TakeBest(a.nodes, rounded)
	if n == 0 {
		return 0
	}
	if a.meta[n].exp && a.c.ExpandableSegments {
		// Best fit counts the unmapped space after a block as its own:
		// walk on in (size, address) order while that is smaller.
		var skipped []int32
		for {
			nx := set.TakeBest(a.nodes, a.nodes[n].Size)
			if nx == 0 {
				break
			}
			if a.expandableSize(nx) >= a.expandableSize(n) {
				set.Insert(a.nodes, nx)
				break
			}
			skipped = append(skipped, n)
			n = nx
		}
		for _, x := range skipped {
			set.Insert(a.nodes, x)
		}
	}
	bs, ms := a.nodes[n].Size, a.c.MaxSplitSize
	if (rounded < ms && bs >= ms) || (rounded >= ms && bs-rounded >= a.c.MaxNonSplitRounding) {
		set.Insert(a.nodes, n) // it stays in the pool
		return 0
	}
	a.meta[n].gcBase = a.gcCount[k]
	return n
}

// newBlock allocates a segment for a request that no free block serves,
// with PyTorch's garbage collection, release and retries, and returns its
// one block, not in any pool.
func (a *Allocator) newBlock(size, rounded int64, pi int32, small bool) (int32, error) {
	segSize := segmentSize(rounded)
	if a.gcOn {
		if err := a.garbageCollect(); err != nil {
			return 0, err
		}
	}
	n, err := a.tryMalloc(segSize, rounded, pi, small, false)
	if n == 0 && err == nil {
		var ok bool
		if ok, err = a.releaseAvailable(pi, small, rounded); ok && err == nil {
			a.m.CountRetry()
			n, err = a.tryMalloc(segSize, rounded, pi, small, false)
		}
	}
	if n == 0 && err == nil {
		if err = a.releaseCached(); err == nil {
			a.m.CountRetry()
			n, err = a.tryMalloc(segSize, rounded, pi, small, true)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("%s: alloc of %d bytes (%d rounded): %w", name, size, rounded, err)
	}
	if n == 0 {
		a.countOOM()
		return 0, fmt.Errorf("%s: alloc of %d bytes (%d rounded): segment of %d bytes: %w", name, size, rounded, segSize, gpualloc.ErrOutOfMemory)
	}
	return n, nil
}

func (a *Allocator) countOOM() {
	a.m.CountOOM()
	a.ms.NumOOMs.add(1)
}

// tryMalloc allocates a segment of size bytes (alloc_block): 0 and no error
// when the memory fraction or the device refuses it.
func (a *Allocator) tryMalloc(size, rounded int64, pi int32, small, retry bool) (int32, error) {
	if retry {
		a.ms.NumAllocRetries.add(1)
	}
	if a.allowed > 0 && a.reserved+size > a.allowed {
		return 0, nil
	}
	if a.c.ExpandableSegments {
		return a.tryExpandable(pi, small, rounded)
	}
	addr, err := a.b.Malloc(size)
	if err != nil {
		if errors.Is(err, gpualloc.ErrOutOfMemory) {
			return 0, nil
		}
		return 0, err
	}
	a.ms.NumDeviceAlloc.add(1)
	a.m.CountDeviceMalloc(size)
	return a.addSegment(addr, size, pi, small), nil
}

// addSegment records a segment held from the device and returns its one
// free block, not in any pool.
func (a *Allocator) addSegment(addr uint64, size int64, pi int32, small bool) int32 {
	a.reserved += size
	a.ms.ReservedBytes.add(size)
	a.free += size
	n := a.newNode()
	a.nodes[n] = segment.Node{Addr: addr, Size: size, Free: true}
	s := segRec{addr: addr, size: size, first: n, small: small}
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

// allocFound hands out block n for a request of requested bytes rounded to
// rounded, splitting it by the pool's rule (alloc_found_block).
func (a *Allocator) allocFound(n int32, rounded, requested int64, hit bool, set *segment.Sorted, k int) (uint64, int64, uint64) {
	nd := &a.nodes[n]
	alreadySplit := nd.Prev != 0 || nd.Next != 0
	rest := nd.Size - rounded
	var split bool
	if k == 0 || a.c.ExpandableSegments {
		split = rest >= minBlockSize
	} else {
		split = rounded < a.c.MaxSplitSize && rest > smallSize
	}
	if split {
		r := a.newNode()
		segment.SplitAt(a.nodes, n, r, rounded)
		a.meta[r] = a.meta[n]
		a.meta[r].gcBase = a.gcCount[k]
		set.Insert(a.nodes, r)
		if a.meta[n].exp {
			// PyTorch does not count expandable blocks as inactive split.
		} else if alreadySplit {
			a.ms.InactiveSplitBytes.add(-rounded)
		} else {
			a.ms.InactiveSplitBytes.add(rest)
		}
	} else if alreadySplit && !a.meta[n].exp {
		a.ms.InactiveSplitBytes.add(-nd.Size)
	}
	nd = &a.nodes[n]
	nd.Free = false
	nd.Requested = requested
	size := nd.Size
	a.free -= size
	handle := a.live.Put(nd.Addr, n)
	a.m.CountAlloc(requested, size, hit)
	a.ms.AllocatedBytes.add(size)
	a.ms.ActiveBytes.add(size)
	a.ms.RequestedBytes.add(requested)
	return nd.Addr, size, handle
}

// Free returns a live block to its pool, merged with the free blocks just
// before and after it in its segment (free_block); segments never merge and
// no memory goes back to the device. A block that is not live, or whose Size
// or Requested differ from what Alloc returned, gives an error wrapping
// [gpualloc.ErrInvalidFree] and changes nothing.
func (a *Allocator) Free(b gpualloc.Block) error {
	p := a.live.Get(b.Handle, b.Addr)
	if p == nil {
		return blocktable.NotLive(name, b)
	}
	n := *p
	nodes := a.nodes
	nd := &nodes[n]
	if nd.Size != b.Size || nd.Requested != b.Requested {
		return blocktable.Mismatch(name, b, nd.Size, nd.Requested)
	}
	a.live.Delete(b.Handle)
	size := nd.Size
	a.m.CountFree(nd.Requested, size)
	a.ms.AllocatedBytes.add(-size)
	a.ms.ActiveBytes.add(-size)
	a.ms.RequestedBytes.add(-nd.Requested)
	a.free += size
	nd.Free = true
	nd.Requested = 0
	mt := a.meta[n] // a copy: merging may recycle n
	set := a.pools[mt.pool].set(mt.small)
	var subsumed int64
	if prev := nd.Prev; prev != 0 && nodes[prev].Free {
		set.Remove(nodes, prev)
		subsumed += nodes[prev].Size
		a.mergeNext(prev)
		n = prev
	}
	if next := nodes[n].Next; next != 0 && nodes[next].Free {
		set.Remove(nodes, next)
		subsumed += nodes[next].Size
		a.mergeNext(n)
	}
	if !mt.exp {
		a.ms.InactiveSplitBytes.add(-subsumed)
		if nodes[n].Prev != 0 || nodes[n].Next != 0 {
			a.ms.InactiveSplitBytes.add(nodes[n].Size)
		}
	}
	a.meta[n].gcBase = a.gcCount[kind(mt.small)]
	set.Insert(nodes, n)
	return nil
}

// mergeNext merges into the free block n the free block after it.
func (a *Allocator) mergeNext(n int32) { a.recycle(segment.MergeNext(a.nodes, n)) }

// whole reports whether block n is free and a whole segment.
func (a *Allocator) whole(n int32) bool {
	nd := &a.nodes[n]
	return nd.Free && nd.Prev == 0 && nd.Next == 0
}

// releaseBlock returns to the device the segment of the free block n, a
// whole segment in its pool (release_block).
func (a *Allocator) releaseBlock(n int32) error {
	mt := a.meta[n]
	s := a.segs[mt.seg]
	if err := a.b.Free(s.addr, s.size); err != nil {
		return err
	}
	a.pools[mt.pool].set(mt.small).Remove(a.nodes, n)
	a.recycle(n)
	a.segs[mt.seg] = segRec{}
	a.spareSegs = append(a.spareSegs, mt.seg)
	a.m.CountDeviceFree(s.size)
	a.ms.NumDeviceFree.add(1)
	a.ms.ReservedBytes.add(-s.size)
	a.reserved -= s.size
	a.free -= s.size
	return nil
}

// releaseAvailable frees cached oversize blocks of the request's pool and
// stream until a segment of at least max(rounded, MaxSplitSize) bytes was
// released (release_available_cached_blocks): the smallest block that
// large, else the largest oversize blocks. It does nothing without a max
// split size. It reports whether enough was released.
func (a *Allocator) releaseAvailable(pi int32, small bool, rounded int64) (bool, error) {
	ms := a.c.MaxSplitSize
	if ms == unlimitedSplit || a.c.ExpandableSegments {
		// PyTorch releases no blocks of expandable segments here.
		return false, nil
	}
	set := a.pools[pi].set(small)
	key := max(rounded, ms)
	if n := set.TakeBest(a.nodes, key); n != 0 {
		set.Insert(a.nodes, n)
		if !a.whole(n) {
			return false, nil
		}
		return true, a.releaseBlock(n)
	}
	var total int64
	for total < key {
		n := set.Max(a.nodes)
		if n == 0 || a.nodes[n].Size < ms || !a.whole(n) {
			break
		}
		size := a.nodes[n].Size
		if err := a.releaseBlock(n); err != nil {
			return false, err
		}
		total += size
	}
	return total >= key, nil
}

// releaseCached returns every free whole segment to the device
// (release_cached_blocks). A segment the device refuses to free stays, and
// the errors are joined in the one returned.
func (a *Allocator) releaseCached() error {
	var errs []error
	for i := range a.segs {
		s := &a.segs[i]
		if s.size != 0 && a.whole(s.first) {
			if err := a.releaseBlock(s.first); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := a.releaseExpandable(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// garbageCollect frees free whole segments of the large pool, those at
// least as old as the mean first, until reserved memory is back under
// the threshold (garbage_collect_cached_blocks). A block's age is the
// number of large-pool lookups since it last entered the pool.
func (a *Allocator) garbageCollect() error {
	thr := int64(a.c.GarbageCollectionThreshold * float64(a.allowed))
	if a.reserved <= thr {
		return nil
	}
	target := a.reserved - thr
	var totalAge, count int64
	for i := range a.segs {
		s := &a.segs[i]
		if s.size != 0 && !s.small && a.whole(s.first) {
			totalAge += a.gcCount[1] - a.meta[s.first].gcBase
			count++
		}
	}
	var reclaimed int64
	for freed := true; reclaimed < target && freed && count > 0; {
		threshold := float64(totalAge) / float64(count)
		freed = false
		for i := range a.segs {
			s := &a.segs[i]
			if s.size == 0 || s.small || !a.whole(s.first) {
				continue
			}
			age := a.gcCount[1] - a.meta[s.first].gcBase
			if float64(age) < threshold {
				continue
			}
			size := s.size
			if err := a.releaseBlock(s.first); err != nil {
				return err
			}
			freed = true
			reclaimed += size
			totalAge -= age
			count--
		}
	}
	return nil
}

// ReleaseAll returns every cached segment (every free block that is a whole
// segment) to the device, as torch.cuda.empty_cache does. Live blocks and
// the segments that hold them stay.
func (a *Allocator) ReleaseAll() error {
	if err := errors.Join(a.releaseCached(), a.dropEmptyRanges()); err != nil {
		return fmt.Errorf("%s: release: %w", name, err)
	}
	return nil
}

// FreeSpace returns the largest free block and the total bytes of free
// blocks: the total in O(1), the largest in O(log n) per pool.
func (a *Allocator) FreeSpace() (largest, total int64) {
	for _, p := range a.pools {
		if n := p.small.Max(a.nodes); n != 0 {
			largest = max(largest, a.nodes[n].Size)
		}
		if n := p.large.Max(a.nodes); n != 0 {
			largest = max(largest, a.nodes[n].Size)
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
