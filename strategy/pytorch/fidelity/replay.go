package fidelity

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// releaseInAlloc reports whether an allocation may free some cached
// segments and not others before it allocates one, so that the
// segment_free entries recorded just before an alloc are its own, not an
// empty_cache's: PyTorch's release_available_cached_blocks, with a
// max_split_size and without expandable segments, and its
// garbage_collect_cached_blocks, with a garbage_collection_threshold and a
// memory fraction.
func releaseInAlloc(s *snapshot.AllocatorSettings, r snapshot.Rules) bool {
	if s != nil && s.GarbageCollectionThreshold > 0 && s.MemoryFraction() > 0 {
		return true
	}
	return r.MaxSplitSize != snapshot.NoMaxSplitSize && !r.Expandable
}

// replay is one replay of a device's trace: free-running, or forced to
// follow the record (see backend).
type replay struct {
	forced   bool
	res      *Result
	dev      int
	trace    snapshot.Trace
	offset   int // entries of trace before the file's first (State.Fresh)
	conf     string
	newAlloc NewFunc
	total    int64 // the device's memory
	// releaseInAlloc: see the function of that name.
	releaseInAlloc bool
	pools          *pools // the private pools' entries, nil for none

	// poolSegs counts the private pools' segments held; inPool are the
	// recorded addresses of the live blocks in them.
	poolSegs int
	inPool   map[uint64]bool

	a    Allocator
	be   *backend
	live map[uint64]gpualloc.Block // recorded address -> the model's block
	// failed are the recorded addresses whose allocation the model failed.
	failed map[uint64]bool
	// released: ReleaseAll was called since the last alloc or free. A
	// free may make a segment whole, which the next release gives back.
	released  bool
	decisions int64 // allocs that matched wholly
}

// start makes a new allocator that holds the segments of st.
func (r *replay) start(st *snapshot.State, top uint64) error {
	r.be = newBackend(r.res, r.dev, top, r.total, r.forced)
	a, err := r.newAlloc(r.be, r.conf)
	if err != nil {
		return err
	}
	r.a, r.live, r.failed, r.released = a, map[uint64]gpualloc.Block{}, map[uint64]bool{}, false
	r.poolSegs, r.inPool = 0, map[uint64]bool{}
	for _, sg := range st.Segments {
		r.be.hold(sg.TotalSize) // restored without a backend call
		r.be.used += sg.TotalSize
	}
	if rr, ok := a.(RangeRestorer); ok {
		for _, x := range ranges(st, r.trace) {
			if x.initial {
				r.be.held[x.base] = rangeSize(r.total, x.page())
				if err := rr.RestoreRange(x.stream, x.small, x.base); err != nil {
					return err
				}
			}
		}
	}
	for _, sg := range st.Segments {
		if r.pools.private(&sg) {
			// A private pool's, held apart (see pools.go).
			r.poolSegs++
			for _, b := range sg.Blocks {
				if b.Live() {
					r.inPool[b.Address] = true
				}
			}
			continue
		}
		blocks, err := a.Restore(sg)
		if err != nil {
			return fmt.Errorf("restoring the segment at %s: %w", hex(sg.Address), err)
		}
		n := 0
		for _, b := range sg.Blocks {
			if b.Live() {
				if n >= len(blocks) {
					return fmt.Errorf("restoring the segment at %s: %d live blocks returned, more expected", hex(sg.Address), len(blocks))
				}
				r.live[b.Address] = blocks[n]
				n++
			}
		}
	}
	return nil
}

