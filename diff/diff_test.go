package diff

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/explain"
	_ "github.com/gpualloc/gpualloc/strategy/all"
)

const mib = 1 << 20

// twoRuns measures and compares two generated snapshots.
func twoRuns(t *testing.T, a, b []byte, o Options) (Pair, *Run, *Run) {
	t.Helper()
	ta, tb := loadTrace(t, "a.pickle", a, true), loadTrace(t, "b.pickle", b, true)
	pairs, ra, rb, err := Two(context.Background(), ta, tb, o)
	require.NoError(t, err)
	require.Len(t, pairs, 1)
	checkPair(t, &pairs[0])
	return pairs[0], ra, rb
}

// checkPair checks what every pair must hold: the parts of each peak add
// up to it, the parts of the difference add up to it, and the sites add
// up to the live bytes of each run and to their difference.
func checkPair(t *testing.T, p *Pair) {
	t.Helper()
	assert.Equal(t, p.APeakReservedBytes, p.ALiveBytes+p.ARoundingBytes+p.AFragmentedBytes+p.ACachedBytes, "A's parts")
	assert.Equal(t, p.BPeakReservedBytes, p.BLiveBytes+p.BRoundingBytes+p.BFragmentedBytes+p.BCachedBytes, "B's parts")
	assert.Equal(t, p.DeltaReservedBytes, p.BPeakReservedBytes-p.APeakReservedBytes)
	assert.Equal(t, p.DeltaReservedBytes, p.DeltaLiveBytes+p.DeltaAllocatorBytes)
	var a, b, d int64
	for _, s := range p.Sites {
		a += s.ABytes
		b += s.BBytes
		d += s.DeltaBytes
		assert.Equal(t, s.BBytes-s.ABytes, s.DeltaBytes, s.Site)
	}
	assert.Equal(t, p.ALiveBytes, a, "A's sites")
	assert.Equal(t, p.BLiveBytes, b, "B's sites")
	assert.Equal(t, p.DeltaLiveBytes, d, "the sites' differences")
}

// site returns the site diff of key in p.
func site(t *testing.T, p *Pair, key string) SiteDiff {
	t.Helper()
	for _, s := range p.Sites {
		if s.Site == key {
			return s
		}
	}
	t.Fatalf("no site %q in %+v", key, p.Sites)
	return SiteDiff{}
}

// program is a small training step: parameters, activations, a free;
// extra are allocated after the activations, at the peak.
func program(extra []genOp, attnSize int64, attnLine int) []genOp {
	ops := []genOp{
		{Site: "model.py:10 init", Size: 64 * mib},
		{Site: "model.py:10 init", Size: 64 * mib},
		{Site: "model.py:" + strconv.Itoa(attnLine) + " attention", Size: attnSize},
		{Site: "model.py:" + strconv.Itoa(attnLine) + " attention", Size: attnSize},
		{Site: "model.py:30 mlp", Size: 24 * mib},
	}
	// The extra allocations at the peak, before the first free.
	ops = append(ops, extra...)
	return append(ops, genOp{Free: 5}, genOp{Site: "model.py:30 mlp", Size: 12 * mib})
}

// TestOneMoreTensor adds one tensor at a site whose line moved: the live
// difference is that tensor's, all at its site, matched across the
// lines.
func TestOneMoreTensor(t *testing.T) {
	a := genSnapshot(0, program(nil, 32*mib, 20), "")
	b := genSnapshot(0, program([]genOp{{Site: "model.py:22 attention", Size: 6 * mib}}, 32*mib, 22), "")
	p, _, _ := twoRuns(t, a, b, Options{})
	assert.EqualValues(t, 6*mib, p.DeltaLiveBytes)
	assert.EqualValues(t, 6*mib, p.DeltaPeakLiveBytes)
	s := site(t, &p, "model.py:attention")
	assert.Equal(t, Grown, s.Change)
	assert.EqualValues(t, 6*mib, s.DeltaBytes)
	assert.EqualValues(t, 2, s.ACount)
	assert.EqualValues(t, 3, s.BCount)
	for _, o := range p.Sites {
		if o.Site != s.Site {
			assert.Equal(t, Same, o.Change, o.Site)
		}
	}
	// Same settings: the cross replays are the runs themselves.
	require.Len(t, p.Cross, 2)
	assert.Zero(t, p.Cross[0].DeltaBytes)
	assert.Zero(t, p.Cross[1].DeltaBytes)
	assert.Contains(t, Sentences(&p)[0], "same settings")
}

