package explain

import (
	"github.com/gpualloc/gpualloc/sim"
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
func (x *explainer) timeline(d int, rep *Report, full *sim.Result) *Timeline {
	evs := x.t.Events
	tl := &Timeline{}
	index := map[string]int{}
	for _, h := range rep.Holders {
		index[h.Site] = len(tl.Groups)
		tl.Groups = append(tl.Groups, h.Site)
	}
	other := len(tl.Groups)
	tl.Groups = append(tl.Groups, "other")
	width := max((len(evs)+MaxTimelinePoints-1)/MaxTimelinePoints, 1)
	live := make([]int64, len(tl.Groups))
	var total int64
	group := map[int32]int{} // the group of each live allocation, by slot
	var cur *TimelinePoint
	var best int64 = -1
	for i := range evs {
		if i%width == 0 {
			tl.Points = append(tl.Points, TimelinePoint{First: int64(i), Live: make([]int64, len(live))})
			cur, best = &tl.Points[len(tl.Points)-1], -1
		}
		ev := &evs[i]
		if int(ev.Device) == d {
			switch ev.Op {
			case traces.OpAlloc:
				g, ok := index[x.key(rep.By, i, ev)]
				if !ok {
					g = other
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
	}
	switch {
	case len(full.Devices) == 1 && full.Series != nil:
		for _, p := range full.Series.All() {
			tl.Reserved = append(tl.Reserved, ReservedPoint{p.First, p.Last, p.Reserved.Max})
		}
	case x.reserved != nil:
		tl.Reserved = x.reserved.points(d, tl.Points)
	}
	return tl
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