// runBoth replays the trace from st twice at once, free on this goroutine
// and follow on another: free runs free, follow takes the state of the
// record again after each entry where it went its own way. Each follows
// the record with a Tracker of its own from newTracker: for the figures of
// free and the restarts of follow. An error of free is returned before one
// of follow, as if free ran first; follow's are wrapped as "following the
// record". The two share only the trace, which they read.
func runBoth(free, follow *replay, st *snapshot.State, top uint64, newTracker func() *snapshot.Tracker) error {
	if err := free.start(st, top); err != nil {
		return err
	}
	followErr := follow.start(st, top)
	var stop atomic.Bool // free failed: what follow finds is not wanted
	var wg sync.WaitGroup
	if followErr == nil {
		trFollow := newTracker()
		wg.Go(func() { followErr = follow.followAll(trFollow, top, &stop) })
	}
	err := free.freeAll(newTracker())
	if err != nil {
		stop.Store(true)
	}
	wg.Wait()
	if err != nil {
		return err
	}
	free.be.endAlloc()
	free.be.endReleases()
	if followErr != nil {
		return fmt.Errorf("following the record: %w", followErr)
	}
	follow.be.endAlloc()
	return nil
}

// freeAll replays the trace, following the record with tr for r's
// figures; with tr nil (a record that a Tracker cannot follow), with the
// bytes of its segment entries alone.
func (r *replay) freeAll(tr *snapshot.Tracker) error {
	held := r.res.RecordedPeakReservedBytes // the start state's segments
	for i := range r.trace.Len() {
		e := r.trace.At(i)
		at := i - r.offset // the entry's index in the file
		r.be.index, r.be.ahead, r.be.from = at, r.trace, i
		if _, err := r.entry(&e, i, at); err != nil {
			return err
		}
		if tr == nil {
			switch e.Action {
			case snapshot.SegmentAlloc, snapshot.SegmentMap:
				held += e.Size
			case snapshot.SegmentFree, snapshot.SegmentUnmap:
				held -= e.Size
			}
			r.figure(&e, held)
			continue
		}
		if err := tr.Apply(&e); err != nil {
			return fmt.Errorf("device_traces[%d][%d]: %w", r.dev, at, err)
		}
		r.figure(&e, tr.Held())
	}
	return nil
}

// followAll replays the trace, following the record with tr and taking
// its state again where r went its own way, until stop. An entry that
// does not fit the record ends it without an error: freeAll, which meets
// the same entry, reports it.
func (r *replay) followAll(tr *snapshot.Tracker, top uint64, stop *atomic.Bool) error {
	for i := range r.trace.Len() {
		if stop.Load() {
			return nil
		}
		e := r.trace.At(i)
		at := i - r.offset
		r.be.index, r.be.ahead, r.be.from = at, r.trace, i
		ok, err := r.entry(&e, i, at)
		if err != nil {
			return err
		}
		if tr.Apply(&e) != nil {
			return nil
		}
		if err := r.follow(&e, at, ok, tr, top); err != nil {
			return err
		}
	}
	return nil
}

// follow counts the decision of entry e, the at-th of the file, which the
// model took as recorded (ok) so far as the entry itself shows, and starts
// the model again from the state of the record tr, just past e, where it
// did not.
func (r *replay) follow(e *snapshot.TraceEntry, at int, ok bool, tr *snapshot.Tracker, top uint64) error {
	ok = ok && r.be.clean(at)
	if e.Action == snapshot.Alloc && ok {
		r.decisions++
	}
	if !ok {
		// Hold the recorded state again.
		if err := r.start(tr.State(r.dev), top); err != nil {
			return fmt.Errorf("device_traces[%d][%d]: %w", r.dev, at, err)
		}
	}
	return nil
}

// figure compares the bytes held by the record just past entry e, held,
// and by the model after e when it ends an allocation or a free, for the
// figures of the free-running replay.
func (r *replay) figure(e *snapshot.TraceEntry, held int64) {
	res := r.res
	res.RecordedPeakReservedBytes = max(res.RecordedPeakReservedBytes, held)
	switch e.Action {
	case snapshot.Alloc, snapshot.FreeCompleted, snapshot.OutOfMemory:
		d := held - r.be.reserved
		res.MaxReservedDiffBytes = max(res.MaxReservedDiffBytes, d, -d)
	}
}

