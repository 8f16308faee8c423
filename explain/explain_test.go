package explain

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpualloc/gpualloc"
	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/plan"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	_ "github.com/gpualloc/gpualloc/strategy/all"
	"github.com/gpualloc/gpualloc/traces"
)

const mb = 1 << 20

// csvTrace reads a native trace of the given lines (after its header).
func csvTrace(t *testing.T, lines []string) *Trace {
	t.Helper()
	text := "op,id,size,device\n" + strings.Join(lines, "\n") + "\n"
	r, err := traces.NewReader(strings.NewReader(text), "gen.csv", traces.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := traces.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return &Trace{Name: "gen.csv", Format: r.Format(), Events: evs}
}

func explainOne(t *testing.T, tr *Trace, o Options) Report {
	t.Helper()
	reps, err := Explain(context.Background(), tr, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 {
		t.Fatalf("%d reports, want 1", len(reps))
	}
	checkSums(t, tr, &reps[0])
	checkLog(t, tr, o, reps)
	return reps[0]
}

// checkSums checks what every report must hold: the groups add up to the
// live bytes, which an independent recount of the trace finds; the parts
// add up to the reserved bytes; the free bytes are the capacity less the
// blocks.
func checkSums(t *testing.T, tr *Trace, r *Report) {
	t.Helper()
	sum := r.OtherBytes
	for _, h := range r.Holders {
		sum += h.Bytes
	}
	if sum != r.LiveBytes {
		t.Errorf("device %d: holders add up to %d, live bytes are %d", r.Device, sum, r.LiveBytes)
	}
	end := int(r.EventIndex) + 1
	if r.Moment == MomentOOM {
		end = int(r.EventIndex)
	}
	if got := recount(tr.Events[:end], r.Device); got != r.LiveBytes {
		t.Errorf("device %d at event %d (%s): live bytes %d, a recount %d", r.Device, r.EventIndex, r.Moment, r.LiveBytes, got)
	}
	if got := r.LiveBytes - r.UnservedBytes + r.RoundingBytes + r.FragmentedBytes + r.CachedBytes; got != r.ReservedBytes {
		t.Errorf("device %d: live, rounding, fragmented and cached add up to %d, reserved %d", r.Device, got, r.ReservedBytes)
	}
	if r.FreeBytes != r.CapacityBytes-(r.LiveBytes-r.UnservedBytes+r.RoundingBytes) {
		t.Errorf("device %d: free %d of %d with %d in blocks", r.Device, r.FreeBytes, r.CapacityBytes, r.LiveBytes-r.UnservedBytes+r.RoundingBytes)
	}
}

// recount sums the sizes of the allocations of device d live after events,
// pairing allocs and frees by id.
func recount(events []traces.Event, d int) int64 {
	live := map[uint64]int64{}
	for _, ev := range events {
		if int(ev.Device) != d {
			continue
		}
		switch ev.Op {
		case traces.OpAlloc:
			live[ev.ID] = ev.Size
		case traces.OpFree:
			delete(live, ev.ID)
		}
	}
	var n int64
	for _, s := range live {
		n += s
	}
	return n
}

func TestLiveBound(t *testing.T) {
	var lines []string
	for i := range 5 {
		lines = append(lines, fmt.Sprintf("alloc,%d,%d,0", i, 30*mb))
	}
	tr := csvTrace(t, lines)
	r := explainOne(t, tr, Options{Capacity: 100 * mb})
	if r.Verdict != LiveBound || r.Suggestion != "" {
		t.Errorf("verdict %s, suggestion %q; want live-bound, none", r.Verdict, r.Suggestion)
	}
	// Three segments of 30 MiB, and the fourth does not fit.
	if r.Moment != MomentOOM || r.Recorded || r.EventIndex != 3 || r.RequestBytes != 30*mb {
		t.Errorf("moment %s at %d (recorded %v), request %d; want a replayed oom at 3 of 30 MiB", r.Moment, r.EventIndex, r.Recorded, r.RequestBytes)
	}
	if r.LiveBytes != 90*mb || r.ReservedBytes != 90*mb || r.PeakLiveBytes != 150*mb || r.CapacitySource != CapacityFlag {
		t.Errorf("live %d, reserved %d, peak live %d, capacity from %s", r.LiveBytes, r.ReservedBytes, r.PeakLiveBytes, r.CapacitySource)
	}
	if r.FreePieces != 1 || r.LargestFreeBytes != 10*mb || r.FreeBytes != 10*mb {
		t.Errorf("free %d in %d pieces, largest %d; want the device's 10 MiB", r.FreeBytes, r.FreePieces, r.LargestFreeBytes)
	}
	if r.Frames || r.By != BySize || len(r.Holders) != 1 || r.Holders[0] != (Holder{"30 MiB", 90 * mb, 3}) {
		t.Errorf("holders %+v (frames %v)", r.Holders, r.Frames)
	}
	if !strings.Contains(r.Sentence, "50.0 MiB more than the device's 100 MiB") {
		t.Errorf("sentence %q", r.Sentence)
	}
	for _, a := range r.Alternatives {
		if a.Fits == nil || *a.Fits {
			t.Errorf("%s fits a device smaller than the live bytes", a.Label)
		}
	}
}

// fragmented returns a trace that leaves PyTorch's default allocator a
// device of 200 MiB in ten segments of 20 MiB, each with a live block of
// 6 MiB between free ones of 6 and 8 MiB, and then asks for 12 MiB.
func fragmented(t *testing.T) *Trace {
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("alloc,%d,%d,0", i, 6*mb))
	}
	for i := range 30 {
		if i%3 != 1 {
			lines = append(lines, fmt.Sprintf("free,%d,,0", i))
		}
	}
	lines = append(lines, fmt.Sprintf("alloc,100,%d,0", 12*mb))
	return csvTrace(t, lines)
}

