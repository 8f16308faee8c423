package pytorch

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/cachepool"
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

	// cache holds the blocks, segments, each stream's pools of free
	// blocks and the live blocks: PyTorch's pool skeleton.
	cache cachepool.Cache[ext, struct{}, unmappedLists]
	ms    MemoryStats

	reserved int64 // bytes of segments held
	// segEnd is at least the end of every segment held (the highest end of
	// any segment added): Restore of a segment at or above it skips the
	// scan for overlaps, so restoring a state in address order is linear.
	segEnd uint64

	allowed int64    // allowed_memory_maximum, when capped
	capped  bool     // set_fraction: a memory fraction caps reserved memory, even at 0 bytes
	gcOn    bool     // garbage collection is enabled
	gcCount [2]int64 // get_free_blocks_call_count of the small (0) and large (1) pools

	// pools are the private pools, by index: Streams[pi].X.pool; 0 stands
	// for the default pools (empty until a private pool is used).
	pools []privatePool

	xr       []*xrange // expandable segments; nil marks an unused slot
	nextBase uint64    // address of the next expandable segment without virtual memory
	pageMaps int64     // pages mapped so far
}

// meta is what a block records beside its segment.Node.
type meta = cachepool.Meta[ext]

// ext is what a block records beyond the skeleton's meta.
type ext struct {
	gcBase int64 // the pool's gcCount when the block last entered it
	// exp marks a block of an expandable segment, meta.Seg then indexing
	// Allocator.xr; unmapped marks its unmapped blocks.
	exp, unmapped bool
}

// unmappedLists are what a stream's pools hold beside their free blocks:
// the unmapped blocks of the small (0) and large (1) pools' expandable
// segments, by address.
type unmappedLists struct {
	unmapped [2][]int32
	pool     int32 // the private pool (index in Allocator.pools) whose pools these are; 0: the default pools
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
	a := &Allocator{b: b, vm: virtualMemory(b), c: c, nextBase: xBase}
	a.cache.Init(name)
	if c.MemoryFraction > 0 {
		_, total := b.MemInfo()
		// A fraction so small that the cap rounds to 0 bytes still caps:
		// every segment is refused, as set_fraction makes alloc_block
		// refuse it (c10/cuda/CUDACachingAllocator.cpp,
		// DeviceCachingAllocator::setMemoryFraction and alloc_block).
		a.allowed = int64(c.MemoryFraction * float64(total))
		a.capped = true
		a.gcOn = c.GarbageCollectionThreshold > 0
	}
	a.spec = c.spec()
	return a, nil
}

// spec returns the full spec of c: every setting with its value, but the
// version when it is the newest and the device when it is CUDA.
func (c Config) spec() string {
	split := "unlimited"
	if c.MaxSplitSize != unlimitedSplit {
		split = strconv.FormatInt(c.MaxSplitSize/mib, 10)
	}
	spec := fmt.Sprintf("%s:max_split_size_mb=%s,roundup_power2_divisions=%s,garbage_collection_threshold=%s,"+
		"expandable_segments=%t,max_non_split_rounding_mb=%d,memory_fraction=%s",
		name, split, formatDivisions(c.RoundupPower2Divisions),
		strconv.FormatFloat(c.GarbageCollectionThreshold, 'g', -1, 64), c.ExpandableSegments,
		c.MaxNonSplitRounding/mib, strconv.FormatFloat(c.MemoryFraction, 'g', -1, 64))
	// The device is written only when it is not the default, so that the
	// specs of CUDA replays read as before it was a parameter.
	if c.Version.resolve() != Newest() {
		spec += ",version=" + c.Version.String()
	}
	if c.Device != CUDA {
		spec += ",device=" + c.Device.String()
	}
	return spec
}

// Config returns the allocator's configuration.
func (a *Allocator) Config() Config { return a.c }

// Spec returns the allocator's full spec, every setting with its value.
func (a *Allocator) Spec() string { return a.spec }

// Stats returns the allocator's counters.
func (a *Allocator) Stats() gpualloc.Stats { return a.cache.M.Stats() }

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
	return a.alloc(size, stream, 0)
}