// entry replays entry e, the i-th of r.trace and the at-th of the file, and
// reports whether the model took the recorded decision, as far as the entry
// itself shows.
func (r *replay) entry(e *snapshot.TraceEntry, i, at int) (bool, error) {
	if r.poolEntry(e, i) {
		return true, nil
	}
	res, be, dev := r.res, r.be, r.dev
	switch e.Action {
	case snapshot.SegmentAlloc, snapshot.SegmentMap:
		res.SegmentAllocs++
		// Free-running, the releases of the alloc to come lie between
		// its segment entries (see release).
		if (i == 0 || !isSegmentGrowth(r.trace.Action(i-1))) && be.failAt == 0 && (r.forced || len(be.releases) == 0) {
			be.endAlloc()
		}
		be.pending = append(be.pending, *e)
	case snapshot.Alloc:
		res.Allocs++
		r.released = false
		b, err := r.a.AllocStream(e.Size, e.Stream)
		be.endAlloc()
		be.endReleases()
		if err != nil {
			res.AllocErrors++
			r.failed[e.Addr] = true
			res.mismatch(Mismatch{dev, at, "alloc", e.Size, hex(e.Addr), "error: " + err.Error()})
			return false, nil
		}
		delete(r.failed, e.Addr)
		r.live[e.Addr] = b
		if b.Addr != e.Addr {
			res.mismatch(Mismatch{dev, at, "alloc", e.Size, hex(e.Addr), hex(b.Addr)})
			return false, nil
		}
		res.AddressMatches++
	case snapshot.FreeCompleted:
		be.endAlloc()
		r.released = false
		b, ok := r.live[e.Addr]
		if !ok {
			if r.failed[e.Addr] {
				delete(r.failed, e.Addr)
				return true, nil
			}
			return false, fmt.Errorf("device_traces[%d][%d]: free_completed of %s never allocated", dev, at, hex(e.Addr))
		}
		delete(r.live, e.Addr)
		if err := r.a.Free(b); err != nil {
			return false, fmt.Errorf("device_traces[%d][%d]: free_completed of %s: %w", dev, at, hex(e.Addr), err)
		}
	case snapshot.SegmentFree, snapshot.SegmentUnmap:
		res.SegmentFrees++
		// A release that the program asked for (its frames name
		// empty_cache) is no allocation's: it is made at once, as a
		// replay makes it (traces' reader yields it as a release).
		own := !e.EmptyCache
		if !r.forced {
			if !r.trace.ReleasesCache(i) {
				// The next allocation's own: the strategy makes it or not,
				// as its device makes it; compared after it. Those after
				// segment_map entries follow a failed map: its entries
				// before are closed where the device refuses a page.
				if be.failAt == 0 && i > 0 && r.trace.Action(i-1) == snapshot.SegmentMap && r.mapFailed(i) {
					be.failAt = len(be.pending)
				}
				be.releases = append(be.releases, *e)
				return true, nil
			}
			own = false
		}
		if own && be.failAt == 0 && i > 0 && r.trace.Action(i-1) == snapshot.SegmentMap && r.mapFailed(i) {
			// The alloc that mapped the pages recorded before ran out
			// of memory: its device refuses the next page once those
			// are mapped, and it gives back what it caches, these.
			be.failAt = len(be.pending)
		}
		if be.failAt > 0 {
			be.releases = append(be.releases, *e)
			return true, nil
		}
		be.endAlloc()
		// An allocation releases only once it found no free block, and
		// then allocates or fails: a release that an alloc follows with
		// no segment_alloc between is no allocation's (see
		// snapshot.Trace.ReleasesCache).
		if own && (r.oomFollows(i) || e.Action == snapshot.SegmentFree && r.releaseInAlloc && r.allocFollows(i) && !r.trace.ReleasesCache(i)) {
			// Freed by the next alloc or oom, which its device refuses
			// until then.
			be.releases = append(be.releases, *e)
			return true, nil
		}
		if !be.gaveBack(e) && !r.released {
			if rel, ok := r.a.(gpualloc.Releaser); ok {
				r.released = true
				if err := rel.ReleaseAll(); err != nil {
					return false, fmt.Errorf("device_traces[%d][%d]: releasing cached segments: %w", dev, at, err)
				}
			}
		}
		if be.takeBack(e) {
			res.SegmentFreeMatches++
			return true, nil
		}
		res.mismatch(Mismatch{dev, at, string(e.Action), e.Size, hex(e.Addr), "kept"})
		return false, nil
	case snapshot.OutOfMemory:
		// Failed after mapping pages (see mapFailed), the allocation
		// gets the memory recorded before its failure; else none.
		failing := be.failAt > 0
		if !failing {
			be.endAlloc()
		}
		res.OOMs++
		be.full, be.oom = !failing && r.forced, true
		b, err := r.a.AllocStream(e.Size, e.Stream)
		be.full, be.oom = false, false
		be.endAlloc()
		be.endReleases()
		if err != nil {
			if !errors.Is(err, gpualloc.ErrOutOfMemory) {
				return false, fmt.Errorf("device_traces[%d][%d]: oom of %d bytes: %w", dev, at, e.Size, err)
			}
			res.OOMMatches++
			return true, nil
		}
		res.mismatch(Mismatch{dev, at, "oom", e.Size, "out of memory", hex(b.Addr)})
		if err := r.a.Free(b); err != nil {
			return false, fmt.Errorf("device_traces[%d][%d]: oom of %d bytes: %w", dev, at, e.Size, err)
		}
		return false, nil
	}
	return true, nil
}

