package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// logOf returns a log of evs in pages of page events, holding held pages
// in memory and spilling the rest to a temporary file in dir.
func logOf(t testing.TB, dir string, evs []traces.Event, page, held int) *EventLog {
	t.Helper()
	l := NewEventLog(dir, int64(held*page*eventBytes))
	l.page = page
	for _, ev := range evs {
		if err := l.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// randomEvents returns n events with every field set, at random.
func randomEvents(n int) []traces.Event {
	rng := rand.New(rand.NewPCG(1, 2))
	evs := make([]traces.Event, n)
	for i := range evs {
		evs[i] = traces.Event{Op: traces.Op(rng.IntN(3)), Category: gpualloc.Category(rng.IntN(4)), Stack: rng.Uint32(),
			ID: rng.Uint64(), Slot: rng.Int32(), Device: int32(rng.IntN(4)), Size: rng.Int64(), Stream: rng.Uint64(), TimeUS: rng.Int64() - 1<<62}
	}
	return evs
}

// TestEventLog checks that a log gives back what was appended, by every
// reader of a prefix and by index, from its pages in memory, in its
// temporary file (in the directory given, its name removed) and in its
// last page.
func TestEventLog(t *testing.T) {
	dir := t.TempDir()
	evs := randomEvents(103)
	l := logOf(t, dir, evs, 10, 3)
	if l.Len() != len(evs) || l.Spilled() != 7*10*eventBytes {
		t.Fatalf("%d events, %d bytes spilled; want %d, %d", l.Len(), l.Spilled(), len(evs), 7*10*eventBytes)
	}
	if left, _ := os.ReadDir(dir); runtime.GOOS != "windows" && len(left) > 0 { // Windows keeps the name of an open file
		t.Errorf("%d files left in the directory", len(left))
	}
	for i := range evs {
		if ev, err := l.At(i); err != nil || ev != evs[i] {
			t.Fatalf("At(%d) = %+v, %v; want %+v", i, ev, err, evs[i])
		}
	}
	if _, err := l.At(len(evs)); err == nil {
		t.Error("At past the end: no error")
	}
	for _, n := range []int{0, 1, 9, 10, 11, 30, 31, 99, 100, 103, 200} {
		// By Scan and by Batch, at once: a walk of either.
		for _, batch := range []bool{false, true} {
			r := l.Reader("log", n)
			var got []traces.Event
			if batch {
				for b := r.Batch(); len(b) > 0; b = r.Batch() {
					got = append(got, b...)
				}
			} else {
				for r.Scan() {
					got = append(got, r.Event())
				}
			}
			want := evs[:min(n, len(evs))]
			if r.Err() != nil || len(got) != len(want) {
				t.Fatalf("prefix %d (batch %v): %d events, %v", n, batch, len(got), r.Err())
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("prefix %d (batch %v): event %d = %+v, want %+v", n, batch, i, got[i], want[i])
				}
			}
		}
	}
	// A log that holds every page spills nothing.
	if l := logOf(t, dir, evs, 10, 100); l.Spilled() != 0 {
		t.Errorf("%d bytes spilled within the bound", l.Spilled())
	}
}

// TestEventLogFails checks the failures of the temporary file: a missing
// directory fails the append that spills, naming it, and a file cut short
// fails the read back of a walk, naming the trace.
func TestEventLogFails(t *testing.T) {
	missing := t.TempDir() + "/missing"
	l := NewEventLog(missing, 1)
	l.page = 4
	var err error
	for _, ev := range randomEvents(8) {
		if err = l.Append(ev); err != nil {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("append into a missing directory: %v", err)
	}
	l = logOf(t, t.TempDir(), randomEvents(12), 4, 1)
	l.Close()
	r := l.Reader("gen.csv", 12)
	for r.Scan() {
	}
	if err := r.Err(); err == nil || !strings.HasPrefix(err.Error(), "gen.csv: reading back the temporary file") {
		t.Errorf("read back of a closed file: %v", err)
	}
}

// withLog returns tr with its events in a log of small pages, most of
// them spilled.
func withLog(t testing.TB, tr *Trace) *Trace {
	t.Helper()
	lt := *tr
	lt.Log, lt.Events = logOf(t, t.TempDir(), tr.Events, 7, 2), nil
	return &lt
}

// momentOf returns the JSON of what r says of its moment: all but the
// rows of what would have fit and the verdict they decide.
func momentOf(t testing.TB, r Report) string {
	t.Helper()
	r.Alternatives, r.OfflineBytes, r.OfflineProvenBytes = nil, nil, nil
	r.Verdict, r.Sentence, r.Suggestion, r.HeadroomBytes = "", "", "", nil
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkLog checks that Explain says of each moment of tr, its events in a
// log whose pages mostly spill, what it says with the events in memory,
// reps.
func checkLog(t *testing.T, tr *Trace, o Options, reps []Report) {
	t.Helper()
	o.TimeLimit = time.Nanosecond
	got, err := Explain(context.Background(), withLog(t, tr), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reps) {
		t.Fatalf("%d reports from the log, %d from memory", len(got), len(reps))
	}
	for i := range got {
		if g, w := momentOf(t, got[i]), momentOf(t, reps[i]); g != w {
			t.Errorf("device %d, from the log:\n%s\nfrom memory:\n%s", reps[i].Device, g, w)
		}
	}
}

// TestExplainLog explains traces whose events are in a log, most of it
// spilled: every figure is the one of the events in memory, the rows of
// what would have fit included.
func TestExplainLog(t *testing.T) {
	frag := fragmented(t)
	for _, c := range []struct {
		name string
		tr   *Trace
		o    Options
	}{
		{"fragmented", frag, Options{Capacity: 200 * mb}},
		{"at", frag, Options{At: &At{Event: 29}}},
		{"oom", oomSnapshot(t), Options{}},
		{"shared", sharedSnapshot(t, "inference_2024.pickle"), Options{Top: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			o.Workers = 1
			want, err := Explain(context.Background(), c.tr, o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Explain(context.Background(), withLog(t, c.tr), o)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if g, w := momentOf(t, got[i]), momentOf(t, want[i]); g != w {
					t.Errorf("device %d, from the log:\n%s\nfrom memory:\n%s", want[i].Device, g, w)
				}
				for k, a := range want[i].Alternatives {
					b := got[i].Alternatives[k]
					if a.TimedOut || b.TimedOut || a.Label == "tune's best" {
						continue // what the time left decides
					}
					if fmt.Sprint(a.Spec, *a.PeakReservedBytes, *a.Fits, *a.MinCapacityBytes) != fmt.Sprint(b.Spec, *b.PeakReservedBytes, *b.Fits, *b.MinCapacityBytes) {
						t.Errorf("device %d, row %s: from the log %+v, from memory %+v", want[i].Device, a.Label, b, a)
					}
				}
			}
		})
	}
}

// liveHeap follows the peak of the live heap, as each garbage collection
// finds it, while it runs: a finalizer that each collection runs reads the
// heap the collection marked.
type liveHeap struct {
	peak atomic.Uint64
	stop atomic.Bool
}

// watch starts following the live heap; stop ends it.
func (h *liveHeap) watch() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var arm func()
	arm = func() {
		s := new([16]byte)
		runtime.SetFinalizer(s, func(*[16]byte) {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > h.peak.Load() {
				h.peak.Store(v)
			}
			if !h.stop.Load() {
				arm()
			}
		})
	}
	arm()
}

// growingSnapshot returns a PyTorch snapshot, read back as simulate
// explain reads one, of a run with the same live allocations whatever n:
// 64 blocks that stay, then n allocations, each freed before the next, of
// sizes that vary.
func growingSnapshot(t *testing.T, n int) *Trace {
	t.Helper()
	var b strings.Builder
	b.WriteString("op,id,size\n")
	for i := range 64 {
		fmt.Fprintf(&b, "alloc,%d,%d\n", i, (i%7+1)<<20)
	}
	for i := range n {
		fmt.Fprintf(&b, "alloc,%d,%d\nfree,%d,\n", 1000+i, (i%13+1)<<16, 1000+i)
	}
	r, err := traces.NewReader(strings.NewReader(b.String()), "gen.csv", traces.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pytorchParams("")
	if err != nil {
		t.Fatal(err)
	}
	var pickle strings.Builder
	_, err = sim.Replay(r, sim.Config{Params: p, Snapshot: func(s *snapshot.Snapshot) error {
		return snapshot.Write(&pickle, s, snapshot.WriteOptions{})
	}})
	if err != nil {
		t.Fatal(err)
	}
	sr, err := traces.NewReader(strings.NewReader(pickle.String()), "gen.pickle", traces.Options{Stacks: true, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// Pages of 1024 events, 16 of them in memory: a walk's buffers are
	// then small beside what the test looks for.
	l := NewEventLog(t.TempDir(), 16*1024*eventBytes)
	l.page = 1024
	t.Cleanup(func() { l.Close() })
	for sr.Scan() {
		if err := l.Append(sr.Event()); err != nil {
			t.Fatal(err)
		}
	}
	if err := sr.Err(); err != nil {
		t.Fatal(err)
	}
	return &Trace{Name: "gen.pickle", Format: sr.Format(), Log: l, Start: traces.StartOf(sr), Memory: sr.(sim.CapacityReporter),
		Snapshot: sr.(interface{ Snapshot() *snapshot.Snapshot }).Snapshot()}
}

// TestExplainMemoryBounded measures the heap that explaining the moment
// and its holders takes beyond the trace read (the snapshot, and its
// events in a log of 768 KiB in memory), for traces of n and 4n events with
// the same live allocations: what Explain holds of its own must not grow
// with the events. Held per event, as the events once were (48 bytes
// each) or their stacks (8 bytes each), it would grow by 27 or 4.6 MiB.
func TestExplainMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("replays traces of 800,000 events")
	}
	const n = 50_000
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	extra := func(events int) uint64 {
		tr := growingSnapshot(t, events)
		if tr.Log.Spilled() == 0 {
			t.Fatalf("%d events: nothing spilled", tr.Log.Len())
		}
		// The least of three runs: a collection counts as live what is
		// allocated while it marks, garbage that only adds to a peak.
		least := uint64(math.MaxUint64)
		for range 3 {
			var base runtime.MemStats
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&base)
			h := &liveHeap{}
			h.watch()
			reps, err := Explain(context.Background(), tr, Options{TimeLimit: time.Nanosecond, Timeline: true})
			h.stop.Store(true)
			runtime.GC()
			if err != nil || len(reps) != 1 || reps[0].LiveBytes == 0 {
				t.Fatalf("%d events: %v, %d reports", tr.Log.Len(), err, len(reps))
			}
			least = min(least, h.peak.Load()-min(h.peak.Load(), base.HeapAlloc))
		}
		runtime.KeepAlive(tr)
		return least
	}
	small, large := extra(2*n), extra(8*n)
	t.Logf("the heap beyond the trace read: %d KiB for %d events, %d KiB for %d", small>>10, 2*n, large>>10, 8*n)
	if large > small+2<<20 {
		t.Errorf("explaining 4 times the events takes %d KiB more of the heap (%d KiB, %d KiB): it grows with the events", (large-small)>>10, small>>10, large>>10)
	}
}
