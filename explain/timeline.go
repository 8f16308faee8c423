package explain

import (
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// MaxTimelinePoints bounds the points of a Timeline.
const MaxTimelinePoints = 600

// A Timeline is the course of a device's memory over its trace, for a
// figure: the live bytes of the report's holders, the rest of the live
// bytes as "other", and the device's own reserved bytes in the replay as
// the trace ran.
type Timeline struct {
	// Groups are the holders' groups, then "other".
	Groups []string
	// Points are the buckets of events, in order, at most
	// MaxTimelinePoints: each holds the live bytes of each group at the
	// event of the bucket where the device's live bytes were largest, so
	// that no peak of live bytes is lost.
	Points []TimelinePoint
	// Reserved is the course of the device's reserved bytes, never a sum
	// over devices: the replay's series for a trace of one device, else
	// what the replay observed of this device, in the buckets of Points.
	Reserved []ReservedPoint
}

// A TimelinePoint is a bucket of events First..Last (indexes in the
// trace, both included).
type TimelinePoint struct {
	First, Last int64
	Live        []int64 // by group, as Timeline.Groups
}

// A ReservedPoint is the largest reserved bytes over events First..Last.
type ReservedPoint struct {
	First, Last int64
	Bytes       int64
}

// timeline returns the course of device d's memory, its live bytes grouped
// as rep's holders; full is the replay as the trace ran.
func (x *explainer) timeline(d int, rep *Report, full *sim.Result) (*Timeline, error) {
	n := x.ev.Len()
	tl := &Timeline{}
	index := map[string]int{}
	for _, h := range rep.Holders {
		index[h.Site] = len(tl.Groups)
		tl.Groups = append(tl.Groups, h.Site)
	}
	other := len(tl.Groups)
	tl.Groups = append(tl.Groups, "other")
	width := max((n+MaxTimelinePoints-1)/MaxTimelinePoints, 1)
	live := make([]int64, len(tl.Groups))
	var total int64
	group := map[int32]int{}     // the group of each live allocation, by slot
	groups := map[[2]int64]int{} // the group of each memoKey
	var cur *TimelinePoint
	var best int64 = -1
	w := x.stacks.walk()
	err := walk(x.ev, n, func(i int, ev *traces.Event) error {
		if i%width == 0 {
			tl.Points = append(tl.Points, TimelinePoint{First: int64(i), Live: make([]int64, len(live))})
			cur, best = &tl.Points[len(tl.Points)-1], -1
		}
		if int(ev.Device) == d {
			switch ev.Op {
			case traces.OpAlloc:
				st, j := x.stacks.stackOf(w, i, ev)
				k, memo := x.memoKey(rep.By, i, ev, st)
				g, ok := groups[k]
				if !ok || !memo {
					if g, ok = index[x.key(rep.By, i, ev, st, j)]; !ok {
						g = other
					}
					if memo {
						groups[k] = g
					}
				}
				group[ev.Slot] = g
				live[g] += ev.Size
				total += ev.Size
			case traces.OpFree:
				g := group[ev.Slot]
				delete(group, ev.Slot)
				live[g] -= ev.Size
				total -= ev.Size
			}
		}
		cur.Last = int64(i)
		if total > best {
			best = total
			copy(cur.Live, live)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case len(full.Devices) == 1 && full.Series != nil:
		for _, p := range full.Series.All() {
			tl.Reserved = append(tl.Reserved, ReservedPoint{p.First, p.Last, p.Reserved.Max})
		}
	case x.reserved != nil:
		tl.Reserved = x.reserved.points(d, tl.Points)
	}
	return tl, nil
}

// memoKey returns what decides the group of alloc event i, ev, of stack
// st, when grouped by by, and true; false where that is more than a
// number or two (an annotation). The timeline keys each distinct one once.
func (x *explainer) memoKey(by By, i int, ev *traces.Event, st snapshot.StackID) ([2]int64, bool) {
	switch by {
	case BySite, ByFrame:
		before := int64(0)
		if x.t.Start != nil && i < x.t.Start.Initial {
			before = 1
		}
		return [2]int64{int64(st), before}, true
	case ByStream:
		return [2]int64{int64(ev.Stream)}, true
	case BySize:
		return [2]int64{ev.Size}, true
	}
	return [2]int64{}, false
}

// deviceReserved follows each device's reserved bytes through a replay
// (sim.Config.Observe), as the largest of each bucket of width events, the
// buckets of a Timeline: O(devices × MaxTimelinePoints) memory, and one
// call an event.
type deviceReserved struct {
	width int64
	devs  map[int32]*bucketsOf
}

// bucketsOf is one device's buckets: the largest reserved bytes the
// device's events left in each, and the bytes after its last event there.
type bucketsOf struct {
	max, last []int64
	seen      []bool
}

// newDeviceReserved returns the follower of a trace of n events.
func newDeviceReserved(n int) *deviceReserved {
	return &deviceReserved{width: int64(max((n+MaxTimelinePoints-1)/MaxTimelinePoints, 1)), devs: map[int32]*bucketsOf{}}
}

// observe is a sim.Config.Observe.
func (r *deviceReserved) observe(n int64, ev *traces.Event, after sim.DeviceBytes) error {
	b := r.devs[ev.Device]
	if b == nil {
		b = &bucketsOf{}
		r.devs[ev.Device] = b
	}
	i := int(n / r.width)
	for len(b.max) <= i {
		b.max, b.last, b.seen = append(b.max, 0), append(b.last, 0), append(b.seen, false)
	}
	b.max[i] = max(b.max[i], after.Reserved)
	b.last[i], b.seen[i] = after.Reserved, true
	return nil
}

// points returns device d's reserved bytes over the buckets of pts: in a
// bucket where d has no event, what its last event before left.
func (r *deviceReserved) points(d int, pts []TimelinePoint) []ReservedPoint {
	b := r.devs[int32(d)]
	if b == nil {
		return nil
	}
	out := make([]ReservedPoint, len(pts))
	var held int64 // after d's last event so far
	for i, p := range pts {
		v := held
		if i < len(b.seen) && b.seen[i] {
			v = max(held, b.max[i])
			held = b.last[i]
		}
		out[i] = ReservedPoint{p.First, p.Last, v}
	}
	return out
}