// TestShapeChange doubles the activations of a site: its bytes double,
// its count stays.
func TestShapeChange(t *testing.T) {
	a := genSnapshot(0, program(nil, 16*mib, 20), "")
	b := genSnapshot(0, program(nil, 32*mib, 20), "")
	p, _, _ := twoRuns(t, a, b, Options{})
	assert.EqualValues(t, 32*mib, p.DeltaLiveBytes)
	s := site(t, &p, "model.py:attention")
	assert.Equal(t, Grown, s.Change)
	assert.EqualValues(t, 32*mib, s.DeltaBytes)
	assert.Equal(t, s.ACount, s.BCount)
}

// TestNewAndGone moves allocations to a site of another function: one
// site is gone, one new.
func TestNewAndGone(t *testing.T) {
	a := genSnapshot(0, program([]genOp{{Site: "data.py:5 load", Size: 8 * mib}}, 16*mib, 20), "")
	b := genSnapshot(0, program([]genOp{{Site: "data.py:5 prefetch", Size: 8 * mib}}, 16*mib, 20), "")
	p, _, _ := twoRuns(t, a, b, Options{})
	assert.Zero(t, p.DeltaLiveBytes)
	assert.Equal(t, Gone, site(t, &p, "data.py:load").Change)
	assert.Equal(t, New, site(t, &p, "data.py:prefetch").Change)
}

// TestSettingOnly replays one program with two settings: the program
// holds the same, the whole difference is the allocator's, and the cross
// replay of A with B's settings is B.
func TestSettingOnly(t *testing.T) {
	ops := program(nil, 5*mib, 20) // sizes PyTorch serves from 20 MiB segments without expandable segments
	a := genSnapshot(0, ops, "")
	b := genSnapshot(0, ops, "expandable_segments:True")
	p, ra, rb := twoRuns(t, a, b, Options{})
	assert.NotEqual(t, ra.Strategy, rb.Strategy)
	assert.Zero(t, p.DeltaLiveBytes)
	assert.NotZero(t, p.DeltaReservedBytes)
	assert.Equal(t, p.DeltaReservedBytes, p.DeltaAllocatorBytes)
	for _, s := range p.Sites {
		assert.Equal(t, Same, s.Change, s.Site)
	}
	require.Len(t, p.Cross, 2)
	assert.Equal(t, "a", p.Cross[0].Side)
	assert.Equal(t, p.BPeakReservedBytes, p.Cross[0].PeakReservedBytes, "A with B's settings")
	assert.Equal(t, p.DeltaReservedBytes, p.Cross[0].DeltaBytes)
	assert.Equal(t, p.APeakReservedBytes, p.Cross[1].PeakReservedBytes, "B with A's settings")
	s := Sentences(&p)
	require.Len(t, s, 2)
	d := Signed(p.DeltaReservedBytes)
	assert.Equal(t, "With B's settings, A would reserve "+gpualloc.FormatSize(p.BPeakReservedBytes)+" ("+d+"): the allocator explains "+d+" of the "+d+".", s[0])

	// --with: both with one strategy, the program explains nothing.
	with, err := gpualloc.Resolve(gpualloc.Spec{Name: "pytorch", Params: []gpualloc.KeyValue{{Key: "conf", Value: "none"}}}, nil)
	require.NoError(t, err)
	p2, _, _ := twoRuns(t, a, b, Options{With: with, WithSpec: "pytorch"})
	require.Len(t, p2.Cross, 2)
	assert.Equal(t, p2.Cross[0].PeakReservedBytes, p2.Cross[1].PeakReservedBytes)
	assert.Equal(t, p.APeakReservedBytes, p2.Cross[0].PeakReservedBytes)
	assert.Contains(t, Sentences(&p2)[0], "the program explains 0 B")
}

