package sim

import (
	"iter"
	"slices"
)

// DefaultSeriesBuckets is the number of buckets of a replay's [Series] when
// the [Config] does not choose one.
const DefaultSeriesBuckets = 2048

// A Series is the course of a replay's requested, allocated and reserved
// bytes (each the sum over the trace's devices), event by event, kept in a
// bounded number of buckets whatever the trace's length.
//
// Decimation: while there are fewer events than buckets, each bucket holds
// one event. When every bucket is in use and another event comes, neighbours
// are merged pairwise, halving the number of buckets in use and doubling the
// number of events each covers. A bucket keeps the smallest and the largest
// value of each quantity over its events, with the event (and the time) at
// which the largest was first reached, so no peak is ever lost: the largest
// Max of a quantity over the series is exactly the replay's peak of that
// quantity, at the event where the replay first reached it. Reserved bytes
// can rise and fall within an event (a strategy that gives its cache back
// and then asks the device again); a bucket's Min and Max of Reserved
// include those moments.
//
// Adding an event is O(1) amortized, and the series' memory is fixed when it
// is made.
type Series struct {
	buckets []Point // len = buckets in use, cap = the bound
	width   int64   // events per bucket
	fill    int64   // events in the last bucket
}

// A Point is one bucket of a [Series]: the events First..Last (indexes into
// the trace, from 0, both included).
type Point struct {
	First, Last int64
	// FirstTimeUS and LastTimeUS are the timestamps of the first and the
	// last event, or traces.NoTime when the trace has none.
	FirstTimeUS, LastTimeUS int64

	Requested Range // live bytes asked for
	Allocated Range // live bytes in blocks handed out
	Reserved  Range // bytes held from the devices
}

// A Range is what a [Point] keeps of one quantity over its events.
type Range struct {
	Min, Max int64 // smallest and largest value within the bucket
	End      int64 // value after the bucket's last event
	// MaxEvent is the index of the event at which Max was first reached,
	// MaxTimeUS that event's timestamp (traces.NoTime if none).
	MaxEvent  int64
	MaxTimeUS int64
}

// newSeries returns an empty series of at most n buckets (n >= 2, rounded
// down to an even number so that buckets merge in pairs).
func newSeries(n int) *Series {
	n = max(n, 2) &^ 1
	return &Series{buckets: make([]Point, 0, n), width: 1}
}

// Len returns the number of buckets in use.
func (s *Series) Len() int {
	if s == nil {
		return 0
	}
	return len(s.buckets)
}

// Cap returns the most buckets the series will use.
func (s *Series) Cap() int {
	if s == nil {
		return 0
	}
	return cap(s.buckets)
}

// Width returns the number of events each bucket covers (the last one may
// cover fewer). It is a power of two.
func (s *Series) Width() int64 {
	if s == nil {
		return 0
	}
	return s.width
}

// Points returns a copy of the buckets in use, in event order.
func (s *Series) Points() []Point {
	if s == nil {
		return nil
	}
	return slices.Clone(s.buckets)
}

// All iterates over the buckets in use, in event order.
func (s *Series) All() iter.Seq2[int, Point] {
	return func(yield func(int, Point) bool) {
		if s == nil {
			return
		}
		for i, p := range s.buckets {
			if !yield(i, p) {
				return
			}
		}
	}
}

// Peaks returns the largest Max of each quantity over the series.
func (s *Series) Peaks() (requested, allocated, reserved int64) {
	if s == nil {
		return 0, 0, 0
	}
	for _, p := range s.buckets {
		requested = max(requested, p.Requested.Max)
		allocated = max(allocated, p.Allocated.Max)
		reserved = max(reserved, p.Reserved.Max)
	}
	return requested, allocated, reserved
}

// add records event ev (its index), at time t, after which the quantities
// are req, alloc and resEnd; reserved went as low as resMin and as high as
// resMax during the event. Events come in order, from 0, without gaps.
func (s *Series) add(ev, t, req, alloc, resMin, resMax, resEnd int64) {
	n := len(s.buckets)
	if n > 0 && s.fill < s.width {
		p := &s.buckets[n-1]
		p.Last, p.LastTimeUS = ev, t
		p.Requested.observe(ev, t, req, req, req)
		p.Allocated.observe(ev, t, alloc, alloc, alloc)
		p.Reserved.observe(ev, t, resMin, resMax, resEnd)
		s.fill++
		return
	}
	if n == cap(s.buckets) {
		s.halve()
	}
	s.buckets = append(s.buckets, Point{
		First: ev, Last: ev, FirstTimeUS: t, LastTimeUS: t,
		Requested: Range{Min: req, Max: req, End: req, MaxEvent: ev, MaxTimeUS: t},
		Allocated: Range{Min: alloc, Max: alloc, End: alloc, MaxEvent: ev, MaxTimeUS: t},
		Reserved:  Range{Min: resMin, Max: resMax, End: resEnd, MaxEvent: ev, MaxTimeUS: t},
	})
	s.fill = 1
}

func (r *Range) observe(ev, t, lo, hi, end int64) {
	if lo < r.Min {
		r.Min = lo
	}
	if hi > r.Max {
		r.Max, r.MaxEvent, r.MaxTimeUS = hi, ev, t
	}
	r.End = end
}

// halve merges neighbouring buckets pairwise. Every bucket is full when it
// is called, and the number of buckets is even.
func (s *Series) halve() {
	b := s.buckets
	for i := 0; i+1 < len(b); i += 2 {
		b[i/2] = merge(b[i], b[i+1])
	}
	s.buckets = b[:len(b)/2]
	s.width *= 2
	s.fill = s.width
}

// Decimate merges neighbouring points of a series, in groups of equal size,
// until there are at most n, as a Series merges its buckets: each merged
// point keeps the smallest and largest value of each quantity and the event
// of the largest (the earlier on a tie), so that no peak is lost. The points
// are returned as they are when there are at most n of them (or n < 1). It
// costs one pass over points and one allocation.
func Decimate(points []Point, n int) []Point {
	if n < 1 || len(points) <= n {
		return points
	}
	group := (len(points) + n - 1) / n
	out := make([]Point, 0, (len(points)+group-1)/group)
	for i := 0; i < len(points); i += group {
		p := points[i]
		for _, q := range points[i+1 : min(i+group, len(points))] {
			p = merge(p, q)
		}
		out = append(out, p)
	}
	return out
}

// merge joins bucket a with the bucket b that follows it.
func merge(a, b Point) Point {
	return Point{
		First: a.First, Last: b.Last,
		FirstTimeUS: a.FirstTimeUS, LastTimeUS: b.LastTimeUS,
		Requested: a.Requested.join(b.Requested),
		Allocated: a.Allocated.join(b.Allocated),
		Reserved:  a.Reserved.join(b.Reserved),
	}
}

func (r Range) join(next Range) Range {
	out := r
	out.Min = min(r.Min, next.Min)
	if next.Max > r.Max { // on a tie the earlier event keeps the peak
		out.Max, out.MaxEvent, out.MaxTimeUS = next.Max, next.MaxEvent, next.MaxTimeUS
	}
	out.End = next.End
	return out
}