// oomFollows reports whether the segment_free and segment_unmap entries
// from the i-th on lead to an oom. They are the failed allocation's own:
// PyTorch's malloc releases cached segments (release_available_cached_blocks
// with a max_split_size, then release_cached_blocks) before it gives up and
// records the oom, so an oom that follows frees of a release, an
// empty_cache's included, holds no cached segment that the release could
// give back. Given back before the oom instead, by ReleaseAll, they would
// miss the blocks freed since the last release.
func (r *replay) oomFollows(i int) bool {
	return r.leadsTo(i, []snapshot.Action{snapshot.SegmentFree, snapshot.SegmentUnmap}, []snapshot.Action{snapshot.OutOfMemory})
}

// mapFailed reports whether the segment_free and segment_unmap entries
// from the i-th on, which follow segment_map entries, are those of the
// failed map of an allocation that then succeeded or failed: they lead to
// an alloc or oom with only segment_map and segment_alloc entries between.
// PyTorch's malloc (alloc_block, try_allocate_expandable_block) maps the
// missing pages of an expandable segment block by block (map_block, each
// one ExpandableSegment::map, which records a segment_map); when the
// device refuses a page (cuMemCreate), the pages of that map are given
// back unrecorded and the allocation fails, keeping the blocks mapped
// before; malloc then releases every cached segment and page
// (release_cached_blocks), those just mapped included, and retries
// (alloc_block again), mapping anew what it needs.
func (r *replay) mapFailed(i int) bool {
	for j := i + 1; j < r.trace.Len(); j++ {
		switch r.trace.Action(j) {
		case snapshot.SegmentFree, snapshot.SegmentUnmap:
			if isSegmentGrowth(r.trace.Action(j - 1)) {
				return false
			}
		case snapshot.SegmentMap, snapshot.SegmentAlloc:
		case snapshot.Alloc, snapshot.OutOfMemory:
			return true
		default:
			return false
		}
	}
	return false
}

// allocFollows reports whether the segment_free entries from the i-th on
// lead to an alloc or oom, with only segment_alloc entries between.
func (r *replay) allocFollows(i int) bool {
	return r.leadsTo(i, []snapshot.Action{snapshot.SegmentFree, snapshot.SegmentAlloc}, []snapshot.Action{snapshot.Alloc, snapshot.OutOfMemory})
}

// leadsTo reports whether the entries after the i-th reach one of the
// actions ends with only entries of the actions skip between.
func (r *replay) leadsTo(i int, skip, ends []snapshot.Action) bool {
	for j := i + 1; j < r.trace.Len(); j++ {
		if a := r.trace.Action(j); !slices.Contains(skip, a) {
			return slices.Contains(ends, a)
		}
	}
	return false
}

func isSegmentGrowth(a snapshot.Action) bool {
	return a == snapshot.SegmentAlloc || a == snapshot.SegmentMap
}