// TestSelf checks that a run against itself is all zeros, and that
// swapping A and B negates every difference.
func TestSelfAndSwap(t *testing.T) {
	a := genSnapshot(0, program(nil, 16*mib, 20), "")
	b := genSnapshot(0, program([]genOp{{Site: "x.py:1 f", Size: 4 * mib}, {Free: 2}}, 40*mib, 21), "expandable_segments:True")
	ta, tb := loadTrace(t, "a.pickle", a, true), loadTrace(t, "b.pickle", b, true)
	ctx := context.Background()
	ra, err := Measure(ctx, ta, Options{})
	require.NoError(t, err)
	rb, err := Measure(ctx, tb, Options{})
	require.NoError(t, err)

	self, err := Compare(ra, ra)
	require.NoError(t, err)
	require.NoError(t, CrossReplays(ctx, ta, ta, ra, ra, Options{}, self))
	zeros(t, reflect.ValueOf(self[0]), "diff A A")

	ab, err := Compare(ra, rb)
	require.NoError(t, err)
	require.NoError(t, CrossReplays(ctx, ta, tb, ra, rb, Options{}, ab))
	ba, err := Compare(rb, ra)
	require.NoError(t, err)
	require.NoError(t, CrossReplays(ctx, tb, ta, rb, ra, Options{}, ba))
	checkPair(t, &ab[0])
	checkPair(t, &ba[0])
	negated(t, reflect.ValueOf(ab[0]), reflect.ValueOf(ba[0]), "swap")
	assert.NotZero(t, ab[0].DeltaReservedBytes)
	// The cross replays swap sides.
	assert.Equal(t, ab[0].Cross[0].PeakReservedBytes, ba[0].Cross[1].PeakReservedBytes)
	assert.Equal(t, ab[0].Cross[1].PeakReservedBytes, ba[0].Cross[0].PeakReservedBytes)
}

// zeros checks that every Delta field of v, a Pair or an element of its
// lists, is zero, and that every site is the same.
func zeros(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			zeros(t, v.Field(i), path+"."+f.Name)
			if strings.HasPrefix(f.Name, "Delta") && v.Field(i).Kind() == reflect.Int64 && v.Field(i).Int() != 0 {
				t.Errorf("%s.%s = %d, want 0", path, f.Name, v.Field(i).Int())
			}
			if f.Name == "Change" && v.Field(i).String() != Same {
				t.Errorf("%s: change %s", path, v.Field(i).String())
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			zeros(t, v.Index(i), path)
		}
	}
}

// negated checks that every Delta field of ab is the negation of ba's,
// sites matched by name.
func negated(t *testing.T, ab, ba reflect.Value, path string) {
	t.Helper()
	for i := range ab.NumField() {
		f := ab.Type().Field(i)
		if strings.HasPrefix(f.Name, "Delta") && ab.Field(i).Kind() == reflect.Int64 {
			assert.Equal(t, -ab.Field(i).Int(), ba.Field(i).Int(), path+"."+f.Name)
		}
	}
	ps, qs := ab.Interface().(Pair).Sites, ba.Interface().(Pair).Sites
	require.Equal(t, len(ps), len(qs))
	for _, p := range ps {
		found := false
		for _, q := range qs {
			if q.Site == p.Site {
				found = true
				assert.Equal(t, -p.DeltaBytes, q.DeltaBytes, p.Site)
				assert.Equal(t, p.ABytes, q.BBytes, p.Site)
				want := map[string]string{Grown: Shrunk, Shrunk: Grown, New: Gone, Gone: New, Same: Same}[p.Change]
				assert.Equal(t, want, q.Change, p.Site)
			}
		}
		assert.True(t, found, p.Site)
	}
}

func TestMatchKey(t *testing.T) {
	for in, want := range map[string]string{
		"/a/b/model.py:120 forward":              "/a/b/model.py:forward",
		"C:/a/model.py:7 f":                      "C:/a/model.py:f",
		"(allocated before the trace: no stack)": "(allocated before the trace: no stack)",
		"stream 7":                               "stream 7",
		"2 MiB":                                  "2 MiB",
		"Optimizer.step#AdamW.step":              "Optimizer.step#AdamW.step",
	} {
		assert.Equal(t, want, MatchKey(in), in)
	}
}

func TestDivergent(t *testing.T) {
	for _, c := range []struct {
		peaks []int64
		want  int
	}{
		{[]int64{100, 100}, -1},                  // two ranks: no majority to diverge from
		{[]int64{100, 100, 100, 100}, -1},        // all agree
		{[]int64{100, 100, 130, 100}, 2},         // one off
		{[]int64{100, 102, 104, 101}, -1},        // within 5%
		{[]int64{100, 150, 200, 120, 170}, -1},   // spread everywhere: no one rank
		{[]int64{1000, 1010, 990, 1005, 600}, 4}, // one below
	} {
		assert.Equal(t, c.want, Divergent(c.peaks), "%v", c.peaks)
	}
}