func TestFragmentationBound(t *testing.T) {
	tr := fragmented(t)
	r := explainOne(t, tr, Options{Capacity: 200 * mb})
	if r.Verdict != FragmentationBound {
		t.Fatalf("verdict %s (%s), want fragmentation-bound", r.Verdict, r.Sentence)
	}
	if r.Moment != MomentOOM || r.EventIndex != 50 || r.RequestBytes != 12*mb {
		t.Errorf("moment %s at %d, request %d", r.Moment, r.EventIndex, r.RequestBytes)
	}
	want := Report{LiveBytes: 60 * mb, ReservedBytes: 200 * mb, FragmentedBytes: 140 * mb, FreeBytes: 140 * mb, FreePieces: 20, LargestFreeBytes: 8 * mb}
	got := Report{LiveBytes: r.LiveBytes, ReservedBytes: r.ReservedBytes, FragmentedBytes: r.FragmentedBytes, FreeBytes: r.FreeBytes,
		FreePieces: r.FreePieces, LargestFreeBytes: r.LargestFreeBytes, CachedBytes: r.CachedBytes, RoundingBytes: r.RoundingBytes}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("state\n got %+v\nwant %+v", got, want)
	}
	if r.Suggestion != "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" {
		t.Errorf("suggestion %q", r.Suggestion)
	}
	checkSuggestion(t, tr, &r)
	// tune's best, replayed from its spec, gives the figures of its row.
	for _, a := range r.Alternatives {
		if a.Label != "tune's best" {
			continue
		}
		sp, err := gpualloc.ParseSpec(a.Spec)
		if err != nil {
			t.Fatal(err)
		}
		p, err := gpualloc.Resolve(sp, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := sim.Replay(traces.NewSliceReader(tr.Name, tr.Events), sim.Config{Params: p, Capacity: r.CapacityBytes})
		if err != nil {
			t.Fatal(err)
		}
		if a.Fits == nil || !*a.Fits || res.OOMs != 0 || *a.PeakReservedBytes != res.PeakReservedBytes || !strings.HasPrefix(a.Suggestion, "PYTORCH_CUDA_ALLOC_CONF=") {
			t.Errorf("tune's best %+v: a replay peaks at %d with %d OOMs", a, res.PeakReservedBytes, res.OOMs)
		}
		return
	}
	t.Error("no row of tune's best")
}