// alloc is AllocStream in the pools of private pool pool (0: the default
// pools).
func (a *Allocator) alloc(size int64, stream uint64, pool int32) (gpualloc.Block, error) {
	if size < 1 {
		return gpualloc.Block{}, a.cache.ErrInvalidSize(size)
	}
	rounded := a.c.RoundSize(size)
	if rounded == 0 || segmentSize(rounded) == 0 {
		a.ms.NumOOMs.add(1)
		return gpualloc.Block{}, a.cache.ErrTooLarge(size)
	}
	small := rounded <= smallSize
	pi := a.poolIndex(stream, pool)
	set := a.cache.Set(pi, small)
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
		hit = a.expandable(pi) && a.pageMaps == maps
	}
	if a.c.Device == NPU && a.expandable(pi) && rounded >= roundLarge {
		n = a.alignBlock(n, rounded, set, k)
	}
	addr, bsize, handle := a.allocFound(n, rounded, size, hit, set, k)
	return gpualloc.Block{Addr: addr, Size: bsize, Requested: size, Stream: stream, Handle: handle}, nil
}

// alignBlock moves the free block n, out of its pool, that serves a
// request of rounded bytes to the next multiple of 16 KiB, when it is not
// at one and still holds the request from there, as torch_npu's
// DeviceCachingAllocator::malloc does with base_addr_aligned_kb (see
// [NPU]): the bytes before go back to the pool as a free block. It returns
// the block that serves the request.
func (a *Allocator) alignBlock(n int32, rounded int64, set *segment.Sorted, k int) int32 {
	nd := &a.cache.Nodes[n]
	mis := int64(nd.Addr % npuAlign)
	if mis == 0 || npuAlign-mis+rounded > nd.Size {
		return n
	}
	r := a.cache.Split(n, npuAlign-mis)
	a.cache.Meta[n].X.gcBase = a.gcCount[k]
	set.Insert(a.cache.Nodes, n)
	return r
}

// getFreeBlock takes the best free block for rounded bytes out of set, or
// returns 0 (get_free_block).
func (a *Allocator) getFreeBlock(set *segment.Sorted, rounded int64, k int) int32 {
	nodes := a.cache.Nodes
	n := set.TakeBest(nodes, rounded)
	if n == 0 {
		return 0
	}
	if a.cache.Meta[n].X.exp && a.c.ExpandableSegments {
		// Best fit counts the unmapped space after a block as its own:
		// walk on in (size, address) order while that is smaller.
		var skipped []int32
		for {
			nx := set.TakeBest(nodes, nodes[n].Size)
			if nx == 0 {
				break
			}
			if a.expandableSize(nx) >= a.expandableSize(n) {
				set.Insert(nodes, nx)
				break
			}
			skipped = append(skipped, n)
			n = nx
		}
		for _, x := range skipped {
			set.Insert(nodes, x)
		}
	}
	bs, ms := nodes[n].Size, a.c.MaxSplitSize
	if (rounded < ms && bs >= ms) || (rounded >= ms && bs-rounded >= a.c.MaxNonSplitRounding) {
		set.Insert(nodes, n) // it stays in the pool
		return 0
	}
	a.cache.Meta[n].X.gcBase = a.gcCount[k]
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
			a.cache.M.CountRetry()
			n, err = a.tryMalloc(segSize, rounded, pi, small, false)
		}
	}
	if n == 0 && err == nil {
		if err = a.releaseCached(); err == nil {
			a.cache.M.CountRetry()
			n, err = a.tryMalloc(segSize, rounded, pi, small, true)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("%s: alloc of %d bytes (%d rounded): %w", name, size, rounded, err)
	}
	if n == 0 {
		a.cache.M.CountOOM()
		a.ms.NumOOMs.add(1)
		return 0, fmt.Errorf("%s: alloc of %d bytes (%d rounded): segment of %d bytes: %w", name, size, rounded, segSize, gpualloc.ErrOutOfMemory)
	}
	return n, nil
}

// tryMalloc allocates a segment of size bytes (alloc_block): 0 and no error
// when the memory fraction or the device refuses it.
func (a *Allocator) tryMalloc(size, rounded int64, pi int32, small, retry bool) (int32, error) {
	if retry {
		a.ms.NumAllocRetries.add(1)
	}
	if a.capped && a.reserved+size > a.allowed {
		return 0, nil
	}
	if a.expandable(pi) {
		return a.tryExpandable(pi, small, rounded)
	}
	addr, err := a.b.Malloc(size)
	if err != nil {
		return 0, cachepool.Refused(err)
	}
	a.ms.NumDeviceAlloc.add(1)
	a.cache.M.CountDeviceMalloc(size)
	return a.addSegment(addr, size, pi, small), nil
}