// TestRanks summarises generated ranks of which one holds more at a site.
func TestRanks(t *testing.T) {
	var runs []*Run
	for k := range 5 {
		var skew int64
		if k == 3 {
			skew = 256 * mib
		}
		tr := loadTrace(t, "rank"+strconv.Itoa(k)+".pickle", genSnapshot(k, rankOps(0, 600, skew), ""), false)
		r, err := Measure(context.Background(), tr, Options{})
		require.NoError(t, err)
		runs = append(runs, r)
	}
	sums, err := Summarise(runs)
	require.NoError(t, err)
	require.Len(t, sums, 1)
	s := sums[0]
	assert.Equal(t, "rank3.pickle", s.PeakRank)
	assert.Equal(t, "rank3.pickle", s.Divergent)
	assert.Equal(t, "model.py:mlp", s.DivergentSite)
	assert.Equal(t, runs[0].Devices[0].PeakReservedBytes, s.MedianPeakReservedBytes, "the other ranks run the same program")
	assert.Positive(t, s.PeakOverMedianBytes)
	for _, site := range s.Sites {
		assert.LessOrEqual(t, site.MinBytes, site.MedianBytes)
		assert.LessOrEqual(t, site.MedianBytes, site.MaxBytes)
		if site.Site == "model.py:mlp" && site.MaxBytes > site.MinBytes {
			assert.Equal(t, "rank3.pickle", site.MaxRank)
		}
	}
	assert.Equal(t, "model.py:mlp", s.Sites[0].Site, "the widest spread first")
}

// TestDevicesMismatch checks the error for traces of other devices.
func TestDevicesMismatch(t *testing.T) {
	a := &Run{Trace: "a", Devices: []Device{{Device: 0}, {Device: 1}}}
	b := &Run{Trace: "b", Devices: []Device{{Device: 0}}}
	_, err := Compare(a, b)
	require.Error(t, err)
	assert.Equal(t, "the devices do not match: a has devices 0, 1 and b device 0", err.Error())
	// One device each: matched whatever their indexes.
	c := &Run{Trace: "c", Devices: []Device{{Device: 3}}}
	p, err := Compare(b, c)
	require.NoError(t, err)
	assert.Equal(t, 0, p[0].Device)
	assert.Equal(t, 3, p[0].BDevice)
}

// TestSteps compares two runs step by step: B allocates 8 MiB more in
// its second step, and frees it within the step.
func TestSteps(t *testing.T) {
	steps := func(extra int64) []genOp {
		ops := []genOp{
			{Site: "model.py:10 init", Size: 64 * mib},
			{Site: "model.py:20 forward", Size: 16 * mib}, {Free: 2}, {Step: true},
			{Site: "model.py:20 forward", Size: 16 * mib},
		}
		if extra > 0 {
			ops = append(ops, genOp{Site: "model.py:25 forward", Size: extra}, genOp{Free: 4})
		}
		return append(ops, genOp{Free: 3}, genOp{Step: true}, genOp{Site: "model.py:20 forward", Size: 2 * mib})
	}
	a, b := genSnapshot(0, steps(0), ""), genSnapshot(0, steps(8*mib), "")
	p, ra, _ := twoRuns(t, a, b, Options{})
	require.Len(t, ra.Devices[0].Steps, 2, "two complete steps; the events after the last are in none")
	require.Len(t, p.Steps, 2)
	assert.Zero(t, p.Steps[0].DeltaLiveBytes)
	assert.EqualValues(t, 80*mib, p.Steps[0].APeakLiveBytes)
	assert.EqualValues(t, 8*mib, p.Steps[1].DeltaLiveBytes)
	require.NotNil(t, p.Steps[1].DeltaReservedBytes)
	assert.Positive(t, *p.Steps[1].DeltaReservedBytes)
	assert.Zero(t, *p.Steps[0].DeltaReservedBytes)
	// The curve places each event of a step within it, for the figures
	// aligned by step; the events after the last step in none.
	inSteps := 0
	for _, pt := range ra.Devices[0].Curve {
		if pt.Step >= 0 {
			inSteps++
			assert.Less(t, pt.Step, 2.0)
		}
		assert.GreaterOrEqual(t, pt.Reserved, pt.Live, "one device: the replay tells its reserved bytes")
	}
	assert.Positive(t, inSteps)
	assert.Less(t, inSteps, len(ra.Devices[0].Curve))

	// Without annotations, no steps.
	r, err := Measure(context.Background(), loadTrace(t, "a.pickle", a, false), Options{})
	require.NoError(t, err)
	assert.Empty(t, r.Devices[0].Steps)
}

