package plan

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/gpualloc/gpualloc/traces"
)

// A Buffer is Size bytes live over the half-open interval [Lower, Upper) of
// time, MiniMalloc's lifespan: a buffer whose Upper is t and one whose Lower
// is t are never live together.
type Buffer struct {
	ID           string // the buffer's name in outputs; plans do not read it
	Lower, Upper int64
	Size         int64
}

// A Problem is the buffers to place.
type Problem struct {
	Buffers []Buffer
}

// MaxTotal is the most that the sizes of a problem's buffers may add up
// to: 2^63-1 bytes. Within it no height, offset or sum of live bytes that
// Solve computes can wrap, since every placement it makes is at most the
// sum of the sizes high.
const MaxTotal = math.MaxInt64

// Validate reports the first buffer that cannot be placed: an empty
// lifetime (Upper <= Lower) or a size <= 0; or, when the sizes of all the
// buffers add up to more than [MaxTotal], the buffer at which the sum
// passes it: Solve refuses such a problem rather than let a height wrap.
func (p *Problem) Validate() error {
	var total int64
	for i, b := range p.Buffers {
		switch {
		case b.Upper <= b.Lower:
			return fmt.Errorf("plan: buffer %d (%s): empty lifetime [%d, %d)", i, b.ID, b.Lower, b.Upper)
		case b.Size <= 0:
			return fmt.Errorf("plan: buffer %d (%s): size %d, want > 0", i, b.ID, b.Size)
		case b.Size > MaxTotal-total:
			return fmt.Errorf("plan: buffer %d (%s): the sizes of the buffers up to it add up to more than 2^63-1 bytes, too much to place", i, b.ID)
		}
		total += b.Size
	}
	return nil
}

// LowerBound returns the peak over time of the bytes of the live buffers:
// no placement is lower. It sorts the 2n ends of the lifetimes: O(n log n)
// time, O(n) memory. The sum saturates at 2^63-1 bytes, which only a
// problem that [Problem.Validate] refuses can reach.
func LowerBound(bufs []Buffer) int64 {
	peak, _ := livePeak(bufs)
	return peak
}

// peakTime returns the first time at which the bytes of the live buffers
// are at their peak ([LowerBound]); 0 for no buffers.
func peakTime(bufs []Buffer) int64 {
	_, t := livePeak(bufs)
	return t
}

// livePeak returns the peak over time of the bytes of the live buffers and
// the first time at which they reach it.
func livePeak(bufs []Buffer) (peak, at int64) {
	type point struct {
		t    int64
		size int64 // > 0 at a Lower, < 0 at an Upper
	}
	pts := make([]point, 0, 2*len(bufs))
	for _, b := range bufs {
		pts = append(pts, point{b.Lower, b.Size}, point{b.Upper, -b.Size})
	}
	// At equal times the ends come first: the intervals are half-open.
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.size, b.size)
	})
	var live int64
	for _, p := range pts {
		if p.size > 0 && live > math.MaxInt64-p.size {
			return math.MaxInt64, p.t
		}
		live += p.size
		if live > peak {
			peak, at = live, p.t
		}
	}
	return peak, at
}

// A DeviceProblem is the problem of one device of a trace.
type DeviceProblem struct {
	Device int
	// Memory is the device's memory as the trace records it (a PyTorch
	// snapshot that records an out-of-memory error, a trace written with
	// device_memory comments: the capacity a replay of the trace gives
	// the device), 0 when it records none.
	Memory int64
	Problem
}

// A memoryReporter is a reader that records the memory of its devices
// (sim.CapacityReporter, which this package does not import).
type memoryReporter interface {
	DeviceCapacity(device int) int64
}

// FromTrace reads the events of r and returns one problem per device index
// that the trace uses, in increasing order of index: each device has its
// own address space, as each has its own pool in a replay. Times are event
// indexes of the whole trace, from 0: an allocation made by event a and
// freed by event f is the buffer [a, f); one never freed lives to the end,
// [a, n) for a trace of n events. A buffer's ID is the trace's id of the
// allocation, with ".k" added for the k-th reuse of an id after its free
// (k from 1), so that every ID of a problem is distinct.
//
// Memory is linear in the allocations: about 40 bytes and the ID's text
// each. For a MiniMalloc CSV, use [FromMiniMalloc] to keep its ids and times.
func FromTrace(r traces.Reader) ([]DeviceProblem, error) {
	return FromTraceContext(context.Background(), r)
}

// FromTraceContext is [FromTrace], stopped by ctx: it checks ctx every
// 65536 events and returns its error when it is done.
func FromTraceContext(ctx context.Context, r traces.Reader) ([]DeviceProblem, error) {
	type open struct {
		dev int32
		buf int32 // index in that device's buffers
	}
	var (
		probs []DeviceProblem // by first use; sorted at the end
		devIx = map[int32]int{}
		live  []open // by slot
		uses  = map[uint64]int{}
		n     int64
	)
	for ; r.Scan(); n++ {
		if n&0xffff == 0xffff {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ev := r.Event()
		for int(ev.Slot) >= len(live) {
			live = append(live, open{})
		}
		switch ev.Op {
		case traces.OpAlloc:
			d, ok := devIx[ev.Device]
			if !ok {
				d = len(probs)
				devIx[ev.Device] = d
				probs = append(probs, DeviceProblem{Device: int(ev.Device)})
			}
			id := ev.IDText()
			if k := uses[ev.ID]; k > 0 {
				id += "." + strconv.Itoa(k)
			}
			uses[ev.ID]++
			p := &probs[d].Problem
			if len(p.Buffers) >= 1<<31-1 {
				return nil, fmt.Errorf("plan: too many allocations on device %d", ev.Device)
			}
			live[ev.Slot] = open{dev: int32(d), buf: int32(len(p.Buffers))}
			p.Buffers = append(p.Buffers, Buffer{ID: id, Lower: n, Upper: -1, Size: ev.Size})
		case traces.OpFree:
			o := live[ev.Slot]
			probs[o.dev].Buffers[o.buf].Upper = n
		}
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	for i := range probs {
		for j := range probs[i].Buffers {
			if b := &probs[i].Buffers[j]; b.Upper < 0 {
				b.Upper = n
			}
		}
	}
	if mr, ok := r.(memoryReporter); ok {
		for i := range probs {
			probs[i].Memory = max(mr.DeviceCapacity(probs[i].Device), 0)
		}
	}
	slices.SortFunc(probs, func(a, b DeviceProblem) int { return cmp.Compare(a.Device, b.Device) })
	return probs, nil
}

// FromMiniMalloc returns the problem of the MiniMalloc CSV that r reads (a
// reader that traces.Open or traces.NewReader gave), with MiniMalloc's ids
// and times: its buffers in the order of the file, the bad ones skipped in
// lenient mode, as [FromTrace] cannot give them. It returns false when r
// reads another format. It allocates the buffers and the text of each id;
// call it before r's Close.
func FromMiniMalloc(r traces.Reader) (Problem, bool) {
	mr, ok := r.(miniMallocReader)
	if !ok {
		return Problem{}, false
	}
	p := Problem{Buffers: []Buffer{}}
	mr.MiniMallocBuffers(func(id string, lower, upper, size int64) {
		p.Buffers = append(p.Buffers, Buffer{ID: id, Lower: lower, Upper: upper, Size: size})
	})
	return p, true
}

// A miniMallocReader is the reader of a MiniMalloc CSV of package traces,
// which gives the buffers as the file has them.
type miniMallocReader interface {
	MiniMallocBuffers(add func(id string, lower, upper, size int64))
}
