package sim

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gpualloc/gpualloc/traces"
)

// TestObserve replays a random trace of three devices through a caching
// strategy and checks what Config.Observe sees after each event against
// the replay's own figures: each event once, in order; each device's
// requested bytes follow the trace; and each device's largest figures
// are its peaks in Result.Devices.
func TestObserve(t *testing.T) {
	tr := randomTrace(rand.New(rand.NewPCG(7, 8)), 4000, traceShape{maxSize: 3 << 20, maxLive: 60, devices: 3})
	tr.on(1, 0).release()
	type peaks struct{ req, alloc, res int64 }
	got := map[int32]*peaks{}
	live := map[int32]int64{}
	var next int64
	res, err := Replay(tr.reader(), Config{Open: openCache, SeriesBuckets: -1,
		Observe: func(n int64, ev *traces.Event, after DeviceBytes) error {
			if n != next || *ev != tr.events[n] {
				t.Fatalf("event %d (%+v) observed as event %d (%+v)", next, tr.events[next], n, *ev)
			}
			next++
			switch ev.Op {
			case traces.OpAlloc:
				live[ev.Device] += ev.Size
			case traces.OpFree:
				live[ev.Device] -= ev.Size
			}
			if after.Requested != live[ev.Device] {
				t.Fatalf("event %d: device %d requested %d, the trace has %d live", n, ev.Device, after.Requested, live[ev.Device])
			}
			if after.Allocated < after.Requested || after.Reserved < after.Allocated {
				t.Fatalf("event %d: requested %d, allocated %d, reserved %d", n, after.Requested, after.Allocated, after.Reserved)
			}
			p := got[ev.Device]
			if p == nil {
				p = &peaks{}
				got[ev.Device] = p
			}
			p.req, p.alloc, p.res = max(p.req, after.Requested), max(p.alloc, after.Allocated), max(p.res, after.Reserved)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if next != int64(len(tr.events)) {
		t.Errorf("observed %d events of %d", next, len(tr.events))
	}
	if len(res.Devices) != 3 {
		t.Fatalf("%d devices in the result, want 3", len(res.Devices))
	}
	for _, d := range res.Devices {
		p := got[int32(d.Device)]
		if p == nil {
			t.Fatalf("device %d never observed", d.Device)
		}
		if p.req != d.PeakRequestedBytes || p.alloc != d.PeakAllocatedBytes || p.res != d.PeakReservedBytes {
			t.Errorf("device %d: observed peaks %d/%d/%d, the result's %d/%d/%d", d.Device,
				p.req, p.alloc, p.res, d.PeakRequestedBytes, d.PeakAllocatedBytes, d.PeakReservedBytes)
		}
	}
}

// TestObserveError: the error of Observe ends the replay and is its
// error.
func TestObserveError(t *testing.T) {
	tr := newTrace().alloc(1, 100).alloc(2, 200).free(1).free(2)
	stop := errors.New("disk full")
	var seen int64
	_, err := Replay(tr.reader(), Config{Open: openCache, Observe: func(n int64, _ *traces.Event, _ DeviceBytes) error {
		seen++
		if n == 1 {
			return stop
		}
		return nil
	}})
	if !errors.Is(err, stop) {
		t.Errorf("replay: %v, want %v", err, stop)
	}
	if seen != 2 {
		t.Errorf("observed %d events, want 2: the replay stops at the error", seen)
	}
}
