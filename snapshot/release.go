package snapshot

// ReleasesCache reports whether entry i, a segment_free or segment_unmap,
// is part of a release of the cache that no allocation made, such as one
// the program asked for (torch.cuda.empty_cache), for which PyTorch records
// no entry of its own: an entry whose frames name empty_cache
// (TraceEntry.EmptyCache), or one of a run of segment_free and
// segment_unmap entries that no segment_alloc, segment_map or oom follows.
// The runs that one of those follows are the releases of the allocation
// that fails or takes memory after them (release_available_cached_blocks
// and release_cached_blocks inside malloc, in
// c10/cuda/CUDACachingAllocator.cpp). The run is read from i on.
func (t Trace) ReleasesCache(i int) bool {
	if t.At(i).EmptyCache {
		return true
	}
	j := i
	for j < t.Len() && (t.Action(j) == SegmentFree || t.Action(j) == SegmentUnmap) && !t.At(j).EmptyCache {
		j++
	}
	if j == t.Len() || t.At(j).EmptyCache {
		return true
	}
	switch t.Action(j) {
	case SegmentAlloc, SegmentMap, OutOfMemory:
		return false
	}
	return true
}
