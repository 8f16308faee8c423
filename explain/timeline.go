package explain

import (
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/traces"
)

// MaxTimelinePoints bounds the points of a Timeline.
const MaxTimelinePoints = 600

// A Timeline is the course of a device's memory over its trace, for a
// figure: the live bytes of the report's holders, the rest of the live
// bytes as "other", and the reserved bytes of the replay as the trace ran
// where it can be told for the device alone.
type Timeline struct {
	// Groups are the holders' groups, then "other".
	Groups []string
	// Points are the buckets of events, in order, at most
	// MaxTimelinePoints: each holds the live bytes of each group at the
	// event of the bucket where the device's live bytes were largest, so
	// that no peak of live bytes is lost.
	Points []TimelinePoint
	// Reserved is the course of the reserved bytes, nil when the trace
	// has several devices: the replay's series sums them.
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
	if len(full.Devices) == 1 && full.Series != nil {
		for _, p := range full.Series.All() {
			tl.Reserved = append(tl.Reserved, ReservedPoint{p.First, p.Last, p.Reserved.Max})
		}
	}
	return tl
}