// checkSuggestion replays the trace with the report's suggestion, as a
// user would paste it, and checks the figures the report shows for it.
func checkSuggestion(t *testing.T, tr *Trace, r *Report) {
	t.Helper()
	key, value, _ := strings.Cut(r.Suggestion, "=")
	explicit := "" // PYTORCH_CUDA_ALLOC_CONF=... simulate -s pytorch
	if key != gpualloc.EnvPoolType {
		explicit = "pytorch"
	}
	p, err := gpualloc.Select(explicit, func(k string) (string, bool) {
		if k == key {
			return value, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	var row *Alternative
	for i := range r.Alternatives {
		if r.Alternatives[i].Suggestion == r.Suggestion {
			row = &r.Alternatives[i]
		}
	}
	if row == nil || row.PeakReservedBytes == nil || row.MinCapacityBytes == nil {
		t.Fatalf("no complete row for %q", r.Suggestion)
	}
	replay := func(c int64) sim.DeviceResult {
		res, err := sim.Replay(traces.NewSliceReader(tr.Name, tr.Events), sim.Config{Params: p, Capacity: c})
		if err != nil {
			t.Fatal(err)
		}
		return deviceOf(&res, r.Device)
	}
	d := replay(r.CapacityBytes)
	if d.OOMs != 0 || d.PeakReservedBytes != *row.PeakReservedBytes || r.CapacityBytes-d.PeakReservedBytes != *r.HeadroomBytes {
		t.Errorf("%s: %d OOMs, peak %d, want none, %d with headroom %d", r.Suggestion, d.OOMs, d.PeakReservedBytes, *row.PeakReservedBytes, *r.HeadroomBytes)
	}
	if replay(*row.MinCapacityBytes).OOMs != 0 || replay(*row.MinCapacityBytes-mb).OOMs == 0 {
		t.Errorf("%s: smallest device %d: want no OOM on it and one 1 MiB below", r.Suggestion, *row.MinCapacityBytes)
	}
}

func TestCacheBound(t *testing.T) {
	tr := csvTrace(t, []string{
		fmt.Sprintf("alloc,1,%d,0", 50*mb),
		"free,1,,0",
		fmt.Sprintf("alloc,2,%d,0", 120*mb),
	})
	// TensorFlow's BFC without garbage collection keeps its free region of
	// 64 MiB, and a region of 128 MiB does not fit beside it.
	p, err := gpualloc.Resolve(gpualloc.Spec{Name: "bfc", Params: []gpualloc.KeyValue{{Key: "allow_growth", Value: "true"}, {Key: "garbage_collection", Value: "false"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := explainOne(t, tr, Options{Capacity: 150 * mb, Strategy: p})
	if r.Verdict != CacheBound {
		t.Fatalf("verdict %s (%s), want cache-bound", r.Verdict, r.Sentence)
	}
	if r.Moment != MomentOOM || r.EventIndex != 2 || r.CachedBytes != 64*mb || r.LiveBytes != 0 || r.ReservedBytes != 64*mb {
		t.Errorf("moment %s at %d: cached %d, live %d, reserved %d", r.Moment, r.EventIndex, r.CachedBytes, r.LiveBytes, r.ReservedBytes)
	}
	if r.Suggestion != "GPUALLOC_POOL_TYPE=bfc" { // garbage_collection=true, the default
		t.Errorf("suggestion %q, want bfc with its defaults", r.Suggestion)
	}
	checkSuggestion(t, tr, &r)
}

func TestFits(t *testing.T) {
	tr := fragmented(t)
	r := explainOne(t, tr, Options{})
	if r.Verdict != Fits || r.Suggestion != "" || r.CapacitySource != CapacityDefault {
		t.Fatalf("verdict %s, suggestion %q, capacity from %s", r.Verdict, r.Suggestion, r.CapacitySource)
	}
	// The peak is the new segment of 12 MiB, at the last event.
	if r.Moment != MomentPeak || r.EventIndex != 50 || r.ReservedBytes != 212*mb || r.LiveBytes != 72*mb {
		t.Errorf("moment %s at %d: reserved %d, live %d", r.Moment, r.EventIndex, r.ReservedBytes, r.LiveBytes)
	}
	a := r.Alternatives[0]
	if a.Label != "as run" || *a.PeakReservedBytes != 212*mb || *r.HeadroomBytes != r.CapacityBytes-212*mb {
		t.Errorf("as recorded: %+v, headroom %d", a, *r.HeadroomBytes)
	}
	// Below 212 MiB the request of 12 MiB meets the same fragmentation.
	if *a.MinCapacityBytes != 212*mb {
		t.Errorf("smallest device %d, want 212 MiB", *a.MinCapacityBytes)
	}
	last := r.Alternatives[len(r.Alternatives)-1]
	if last.Spec != "offline" || r.OfflineBytes == nil || *r.OfflineBytes < 72*mb || *last.PeakReservedBytes != *r.OfflineBytes {
		t.Errorf("offline row %+v, offline bytes %v", last, r.OfflineBytes)
	}
}

func TestAt(t *testing.T) {
	tr := fragmented(t)
	r := explainOne(t, tr, Options{At: &At{Event: 29}})
	if r.Moment != MomentAt || r.EventIndex != 29 || r.LiveBytes != 180*mb || r.ReservedBytes != 200*mb || r.FragmentedBytes != 20*mb {
		t.Errorf("at 29: moment %s at %d: live %d, reserved %d, fragmented %d", r.Moment, r.EventIndex, r.LiveBytes, r.ReservedBytes, r.FragmentedBytes)
	}
	if _, err := Explain(context.Background(), tr, Options{At: &At{Event: 51}}); err == nil || !strings.Contains(err.Error(), "events 0 to 50") {
		t.Errorf("--at 51: %v", err)
	}
	if _, err := Explain(context.Background(), tr, Options{At: &At{TimeUS: 5, ByTime: true}}); err == nil || !strings.Contains(err.Error(), "no times") {
		t.Errorf("--at 5us on a trace without times: %v", err)
	}
}

// TestRandomMoments checks the sums at random moments of random traces of
// several devices, by every grouping.
func TestRandomMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 6 {
		var lines []string
		live := map[int]int{} // id -> device
		for i := range 300 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				for id, d := range live {
					lines = append(lines, fmt.Sprintf("free,%d,,%d", id, d))
					delete(live, id)
					break
				}
				continue
			}
			d := rng.IntN(2)
			live[i] = d
			lines = append(lines, fmt.Sprintf("alloc,%d,%d,%d", i, 1+rng.Int64N(8*mb), d))
		}
		tr := csvTrace(t, lines)
		by := []By{BySite, ByFrame, ByStream, BySize}[trial%4]
		at := &At{Event: rng.Int64N(int64(len(tr.Events)))}
		reps, err := Explain(context.Background(), tr, Options{At: at, By: by, Top: 3, Capacity: 64 * mb})
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) != 2 {
			t.Fatalf("%d reports, want one per device", len(reps))
		}
		for i := range reps {
			checkSums(t, tr, &reps[i])
		}
	}
}

// sharedSnapshot reads a real snapshot of the shared fixtures, with its
// stacks, or skips.
func sharedSnapshot(t testing.TB, name string) *Trace {
	t.Helper()
	path := pk.SharedSnapshot(t, "../../shared/traces/pytorch", name)
	// One read with the stacks, as simulate explain reads a snapshot.
	r, err := traces.Open(path, traces.Options{Stacks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	evs, err := traces.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	s := r.(interface{ Snapshot() *snapshot.Snapshot }).Snapshot()
	return &Trace{Name: name, Format: r.Format(), Events: evs, Start: traces.StartOf(r), Memory: r.(sim.CapacityReporter), Snapshot: s}
}

// TestSnapshotOutOfMemory replays a real forward pass on a device between
// its peak of live bytes and the reserved bytes it needs: the moment is the
// first OOM of the replay, which a replay up to it confirms.
func TestSnapshotOutOfMemory(t *testing.T) {
	tr := sharedSnapshot(t, "forward_ctx128.pickle")
	c := int64(18600) * mb // the live bytes peak at 18456 MiB
	r := explainOne(t, tr, Options{Capacity: c})
	if r.Moment != MomentOOM || r.Recorded || !r.Frames {
		t.Fatalf("moment %s (recorded %v, frames %v), want a replayed oom with frames", r.Moment, r.Recorded, r.Frames)
	}
	p, err := pytorchParams("")
	if err != nil {
		t.Fatal(err)
	}
	x := &explainer{t: tr, ev: tr.events(), caps: map[int]int64{0: c}}
	for n, want := range map[int]bool{int(r.EventIndex): false, int(r.EventIndex) + 1: true} {
		res, err := x.replay(context.Background(), p, n, x.capOf, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.OOMs > 0; got != want {
			t.Errorf("replay of %d events: OOM %v, want %v", n, got, want)
		}
	}
	if r.RequestBytes != tr.Events[r.EventIndex].Size || r.LargestFreeBytes >= r.RequestBytes {
		t.Errorf("request %d, largest free %d", r.RequestBytes, r.LargestFreeBytes)
	}
	if r.Verdict == LiveBound || r.Verdict == Fits {
		t.Errorf("verdict %s on a device above the peak of live bytes (%d) where the run fails", r.Verdict, r.PeakLiveBytes)
	}
	sites := 0
	for _, h := range r.Holders {
		if strings.Contains(h.Site, ".py:") {
			sites++
		}
	}
	if sites < 3 {
		t.Errorf("holders %+v: want call sites in Python files", r.Holders)
	}
}

// TestSnapshotSites checks the sums at random moments of real snapshots,
// with their stacks.
func TestSnapshotSites(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, name := range []string{"small_train_step.pickle", "compile_usermeta.pickle", "npu_two_devices.pickle"} {
		tr := sharedSnapshot(t, name)
		for range 2 {
			at := &At{Event: rng.Int64N(int64(len(tr.Events)))}
			reps, err := Explain(context.Background(), tr, Options{At: at, Top: 4})
			if err != nil {
				t.Fatal(err)
			}
			for i := range reps {
				if !reps[i].Frames {
					t.Errorf("%s: no frames", name)
				}
				checkSums(t, tr, &reps[i])
			}
		}
	}
}

func TestSite(t *testing.T) {
	for _, c := range []struct {
		files []string
		want  string
	}{
		{[]string{"CUDACachingAllocator.cpp", "/usr/lib/python3/site-packages/torch/nn/modules/module.py", "/home/u/train.py"}, "/home/u/train.py"},
		{[]string{"/usr/lib/python3.12/contextlib.py", "/x/venv/lib/python3.12/site-packages/einops/einops.py"}, "/x/venv/lib/python3.12/site-packages/einops/einops.py"},
		{[]string{"torch/_dynamo/eval_frame.py", "<frozen runpy>", "Python/ceval.c"}, ""},
	} {
		var frames []snapshot.Frame
		for i, f := range c.files {
			frames = append(frames, snapshot.Frame{Name: "f", Filename: f, Line: int64(i)})
		}
		f, ok := Site(frames)
		if f.Filename != c.want || ok != (c.want != "") {
			t.Errorf("Site(%v) = %q, %v; want %q", c.files, f.Filename, ok, c.want)
		}
	}
}

// TestSnapshotStartStacks checks that the blocks live from before the
// trace to its end take the stacks the snapshot's segments record: in a
// wrapped ring buffer of a backward pass, the gradients and the
// optimizer's state.
func TestSnapshotStartStacks(t *testing.T) {
	tr := sharedSnapshot(t, "large128_backward_wrapped.pickle")
	r := explainOne(t, tr, Options{Top: 20})
	if r.Moment != MomentPeak || int(r.EventIndex) >= tr.Start.Initial {
		t.Fatalf("moment %s at %d: want the peak among the %d blocks live before the trace", r.Moment, r.EventIndex, tr.Start.Initial)
	}
	var found []string
	for _, h := range r.Holders {
		if strings.Contains(h.Site, "AccumulateGrad") || strings.Contains(h.Site, "optimizer.py:") {
			found = append(found, h.Site)
		}
		if strings.HasPrefix(h.Site, "(allocated before the trace") && h.Count == 1317 {
			t.Errorf("no block live before the trace has a stack")
		}
	}
	if len(found) < 2 {
		t.Errorf("holders %+v: want the gradients and the optimizer's state", r.Holders)
	}
}

// oomSnapshot returns the snapshot that simulate --snapshot writes of the
// fragmented trace replayed on a device of 200 MiB, read back: it records
// the out-of-memory error of event 50 and a device of 200 MiB.
func oomSnapshot(t *testing.T) *Trace {
	t.Helper()
	tr := fragmented(t)
	p, err := pytorchParams("")
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	_, err = sim.Replay(traces.NewSliceReader(tr.Name, tr.Events), sim.Config{Params: p, Capacity: 200 * mb,
		Snapshot: func(s *snapshot.Snapshot) error { return snapshot.Write(&buf, s, snapshot.WriteOptions{}) }})
	if err != nil {
		t.Fatal(err)
	}
	r, err := traces.NewReader(strings.NewReader(buf.String()), "oom.pickle", traces.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := traces.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return &Trace{Name: "oom.pickle", Format: r.Format(), Events: evs, Start: traces.StartOf(r), Memory: r.(sim.CapacityReporter)}
}

// TestRecordedOOM explains a snapshot that records an out-of-memory error
// (a replay's, as simulate --snapshot writes it): the moment is the
// recorded error, on the device the snapshot records.
func TestRecordedOOM(t *testing.T) {
	snap := oomSnapshot(t)
	rep := explainOne(t, snap, Options{})
	if rep.Moment != MomentOOM || !rep.Recorded || rep.EventIndex != 50 || rep.RequestBytes != 12*mb {
		t.Errorf("moment %s at %d (recorded %v), request %d; want the recorded oom at 50 of 12 MiB", rep.Moment, rep.EventIndex, rep.Recorded, rep.RequestBytes)
	}
	if rep.CapacityBytes != 200*mb || rep.CapacitySource != CapacityRecorded || rep.Verdict != FragmentationBound || rep.LargestFreeBytes != 8*mb {
		t.Errorf("capacity %d from %s, verdict %s, largest free %d", rep.CapacityBytes, rep.CapacitySource, rep.Verdict, rep.LargestFreeBytes)
	}
	if rep.Alternatives[0].Label != "as recorded" {
		t.Errorf("first row %q", rep.Alternatives[0].Label)
	}
}

// TestPeakBySeries checks that the peak of a trace of one device, taken
// from the series of the replay, is the event that a bisection over
// prefixes finds: the first after which the device's peak is reached.
func TestPeakBySeries(t *testing.T) {
	for _, name := range []string{"forward_ctx128.pickle", "small_train_step.pickle", "compile_usermeta.pickle", "large128_backward_wrapped.pickle"} {
		tr := sharedSnapshot(t, name)
		r := explainOne(t, tr, Options{})
		if r.Moment != MomentPeak {
			t.Fatalf("%s: moment %s", name, r.Moment)
		}
		p, err := pytorchParams(tr.Start.Conf)
		if err != nil {
			t.Fatal(err)
		}
		x := &explainer{t: tr, ev: tr.events(), o: Options{Strategy: p}, caps: map[int]int64{0: r.CapacityBytes}}
		full, err := x.replay(context.Background(), p, len(tr.Events), x.capOf, nil)
		if err != nil {
			t.Fatal(err)
		}
		peak := deviceOf(&full, 0).PeakReservedBytes
		n, err := x.firstPrefix(context.Background(), 0, max(tr.Start.Initial, 1), len(tr.Events), func(d sim.DeviceResult) bool { return d.PeakReservedBytes >= peak })
		if err != nil {
			t.Fatal(err)
		}
		if int64(n-1) != r.EventIndex {
			t.Errorf("%s: peak at event %d, a bisection finds %d", name, r.EventIndex, n-1)
		}
	}
}

// TestTimeLimit checks that the rows the time limit leaves no time for say
// so, while the moment and its figures are still given.
func TestTimeLimit(t *testing.T) {
	tr := fragmented(t)
	r := explainOne(t, tr, Options{Capacity: 200 * mb, TimeLimit: 1})
	if r.Moment != MomentOOM || r.EventIndex != 50 || r.Verdict != FragmentationBound {
		t.Errorf("moment %s at %d, verdict %s", r.Moment, r.EventIndex, r.Verdict)
	}
	for i, a := range r.Alternatives {
		if !a.TimedOut || a.MinCapacityBytes != nil || (i > 0 && a.PeakReservedBytes != nil) {
			t.Errorf("row %s: %+v, want it out of time", a.Label, a)
		}
	}
	if r.Suggestion != "" || !strings.Contains(r.Sentence, "left out of time") {
		t.Errorf("suggestion %q from rows out of time (%s)", r.Suggestion, r.Sentence)
	}
}

// TestAnnotations checks which annotation an allocation takes: its
// entry's user_metadata, else the innermost range in force at its time.
func TestAnnotations(t *testing.T) {
	a := &Annotations{
		spans: map[int][]span{0: {{"step", 10, 100}, {"inner", 20, 30}, {"open", 200, math.MaxInt64}}},
		meta:  map[int]map[int]string{0: {7: "phase=warmup"}},
	}
	for _, c := range []struct {
		dev, entry int
		t          int64
		want       string
	}{
		{0, 1, 5, ""}, {0, 1, 10, "step"}, {0, 1, 25, "inner"}, {0, 1, 30, "step"}, {0, 1, 100, ""},
		{0, 1, 250, "open"}, {0, 7, 25, "metadata phase=warmup"}, {1, 1, 25, ""}, {0, -1, 25, ""},
	} {
		if got := a.at(c.dev, c.entry, c.t); got != c.want {
			t.Errorf("at(%d, %d, %d) = %q, want %q", c.dev, c.entry, c.t, got, c.want)
		}
	}
}

// TestSnapshotAnnotations groups a real snapshot's live bytes by the
// record_function ranges it records.
func TestSnapshotAnnotations(t *testing.T) {
	tr := sharedSnapshot(t, "large128_backward_wrapped.pickle")
	f, err := os.Open("../../shared/traces/pytorch/large128_backward_wrapped.pickle")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if tr.Annotations, err = ReadAnnotations(f); err != nil {
		t.Fatal(err)
	}
	r := explainOne(t, tr, Options{At: &At{Event: 2000}, By: ByAnnotation})
	if r.By != ByAnnotation {
		t.Fatalf("by %s", r.By)
	}
	found := false
	for _, h := range r.Holders {
		found = found || h.Site == "Optimizer.step#AdamW.step"
	}
	if !found {
		t.Errorf("holders %+v: want the optimizer's step", r.Holders)
	}
}

// TestStartTooLarge checks that a device too small for the recorded state
// a snapshot starts from is one clear error.
func TestStartTooLarge(t *testing.T) {
	tr := sharedSnapshot(t, "forward_ctx128.pickle")
	_, err := Explain(context.Background(), tr, Options{Capacity: 10 << 30})
	if err == nil || !strings.Contains(err.Error(), "holds 12.8 GiB in 227 segments, more than the device's 10.0 GiB") {
		t.Errorf("got %v", err)
	}
}

// TestDevicesApart explains two devices of one trace, each on a device of
// 100 MiB of its own: the first fits with its 90 MiB, the second runs out
// at its third block of 40 MiB (120 MiB live); their sum, 210 MiB, is
// compared with nothing.
func TestDevicesApart(t *testing.T) {
	var lines []string
	for i := range 3 {
		lines = append(lines, fmt.Sprintf("alloc,a%d,%d,0", i, 30*mb), fmt.Sprintf("alloc,b%d,%d,1", i, 40*mb))
	}
	tr := csvTrace(t, lines)
	reps, err := Explain(context.Background(), tr, Options{Capacity: 100 * mb})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 {
		t.Fatalf("%d reports", len(reps))
	}
	a, b := reps[0], reps[1]
	for i := range reps {
		checkSums(t, tr, &reps[i])
	}
	if a.Device != 0 || a.Verdict != Fits || a.Moment != MomentPeak || a.EventIndex != 4 || a.ReservedBytes != 90*mb {
		t.Errorf("device 0: %s at %d, %s, reserved %d", a.Moment, a.EventIndex, a.Verdict, a.ReservedBytes)
	}
	if b.Device != 1 || b.Verdict != LiveBound || b.Moment != MomentOOM || b.EventIndex != 5 || b.LiveBytes != 80*mb || b.RequestBytes != 40*mb {
		t.Errorf("device 1: %s at %d, %s, live %d, request %d", b.Moment, b.EventIndex, b.Verdict, b.LiveBytes, b.RequestBytes)
	}
}

// TestRecordedOOMOtherDevice explains a snapshot that records an
// out-of-memory error on a larger device than the recorded one: there the
// moment is the replay's, not the recording's.
func TestRecordedOOMOtherDevice(t *testing.T) {
	snap := oomSnapshot(t)
	rep := explainOne(t, snap, Options{Capacity: 400 * mb})
	if rep.Moment != MomentPeak || rep.Recorded || rep.Verdict != Fits {
		t.Errorf("moment %s (recorded %v), verdict %s; want the peak of a run that fits", rep.Moment, rep.Recorded, rep.Verdict)
	}
}

// TestTuneEachDevice explains two devices of a PyTorch run on devices of
// 200 MiB: the first fragments as [fragmented]'s trace does, the second
// holds 40 MiB. Each gets a row of tune's best of its own, whose figures
// are that device's in a replay of the row's spec, and the smallest
// device it needs, that device's too.
func TestTuneEachDevice(t *testing.T) {
	var lines []string
	for _, l := range fragmented(t).Events {
		switch l.Op {
		case traces.OpAlloc:
			lines = append(lines, fmt.Sprintf("alloc,%d,%d,0", l.ID, l.Size))
		case traces.OpFree:
			lines = append(lines, fmt.Sprintf("free,%d,,0", l.ID))
		}
	}
	for i := range 4 {
		lines = append(lines, fmt.Sprintf("alloc,%d,%d,1", 1000+i, 10*mb))
	}
	tr := csvTrace(t, lines)
	reps, err := Explain(context.Background(), tr, Options{Capacity: 200 * mb})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 {
		t.Fatalf("%d reports", len(reps))
	}
	for _, r := range reps {
		var tuned *Alternative
		for i := range r.Alternatives {
			if r.Alternatives[i].Label == "tune's best" {
				tuned = &r.Alternatives[i]
			}
		}
		if tuned == nil || tuned.TimedOut || tuned.PeakReservedBytes == nil || tuned.MinCapacityBytes == nil {
			t.Fatalf("device %d: tune's best %+v", r.Device, tuned)
		}
		sp, err := gpualloc.ParseSpec(tuned.Spec)
		if err != nil {
			t.Fatal(err)
		}
		p, err := gpualloc.Resolve(sp, nil)
		if err != nil {
			t.Fatal(err)
		}
		replay := func(c int64) sim.DeviceResult {
			caps := capFunc(func(d int) int64 {
				if d == r.Device {
					return c
				}
				return 200 * mb
			})
			res, err := sim.Replay(prefixReader{traces.NewSliceReader(tr.Name, tr.Events), nil, caps}, sim.Config{Params: p})
			if err != nil {
				t.Fatal(err)
			}
			return deviceOf(&res, r.Device)
		}
		d := replay(200 * mb)
		if !*tuned.Fits || d.OOMs != 0 || d.PeakReservedBytes != *tuned.PeakReservedBytes {
			t.Errorf("device %d: tune's best %s fits %v at peak %d; a replay: %d OOMs, peak %d",
				r.Device, tuned.Spec, *tuned.Fits, *tuned.PeakReservedBytes, d.OOMs, d.PeakReservedBytes)
		}
		if replay(*tuned.MinCapacityBytes).OOMs != 0 || replay(*tuned.MinCapacityBytes-mb).OOMs == 0 {
			t.Errorf("device %d: smallest device %d: want no OOM on it and one 1 MiB below", r.Device, *tuned.MinCapacityBytes)
		}
		// Device 1 holds 40 MiB: its row is never ranked by device 0's peak.
		if r.Device == 1 && *tuned.PeakReservedBytes > 40*mb {
			t.Errorf("device 1: tune's best peaks at %d, more than its 40 MiB", *tuned.PeakReservedBytes)
		}
	}
}

// tightTrace returns a trace whose allocations tile 1 GiB over time, as
// plan.Tight's buffers do (each byte of the tiling 1 MiB here): the
// offline optimum is 1 GiB, the peak of live bytes.
func tightTrace(t *testing.T, p plan.Problem) *Trace {
	type ev struct {
		at   int64
		free bool
		i    int
	}
	var evs []ev
	for i, b := range p.Buffers {
		evs = append(evs, ev{b.Lower, false, i}, ev{b.Upper, true, i})
	}
	// At one time the frees come first: a buffer that ends there and one
	// that starts there do not overlap.
	slices.SortFunc(evs, func(a, b ev) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if a.free != b.free {
			if a.free {
				return -1
			}
			return 1
		}
		return a.i - b.i
	})
	var lines []string
	for _, e := range evs {
		if e.free {
			lines = append(lines, fmt.Sprintf("free,%d,,0", e.i))
		} else {
			lines = append(lines, fmt.Sprintf("alloc,%d,%d,0", e.i, p.Buffers[e.i].Size*mb))
		}
	}
	return csvTrace(t, lines)
}

// TestOfflineSearch: the offline row is plan's exact search, not its
// heuristics alone: on tilings where the heuristics leave gaps, the row is
// the optimum, the peak of live bytes, and not marked out of time.
func TestOfflineSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tried := 0
	for i := 0; tried < 2 && i < 200; i++ {
		tr := tightTrace(t, plan.Tight(30, 1<<10, 1<<10, rng))
		probs, err := plan.FromTrace(traces.NewSliceReader(tr.Name, tr.Events))
		if err != nil {
			t.Fatal(err)
		}
		h, err := plan.Solve(context.Background(), probs[0].Problem, plan.Options{NoSearch: true})
		if err != nil {
			t.Fatal(err)
		}
		if h.Height == h.LowerBound {
			continue
		}
		tried++
		r := explainOne(t, tr, Options{Capacity: 2 << 30})
		last := r.Alternatives[len(r.Alternatives)-1]
		if r.PeakLiveBytes != 1<<30 || last.Spec != "offline" || last.TimedOut || last.PeakReservedBytes == nil ||
			*last.PeakReservedBytes != 1<<30 || *r.OfflineBytes != 1<<30 || r.OfflineProvenBytes == nil || *r.OfflineProvenBytes != 1<<30 {
			t.Errorf("case %d: peak live %d, offline row %+v (the heuristics: %d)", i, r.PeakLiveBytes, last, h.Height)
		}
	}
	if tried < 2 {
		t.Fatalf("%d tilings where the heuristics leave a gap", tried)
	}
}

// TestOfflineOutOfTime: with no time left the offline row says so, with
// no figure, as every other row does.
func TestOfflineOutOfTime(t *testing.T) {
	r := explainOne(t, fragmented(t), Options{Capacity: 200 * mb, TimeLimit: time.Nanosecond})
	last := r.Alternatives[len(r.Alternatives)-1]
	if last.Spec != "offline" || !last.TimedOut || last.PeakReservedBytes != nil || r.OfflineBytes != nil || r.OfflineProvenBytes != nil {
		t.Errorf("offline row %+v, offline bytes %v", last, r.OfflineBytes)
	}
}

// TestTimelineEachDevice: the figure of each device of two shows that
// device's own reserved bytes, not their sum: its highest point is the
// device's peak in the replay, and it rises where the device allocates.
func TestTimelineEachDevice(t *testing.T) {
	var lines []string
	for i := range 3 {
		lines = append(lines, fmt.Sprintf("alloc,a%d,%d,0", i, 30*mb), fmt.Sprintf("alloc,b%d,%d,1", i, 40*mb))
	}
	lines = append(lines, "free,a0,,0", "free,b0,,1")
	tr := csvTrace(t, lines)
	reps, err := Explain(context.Background(), tr, Options{Capacity: 1 << 30, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		tl := r.Timeline
		if tl == nil || len(tl.Reserved) != len(tl.Points) {
			t.Fatalf("device %d: timeline %+v", r.Device, tl)
		}
		var top int64
		for _, p := range tl.Reserved {
			top = max(top, p.Bytes)
		}
		want := map[int]int64{0: 90 * mb, 1: 120 * mb}[r.Device]
		if top != want || r.ReservedBytes != want {
			t.Errorf("device %d: the figure's reserved bytes peak at %d, the report's at %d, want %d", r.Device, top, r.ReservedBytes, want)
		}
		// Event 0 allocates on device 0 only.
		if first := tl.Reserved[0].Bytes; (r.Device == 0) != (first == 30*mb) || r.Device == 1 && first != 0 {
			t.Errorf("device %d: %d reserved after event 0", r.Device, first)
		}
	}
}

// TestRowsPasteForTheAllocator: the lines to paste of the rows of
// PyTorch's settings go to the variable of the allocator that wrote the
// snapshot, which those rows replay on: torch_npu's for a torch_npu file,
// even for PyTorch's defaults, whose settings are empty.
func TestRowsPasteForTheAllocator(t *testing.T) {
	for name, variable := range map[string]string{"npu_two_devices.pickle": "PYTORCH_NPU_ALLOC_CONF=", "forward_ctx128.pickle": "PYTORCH_CUDA_ALLOC_CONF="} {
		x, _, err := newExplainer(sharedSnapshot(t, name), Options{})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := x.rows()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rows {
			if strings.HasPrefix(r.Spec, "pytorch:") && r.Label != "as recorded" {
				n++
				if !strings.HasPrefix(r.Suggestion, variable) {
					t.Errorf("%s: %s: %q, want %s...", name, r.Label, r.Suggestion, variable)
				}
			}
		}
		if n < 1 {
			t.Errorf("%s: %d rows of PyTorch's settings besides the recorded ones, want some", name, n)
		}
	}
}

// TestAtPeakReservedPerDevice: AtPeak, as Explain, gives each device of a
// trace of several its own course of reserved bytes, never their sum.
func TestAtPeakReservedPerDevice(t *testing.T) {
	tr := sharedSnapshot(t, "npu_two_devices.pickle")
	reps, _, err := AtPeak(context.Background(), tr, Options{Timeline: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 {
		t.Fatalf("%d reports, want 2", len(reps))
	}
	for _, r := range reps {
		if r.Timeline == nil || len(r.Timeline.Reserved) == 0 {
			t.Fatalf("device %d: no course of its reserved bytes", r.Device)
		}
		var top int64
		for _, p := range r.Timeline.Reserved {
			top = max(top, p.Bytes)
		}
		if top != r.ReservedBytes {
			t.Errorf("device %d: reserved bytes peak at %d in its course, %d at its peak", r.Device, top, r.ReservedBytes)
		}
	}
}