// addSegment records a segment held from the device and returns its one
// free block, not in any pool.
func (a *Allocator) addSegment(addr uint64, size int64, pi int32, small bool) int32 {
	a.reserved += size
	a.ms.ReservedBytes.add(size)
	a.segEnd = max(a.segEnd, addr+uint64(size))
	return a.cache.AddSegment(addr, size, pi, small)
}

// allocFound hands out block n for a request of requested bytes rounded to
// rounded, splitting it by the pool's rule (alloc_found_block).
func (a *Allocator) allocFound(n int32, rounded, requested int64, hit bool, set *segment.Sorted, k int) (uint64, int64, uint64) {
	nd := &a.cache.Nodes[n]
	alreadySplit := nd.Prev != 0 || nd.Next != 0
	rest := nd.Size - rounded
	var split bool
	if k == 0 || a.c.ExpandableSegments {
		split = rest >= minBlockSize
	} else {
		split = rounded < a.c.MaxSplitSize && rest > smallSize
	}
	exp := a.cache.Meta[n].X.exp
	addr, size, handle, r := a.cache.Take(n, rounded, requested, split, hit)
	if r != 0 {
		a.cache.Meta[r].X.gcBase = a.gcCount[k]
		set.Insert(a.cache.Nodes, r)
		if exp {
			// PyTorch does not count expandable blocks as inactive split.
		} else if alreadySplit {
			a.ms.InactiveSplitBytes.add(-rounded)
		} else {
			a.ms.InactiveSplitBytes.add(rest)
		}
	} else if alreadySplit && !exp {
		a.ms.InactiveSplitBytes.add(-size)
	}
	a.countAlloc(size, requested)
	return addr, size, handle
}

// countAlloc counts in MemoryStats a block of size bytes handed out for a
// request of requested bytes.
func (a *Allocator) countAlloc(size, requested int64) {
	a.ms.AllocatedBytes.add(size)
	a.ms.ActiveBytes.add(size)
	a.ms.RequestedBytes.add(requested)
}

// Free returns a live block to its pool, merged with the free blocks just
// before and after it in its segment (free_block); segments never merge and
// no memory goes back to the device. A block that is not live, or whose Size
// or Requested differ from what Alloc returned, gives an error wrapping
// [gpualloc.ErrInvalidFree] and changes nothing.
func (a *Allocator) Free(b gpualloc.Block) error {
	n, err := a.cache.Release(b)
	if err != nil {
		return err
	}
	a.ms.AllocatedBytes.add(-b.Size)
	a.ms.ActiveBytes.add(-b.Size)
	a.ms.RequestedBytes.add(-b.Requested)
	mt := a.cache.Meta[n] // a copy: merging may recycle n
	n, subsumed := a.cache.FreeBlock(n)
	if !mt.X.exp {
		a.ms.InactiveSplitBytes.add(-subsumed)
		if nd := &a.cache.Nodes[n]; nd.Prev != 0 || nd.Next != 0 {
			a.ms.InactiveSplitBytes.add(nd.Size)
		}
	}
	a.cache.Meta[n].X.gcBase = a.gcCount[kind(mt.Small)]
	return nil
}

// releaseBlock returns to the device the segment of the free block n, a
// whole segment in its pool (release_block).
func (a *Allocator) releaseBlock(n int32) error {
	s := a.cache.Segs[a.cache.Meta[n].Seg]
	if err := a.b.Free(s.Addr, s.Size); err != nil {
		return err
	}
	a.cache.DropSegment(n)
	a.cache.M.CountDeviceFree(s.Size)
	a.ms.NumDeviceFree.add(1)
	a.ms.ReservedBytes.add(-s.Size)
	a.reserved -= s.Size
	return nil
}

