package fidelity

import (
	"sort"

	"github.com/gpualloc/gpualloc/snapshot"
)

// rangeTotal returns the device's memory as the ranges of expandable
// segments tell it, 2^62 when they do not. PyTorch reserves a range of 1
// 1/8 times the device's memory, in whole pages, for each stream and pool
// (and another when it is full), and CUDA reserves ranges one after the
// other: a range ends at the latest where the next one starts (see
// ranges). The bound of a range of the large pool is taken first.
func rangeTotal(st *snapshot.State, t snapshot.Trace) int64 {
	rs := ranges(st, t)
	var best int64
	bestSmall := true
	for _, r := range rs {
		var next uint64
		for _, o := range rs {
			if o.base > r.base && (next == 0 || o.base < next) {
				next = o.base
			}
		}
		if next == 0 {
			continue
		}
		size := int64(next-r.base) / r.page() * r.page()
		if best == 0 || (bestSmall && !r.small) || (bestSmall == r.small && size < best) {
			best, bestSmall = size, r.small
		}
	}
	if best == 0 {
		return 1 << 62
	}
	return best / 9 * 8
}

// A xrange is a range of an expandable segment, as the snapshot shows it:
// the lowest address it names, and whether the state at the trace's start
// has mapped memory in it.
type xrange struct {
	stream  uint64
	small   bool
	base    uint64
	initial bool
}

func (r xrange) page() int64 {
	if r.small {
		return smallBuffer
	}
	return largeBuffer
}

// ranges returns the ranges of expandable segments that the state at the
// trace's start and the trace's segment_map and segment_unmap entries show,
// by stream, pool and address. Two addresses of a stream's pool that are
// not a whole number of pages apart lie in two ranges.
func ranges(st *snapshot.State, t snapshot.Trace) []xrange {
	var seen []xrange
	for _, sg := range st.Segments {
		if sg.IsExpandable {
			seen = append(seen, xrange{sg.Stream, sg.SegmentType == "small", sg.Address, true})
		}
	}
	n := t.Len()
	if !t.Has(snapshot.SegmentMap) && !t.Has(snapshot.SegmentUnmap) {
		n = 0 // no entry to walk for
	}
	for i := range n {
		if a := t.Action(i); a == snapshot.SegmentMap || a == snapshot.SegmentUnmap {
			e := t.At(i)
			seen = append(seen, xrange{e.Stream, e.Size%largeBuffer != 0, e.Addr, false})
		}
	}
	sort.Slice(seen, func(i, j int) bool {
		a, b := seen[i], seen[j]
		if a.stream != b.stream {
			return a.stream < b.stream
		}
		if a.small != b.small {
			return a.small
		}
		return a.base < b.base
	})
	var out []xrange
	for _, r := range seen {
		if n := len(out); n > 0 {
			if p := &out[n-1]; p.stream == r.stream && p.small == r.small && (r.base-p.base)%uint64(r.page()) == 0 {
				p.initial = p.initial || r.initial
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// A RangeRestorer is an allocator with expandable segments that can hold a
// range before its mapped parts are restored, so that its start is where
// the snapshot shows it (see the pytorch strategy's RestoreRange).
type RangeRestorer interface {
	RestoreRange(stream uint64, small bool, base uint64) error
}

// rangeSize is the size of a range of expandable segments of pages of
// page bytes on a device of total bytes, as the pytorch strategy reserves
// it: 1 1/8 times the memory, in whole pages.
func rangeSize(total, page int64) int64 {
	want := total + total/8
	if want <= 0 || want > 1<<56 {
		want = 1 << 56
	}
	return (want + page - 1) / page * page
}
