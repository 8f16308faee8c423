package planned_test

import (
	"testing"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/planned"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// FuzzPlanned serves the requests of a profiled loop with the fuzzer's
// changes (sizes replaced, requests inserted, frees moved), with the loop
// as profile (with and without reuse) and learning it (auto), and checks
// that live blocks never overlap, every free succeeds and the counters add
// up.
func FuzzPlanned(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 200, 7, 1, 9, 40})
	f.Add([]byte{0, 0, 0, 255, 128, 64, 32, 16, 8})
	base := steady(12, nil)
	profile := writeProfile(f, base)
	f.Fuzz(func(t *testing.T, data []byte) {
		ops := append([]op(nil), base...)
		for i := 0; i+1 < len(data); i += 2 {
			at := int(data[i]) * len(ops) / 256
			switch data[i+1] % 3 {
			case 0: // change a size
				if ops[at].size > 0 {
					ops[at].size = int64(data[i+1])<<10 + 1
				}
			case 1: // insert a short-lived request
				id := uint64(1<<40 + i)
				ins := []op{{id: id, size: int64(data[i+1]) << 9}, {id: id}}
				ops = append(ops[:at:at], append(ins, ops[at:]...)...)
			case 2: // swap two neighbouring events that are not a pair
				if at+1 < len(ops) && ops[at].id != ops[at+1].id {
					ops[at], ops[at+1] = ops[at+1], ops[at]
				}
			}
		}
		ops = wellFormed(ops)
		auto := planned.DefaultConfig()
		auto.MinStep, auto.MinShare = 1, 0
		prof := planned.DefaultConfig()
		prof.Profile = profile
		noReuse := prof
		noReuse.Reuse, noReuse.Window = false, 1
		for _, c := range []planned.Config{prof, noReuse, auto} {
			a, err := planned.New(strategytest.NewDevice(1<<34), c)
			if err != nil {
				t.Fatal(err)
			}
			serve(t, a, ops)
		}
	})
}

// wellFormed drops frees that come before their allocation (a swap can
// move them) and allocations of an id that is live.
func wellFormed(ops []op) []op {
	live := map[uint64]bool{}
	out := ops[:0]
	for _, o := range ops {
		if o.size == 0 {
			if !live[o.id] {
				continue
			}
			delete(live, o.id)
		} else {
			if live[o.id] {
				continue
			}
			live[o.id] = true
		}
		out = append(out, o)
	}
	return out
}

// serve replays ops on a and checks that live blocks never overlap, every
// free succeeds and the counters add up.
func serve(t *testing.T, a *planned.Allocator, ops []op) {
	live := map[uint64]gpualloc.Block{}
	for _, o := range ops {
		if o.size == 0 {
			if err := a.Free(live[o.id]); err != nil {
				t.Fatal(err)
			}
			delete(live, o.id)
			continue
		}
		b, err := a.Alloc(o.size)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range live {
			if b.Addr < l.End() && l.Addr < b.End() {
				t.Fatalf("block %+v overlaps %+v", b, l)
			}
		}
		live[o.id] = b
	}
	var req int64
	for _, b := range live {
		req += b.Requested
	}
	if s := a.Stats(); s.Requested != req || s.Reserved < s.Allocated {
		t.Fatalf("stats %+v, live requested %d", s, req)
	}
}