// releaseAvailable frees cached oversize blocks of the request's pool and
// stream until a segment of at least max(rounded, MaxSplitSize) bytes was
// released (release_available_cached_blocks): the smallest block that
// large, else the largest oversize blocks. It does nothing without a max
// split size, nor with expandable segments, whose blocks PyTorch does not
// release here (but see expandableAssert). It reports whether enough was
// released.
func (a *Allocator) releaseAvailable(pi int32, small bool, rounded int64) (bool, error) {
	ms := a.c.MaxSplitSize
	if ms == unlimitedSplit {
		return false, nil
	}
	set := a.cache.Set(pi, small)
	key := max(rounded, ms)
	if a.expandable(pi) {
		return false, a.expandableAssert(set, key)
	}
	if n := set.TakeBest(a.cache.Nodes, key); n != 0 {
		set.Insert(a.cache.Nodes, n)
		if !a.cache.Whole(n) {
			return false, nil
		}
		return true, a.releaseBlock(n)
	}
	var total int64
	for total < key {
		n := set.Max(a.cache.Nodes)
		if n == 0 || a.cache.Nodes[n].Size < ms || !a.cache.Whole(n) {
			break
		}
		size := a.cache.Nodes[n].Size
		if err := a.releaseBlock(n); err != nil {
			return false, err
		}
		total += size
	}
	return total >= key, nil
}

// expandableAssert returns the error with which PyTorch before 2.5 stops
// when release_available_cached_blocks, with expandable segments, reaches
// a free block of one (the smallest block of at least key bytes, else the
// largest block of at least max_split_size): its release_block fails the
// internal assert that the block is of no expandable segment. From 2.5
// (pytorch/pytorch#134338) release_available_cached_blocks passes over
// expandable segments' blocks, and it returns nil.
func (a *Allocator) expandableAssert(set *segment.Sorted, key int64) error {
	if a.c.Version.atLeast(2, 5) {
		return nil
	}
	n := set.TakeBest(a.cache.Nodes, key)
	if n != 0 {
		set.Insert(a.cache.Nodes, n)
	} else if n = set.Max(a.cache.Nodes); n != 0 && a.cache.Nodes[n].Size < a.c.MaxSplitSize {
		n = 0
	}
	if n == 0 || !a.cache.Meta[n].X.exp {
		return nil
	}
	return fmt.Errorf("%w: PyTorch %s's release_available_cached_blocks releases the free block at %#x of an expandable segment, "+
		"which fails release_block's internal assert (fixed in 2.5, pytorch/pytorch#134338)", ErrInternalAssert, a.c.Version, a.cache.Nodes[n].Addr)
}

// ErrInternalAssert is the error of a request on which the release of
// PyTorch modelled fails an internal assert (a RuntimeError in Python, not
// an out-of-memory error): the program stops there.
var ErrInternalAssert = errors.New(name + ": internal assert")

// releaseCached returns every free whole segment of the default pools and
// of released private pools to the device (release_cached_blocks), and
// unmaps the free pages of their expandable segments. A segment the device
// refuses to free stays, and the errors are joined in the one returned.
func (a *Allocator) releaseCached() error {
	if len(a.pools) == 0 {
		return errors.Join(a.cache.ReleaseCached(a.releaseBlock), a.releaseExpandableOf(nil))
	}
	return errors.Join(a.cache.ReleaseCached(func(n int32) error {
		if !a.releasable(a.cache.Meta[n].Pool) {
			return nil
		}
		return a.releaseBlock(n)
	}), a.releaseExpandableOf(a.releasable))
}

// garbageCollect frees free whole segments of the default large pools, those at
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
	for i := range a.cache.Segs {
		s := &a.cache.Segs[i]
		if s.Size != 0 && !s.Small && a.cache.Whole(s.First) && !a.private(a.cache.Meta[s.First].Pool) {
			totalAge += a.gcCount[1] - a.cache.Meta[s.First].X.gcBase
			count++
		}
	}
	var reclaimed int64
	for freed := true; reclaimed < target && freed && count > 0; {
		threshold := float64(totalAge) / float64(count)
		freed = false
		for i := range a.cache.Segs {
			s := &a.cache.Segs[i]
			if s.Size == 0 || s.Small || !a.cache.Whole(s.First) || a.private(a.cache.Meta[s.First].Pool) {
				continue
			}
			age := a.gcCount[1] - a.cache.Meta[s.First].X.gcBase
			if float64(age) < threshold {
				continue
			}
			size := s.Size
			if err := a.releaseBlock(s.First); err != nil {
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
func (a *Allocator) FreeSpace() (largest, total int64) { return a.cache.FreeSpace() }