// sharedDir holds the real snapshots, beside the repository.
const sharedDir = "../../shared/traces/pytorch"

// TestSharedAgree checks, on the real snapshots, that each run's figures
// are those of simulate (a replay with the recorded settings) and of
// explain at the same event.
func TestSharedAgree(t *testing.T) {
	for _, name := range []string{"small_train_step.pickle", "forward_bf16_ctx128.pickle", "compiled_ce_8gpu.pickle",
		"npu_two_devices.pickle", "compile_usermeta.pickle"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(sharedDir, name))
			if os.IsNotExist(err) {
				t.Skipf("%s: the shared snapshots are absent", name)
			}
			require.NoError(t, err)
			tr := loadTrace(t, name, data, false)
			ctx := context.Background()
			run, err := Measure(ctx, tr, Options{})
			require.NoError(t, err)
			p, err := explain.RecordedParams(tr)
			require.NoError(t, err)
			res, err := explain.Replay(ctx, tr, explain.Options{}, p, -1)
			require.NoError(t, err)
			require.Len(t, run.Devices, len(res.Devices))
			for i, d := range run.Devices {
				sd := res.Devices[i]
				assert.Equal(t, sd.Device, d.Device)
				assert.Equal(t, sd.PeakReservedBytes, d.PeakReservedBytes, "peak reserved")
				assert.Equal(t, sd.PeakRequestedBytes, d.PeakLiveBytes, "peak live")
				assert.Equal(t, sd.PeakAllocatedBytes, d.PeakAllocatedBytes, "peak allocated")
				assert.Equal(t, sd.DeviceMallocs, d.DeviceAllocs, "device allocations")
				assert.Equal(t, d.PeakReservedBytes, d.LiveBytes-d.UnservedBytes+d.RoundingBytes+d.FragmentedBytes+d.CachedBytes)
				if len(res.Devices) == 1 && (tr.Start == nil || tr.Start.Initial == 0) {
					// sim's own split at its peak, where no start event
					// puts it before the blocks live at the start are in
					// (explain's moment is after them).
					assert.Equal(t, sd.AtPeakLiveBytes, d.LiveBytes-d.UnservedBytes, "live at the peak")
					assert.Equal(t, sd.AtPeakRoundingBytes, d.RoundingBytes, "rounding at the peak")
					assert.Equal(t, sd.AtPeakFragmentedBytes, d.FragmentedBytes, "fragmented at the peak")
					assert.Equal(t, sd.AtPeakCachedBytes, d.CachedBytes, "cached at the peak")
				}
				// explain --at the peak's event.
				reps, err := explain.Explain(ctx, tr, explain.Options{At: &explain.At{Event: d.EventIndex}, Top: 1 << 30, TimeLimit: time.Millisecond})
				require.NoError(t, err)
				var rep *explain.Report
				for j := range reps {
					if reps[j].Device == d.Device {
						rep = &reps[j]
					}
				}
				require.NotNil(t, rep)
				assert.Equal(t, rep.ReservedBytes, d.PeakReservedBytes, "explain's reserved")
				assert.Equal(t, rep.LiveBytes, d.LiveBytes)
				assert.Equal(t, rep.RoundingBytes, d.RoundingBytes)
				assert.Equal(t, rep.FragmentedBytes, d.FragmentedBytes)
				assert.Equal(t, rep.CachedBytes, d.CachedBytes)
				assert.Equal(t, matchSites(rep.Holders, rep.OtherBytes, rep.OtherCount), d.Sites)
			}
		})
	}
}

// FuzzMatchKey checks that a frame's key is its file and function, the
// line left out, whatever the file's name holds, and that no text makes
// MatchKey fail.
func FuzzMatchKey(f *testing.F) {
	f.Add("/a/b/model.py", 120, "forward")
	f.Add("C:/x:3 y/model.py", 7, "f")
	f.Add("(weird", 1, "g")
	f.Add("", 0, "")
	f.Fuzz(func(t *testing.T, file string, line int, fn string) {
		s := file + ":" + strconv.Itoa(line) + " " + fn
		k := MatchKey(s)
		MatchKey(file)
		if line < 0 || strings.ContainsAny(fn, " \n") || strings.HasPrefix(file, "(") || strings.ContainsRune(file, '\n') {
			return
		}
		if want := file + ":" + fn; k != want {
			t.Errorf("MatchKey(%q) = %q, want %q", s, k, want)
		}
	})
}
