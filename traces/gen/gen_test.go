package gen_test

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
	"github.com/gpualloc/gpualloc/traces/gen"
)

func generate(t testing.TB, workload string, o gen.Options) []byte {
	t.Helper()
	var b bytes.Buffer
	w := traces.NewWriter(&b, gen.ColumnsOf(workload)...)
	require.NoError(t, gen.Generate(w, workload, o))
	require.NoError(t, w.Close())
	return b.Bytes()
}

// stats are what the tests check of a generated trace.
type stats struct {
	events, allocs int64
	peak           int64 // peak live bytes
	sizes          map[int64]int
	maxSize        int64
	slots          int
	endTime        int64
}

func read(t testing.TB, data []byte) stats {
	t.Helper()
	r, err := traces.NewReader(bytes.NewReader(data), "gen", traces.Options{})
	require.NoError(t, err)
	s := stats{sizes: map[int64]int{}}
	var live, liveCount int64
	for r.Scan() {
		ev := r.Event()
		s.events++
		s.slots = max(s.slots, int(ev.Slot)+1)
		if ev.Op == traces.OpAlloc {
			s.allocs++
			liveCount++
			live += ev.Size
			s.sizes[ev.Size]++
			s.maxSize = max(s.maxSize, ev.Size)
			s.peak = max(s.peak, live)
		} else {
			liveCount--
			live -= ev.Size
		}
		s.endTime = ev.TimeUS
	}
	require.NoError(t, r.Err())
	require.True(t, r.HasTime())
	require.Zero(t, liveCount, "everything is freed at the end")
	return s
}

func TestWorkloads(t *testing.T) {
	wls := gen.Workloads()
	var names []string
	def := reflect.ValueOf(gen.DefaultOptions())
	for _, wl := range wls {
		names = append(names, wl.Name)
		assert.NotEmpty(t, wl.Summary)
		assert.NotEmpty(t, wl.Doc)
		assert.NotEmpty(t, wl.Params)
		for _, p := range wl.Params {
			f := def.FieldByName(p.Field)
			require.True(t, f.IsValid(), "%s: no field %s", wl.Name, p.Field)
			assert.NotEmpty(t, p.Doc)
			var v string
			switch f.Kind() {
			case reflect.String:
				v = f.String()
			case reflect.Uint64:
				v = strconv.FormatUint(f.Uint(), 10)
			default:
				v = strconv.FormatInt(f.Int(), 10)
			}
			if p.Field == "MaxSize" {
				n, err := gpualloc.ParseSize(p.Default)
				require.NoError(t, err)
				assert.Equal(t, v, strconv.FormatInt(n, 10))
			} else {
				assert.Equal(t, v, p.Default, "%s --%s", wl.Name, p.Flag)
			}
			assert.Equal(t, p.Flag, strings.ToLower(p.Flag))
		}
	}
	assert.True(t, slices.IsSorted(names))
	assert.Equal(t, []string{"dynamic", "random", "training"}, names)

	// Every field of Options is some workload's parameter.
	ot := reflect.TypeFor[gen.Options]()
	for i := range ot.NumField() {
		found := false
		for _, wl := range wls {
			for _, p := range wl.Params {
				found = found || p.Field == ot.Field(i).Name
			}
		}
		assert.True(t, found, "field %s has a flag", ot.Field(i).Name)
	}
}

func TestGenerateErrors(t *testing.T) {
	w := traces.NewWriter(io.Discard, gen.Columns()...)
	for _, tc := range []struct {
		workload string
		opts     gen.Options
		err      string
	}{
		{"nonesuch", gen.Options{}, `gen: unknown workload "nonesuch" (known: dynamic, random, training)`},
		{"training", gen.Options{Model: "huge"}, `gen: unknown model "huge" (known: tiny, small, medium, large)`},
		{"training", gen.Options{Steps: -1}, `gen: bad steps -1: must be > 0`},
		{"training", gen.Options{Batch: -1}, `gen: bad batch -1: must be > 0`},
		{"dynamic", gen.Options{MinSeq: 100, MaxSeq: 50}, `gen: bad max-seq 50: must be >= min-seq 100`},
		{"random", gen.Options{Events: -5}, `gen: bad events -5: must be > 0`},
		{"random", gen.Options{MaxSize: -5}, `gen: bad max-size -5: must be > 0`},
		{"training", gen.Options{Model: "large", Batch: 1e6, Seq: 1e6}, `gen: batch 1000000 and seq 1000000 with model large: the attention scores of a layer (batch x heads x seq x seq x 4 bytes) would be 8e+19 bytes, more than the 2^58 bytes a generated tensor may have; lower them`},
		{"training", gen.Options{Batch: 1e9, Seq: 1e5}, `gen: batch 1000000000 and seq 100000 with model small: the logits of a step (batch x seq x vocabulary x 4 bytes) would be 2.01e+19 bytes, more than the 2^58 bytes a generated tensor may have; lower them`},
		{"training", gen.Options{Model: "tiny", Batch: 1, Seq: math.MaxInt}, `gen: batch 1 and seq 9223372036854775807 with model tiny: the logits of a step (batch x seq x vocabulary x 4 bytes) would be 3.69e+22 bytes, more than the 2^58 bytes a generated tensor may have; lower them`},
		{"training", gen.Options{Model: "large", Batch: 2e7, Seq: 1024}, `gen: batch 20000000 and seq 1024 with model large: a layer's arithmetic would be 1.32e+18 multiply-adds, past 2^60; lower them`},
		{"dynamic", gen.Options{MaxSeq: 1e11}, `gen: batch 4 and max-seq 100000000000 with model small: the attention scores of a layer (batch x heads x seq x seq x 4 bytes) would be 1.92e+24 bytes, more than the 2^58 bytes a generated tensor may have; lower them`},
		{"training", gen.Options{Steps: math.MaxInt}, `gen: steps 9223372036854775807 with batch 4 and seq 256 with model small: the trace's clock would pass 2^62 µs; lower them`},
		{"random", gen.Options{Events: math.MaxInt64}, `gen: events 9223372036854775807: the trace's clock, 1 to 4 µs an event, would pass 2^62 µs; at most 1152921504606846976`},
	} {
		assert.EqualError(t, gen.Generate(w, tc.workload, tc.opts), tc.err)
	}
}

// TestGenerateNearLimits: options just inside the limits give a trace
// that reads back: every size positive, the clock never going back, as a
// trace's reader checks.
func TestGenerateNearLimits(t *testing.T) {
	for _, tc := range []struct {
		workload string
		opts     gen.Options
	}{
		{"training", gen.Options{Model: "tiny", Steps: 1, Batch: 1 << 20, Seq: 1 << 12}},
		{"training", gen.Options{Model: "large", Steps: 2, Batch: 1 << 14, Seq: 1 << 14}},
		{"dynamic", gen.Options{Model: "tiny", Steps: 3, Batch: 1 << 10, MinSeq: 1, MaxSeq: 1 << 20}},
		{"random", gen.Options{Events: 100, MaxLive: math.MaxInt, MaxSize: math.MaxInt64}},
	} {
		var buf bytes.Buffer
		w := traces.NewWriter(&buf, gen.ColumnsOf(tc.workload)...)
		require.NoError(t, gen.Generate(w, tc.workload, tc.opts), "%+v", tc.opts)
		require.NoError(t, w.Flush())
		r, err := traces.NewReader(&buf, tc.workload, traces.Options{})
		require.NoError(t, err)
		events, err := traces.ReadAll(r)
		require.NoError(t, err, "%s %+v", tc.workload, tc.opts)
		require.NotEmpty(t, events)
		for _, ev := range events {
			require.Positive(t, ev.Size, "%s %+v", tc.workload, tc.opts)
		}
	}
}

func TestDeterministic(t *testing.T) {
	for _, tc := range []struct {
		workload string
		opts     gen.Options
	}{
		{"training", gen.Options{Model: "tiny", Steps: 3}},
		{"dynamic", gen.Options{Model: "tiny", Steps: 3}},
		{"random", gen.Options{Events: 10000}},
	} {
		a := generate(t, tc.workload, tc.opts)
		assert.Equal(t, a, generate(t, tc.workload, tc.opts), tc.workload)
		tc.opts.Seed = 7
		assert.NotEqual(t, a, generate(t, tc.workload, tc.opts), "%s: the seed matters", tc.workload)
	}
}

func TestComment(t *testing.T) {
	data := generate(t, "training", gen.Options{Model: "tiny", Steps: 2, Seed: 3})
	first, _, _ := strings.Cut(string(data), "\nop,")
	assert.Equal(t, "# gpualloc trace v1\n# generated by: simulate gen --steps 2 --seed 3 --model tiny --batch 4 --seq 256 training", first)
}

func TestTraining(t *testing.T) {
	const steps = 5
	s := read(t, generate(t, "training", gen.Options{Steps: steps}))
	// The default model and batch peak at a few GiB.
	assert.Greater(t, s.peak, int64(2<<30))
	assert.Less(t, s.peak, int64(4<<30))
	// Sizes are shapes times element sizes, not powers of two: the largest
	// is the logits, batch x seq x vocab x 4 bytes.
	assert.Equal(t, int64(4*256*50257*4), s.maxSize)
	pow2 := 0
	for size := range s.sizes {
		if size&(size-1) == 0 {
			pow2++
		}
	}
	assert.Less(t, pow2, len(s.sizes)/2)
	// The steps repeat: the same sizes, as many times each step, apart from
	// weights and optimizer state, made once.
	one := read(t, generate(t, "training", gen.Options{Steps: 1}))
	perStep := (s.allocs - one.allocs) / (steps - 1)
	assert.Equal(t, one.allocs-perStep, int64(3*(2+12*12+2)), "weights and two Adam moments for each of the 148 parameters")
	two := read(t, generate(t, "training", gen.Options{Steps: 2}))
	assert.Equal(t, two.slots, s.slots, "no step needs more live allocations than the second")
	assert.Greater(t, s.endTime, int64(steps*10_000), "a step takes milliseconds")
}

// Pool rules of MXNet, to check that the dynamic workload shows what it is
// for (package strategy has the real ones).
func naiveSize(s int64) int64 {
	s = (s + 4095) / 4096 * 4096
	if s > 2<<20 {
		s = (s + 2<<20 - 1) / (2 << 20) * (2 << 20)
	}
	return s
}

func roundSize(s int64) int64 {
	if s > 1<<24 {
		return (s + 1<<24 - 1) >> 24 << 24
	}
	b := int64(4096)
	for b < s {
		b <<= 1
	}
	return b
}

// deviceBytes replays a trace on a cache of blocks keyed by rounded size,
// never released, and returns the bytes taken from the device after each
// quarter of the trace.
func deviceBytes(t *testing.T, data []byte, round func(int64) int64) [4]int64 {
	t.Helper()
	st := read(t, data)
	r, err := traces.NewReader(bytes.NewReader(data), "gen", traces.Options{})
	require.NoError(t, err)
	cache := map[int64]int{}
	var dev int64
	var out [4]int64
	var n int64
	for r.Scan() {
		ev := r.Event()
		s := round(ev.Size)
		if ev.Op == traces.OpAlloc {
			if cache[s] > 0 {
				cache[s]--
			} else {
				dev += s
			}
		} else {
			cache[s]++
		}
		n++
		out[min(3, 4*n/st.events)] = dev
	}
	require.NoError(t, r.Err())
	return out
}

func TestDynamic(t *testing.T) {
	const steps = 100
	dyn := generate(t, "dynamic", gen.Options{Steps: steps})
	fixed := generate(t, "training", gen.Options{Steps: steps})
	d, f := read(t, dyn), read(t, fixed)
	assert.Equal(t, f.events, d.events, "the same model and steps")
	assert.Greater(t, len(d.sizes), 10*len(f.sizes), "distinct sizes")

	naive, round := deviceBytes(t, dyn, naiveSize), deviceBytes(t, dyn, roundSize)
	t.Logf("device bytes by quarter: naive %v, round %v", naive, round)
	assert.Greater(t, naive[3], 2*round[3], "exact-size buckets take far more from the device")
	assert.Greater(t, naive[3]-naive[1], 4*(round[3]-round[1]), "and keep taking more, while power-of-two buckets settle")

	// With a fixed shape, both settle after the first step.
	naive, round = deviceBytes(t, fixed, naiveSize), deviceBytes(t, fixed, roundSize)
	assert.Equal(t, naive[0], naive[3])
	assert.Equal(t, round[0], round[3])
}

func TestRandom(t *testing.T) {
	for _, o := range []gen.Options{
		{Events: 100000},
		{Events: 10001, MaxLive: 10, MaxSize: 4096, Seed: 2},
		{Events: 1, MaxLive: 1},
		{Events: 2, MaxLive: 1},
	} {
		s := read(t, generate(t, "random", o))
		assert.Equal(t, o.Events/2*2, s.events, "%+v", o)
		maxLive, maxSize := o.MaxLive, o.MaxSize
		if maxLive == 0 {
			maxLive = gen.DefaultOptions().MaxLive
		}
		if maxSize == 0 {
			maxSize = gen.DefaultOptions().MaxSize
		}
		assert.LessOrEqual(t, s.slots, maxLive)
		assert.LessOrEqual(t, s.maxSize, maxSize)
		if o.Events > 1000 {
			assert.Greater(t, s.slots, maxLive/2)
			assert.Greater(t, len(s.sizes), 100)
		}
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.csv.gz")
	o := gen.Options{Model: "tiny", Steps: 2}
	require.NoError(t, gen.WriteFile(path, "dynamic", o))
	r, err := traces.Open(path, traces.Options{})
	require.NoError(t, err)
	defer r.Close()
	var b bytes.Buffer
	w := traces.NewWriter(&b, r.Columns()...)
	for r.Scan() {
		require.NoError(t, w.Write(r.Event()))
	}
	require.NoError(t, r.Err())
	require.NoError(t, w.Close())
	want := generate(t, "dynamic", o)
	_, wantEvents, _ := bytes.Cut(want, []byte("\nop,"))
	_, gotEvents, _ := bytes.Cut(b.Bytes(), []byte("\nop,"))
	assert.Equal(t, wantEvents, gotEvents)

	assert.Error(t, gen.WriteFile(filepath.Join(t.TempDir(), "no", "dir.csv"), "dynamic", o))
	assert.Error(t, gen.WriteFile(filepath.Join(t.TempDir(), "x.csv"), "nonesuch", o))
	_, err = os.Stat(path)
	assert.NoError(t, err)
}

func Example() {
	w := traces.NewWriter(os.Stdout, gen.Columns()...)
	if err := gen.Generate(w, "random", gen.Options{Events: 8, MaxLive: 4, MaxSize: 1 << 20}); err != nil {
		panic(err)
	}
	w.Close()
	// Output:
	// # gpualloc trace v1
	// # generated by: simulate gen --events 8 --seed 0 --max-live 4 --max-size 1048576 random
	// op,id,size,time_us
	// alloc,1,19,0
	// free,1,,3
	// alloc,2,33,5
	// alloc,3,988,7
	// free,3,,9
	// alloc,4,147132,11
	// free,4,,12
	// free,2,,15
}

// BenchmarkGenerate measures writing the random workload and the training
// one to a Writer that discards them.
func BenchmarkGenerate(b *testing.B) {
	for _, tc := range []struct {
		workload string
		opts     gen.Options
	}{
		{"random", gen.Options{Events: 1_000_000}},
		{"training", gen.Options{Steps: 20}},
	} {
		b.Run(tc.workload, func(b *testing.B) {
			events := int64(len(bytes.Split(generate(b, tc.workload, tc.opts), []byte("\n")))) // about
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				w := traces.NewWriter(io.Discard, gen.Columns()...)
				if err := gen.Generate(w, tc.workload, tc.opts); err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
			b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func TestColumnsOf(t *testing.T) {
	plain := []traces.Column{traces.ColOp, traces.ColID, traces.ColSize, traces.ColTime}
	assert.Equal(t, plain, gen.Columns())
	assert.Equal(t, plain, gen.ColumnsOf("random"))
	assert.Equal(t, append(plain, traces.ColCategory), gen.ColumnsOf("training"))
	assert.Equal(t, append(plain, traces.ColCategory), gen.ColumnsOf("dynamic"))
	for _, wl := range gen.Workloads() {
		assert.Equal(t, wl.Name != "random", wl.Categories, wl.Name)
	}
}

// TestCategories checks the categories of the training workloads: every
// allocation has one; the weights are parameters and Adam's two moments per
// weight optimizer state, all live until the teardown; the batch is input;
// temporaries are freed before the next allocation of another category
// would outlive them; the random workload has none.
func TestCategories(t *testing.T) {
	for _, name := range []string{"training", "dynamic"} {
		o := gen.Options{Model: "tiny", Steps: 3}
		r, err := traces.NewReader(bytes.NewReader(generate(t, name, o)), name, traces.Options{})
		require.NoError(t, err)
		bytesOf := map[gpualloc.Category]int64{}
		live := map[gpualloc.Category]int64{}
		var lastOther int // index of the last alloc that is not a parameter or optimizer state
		firstLongFree := -1
		var i int
		for ; r.Scan(); i++ {
			ev := r.Event()
			require.NotEqual(t, gpualloc.CategoryUnknown, ev.Category, "event %d", i)
			long := ev.Category == gpualloc.CategoryParameter || ev.Category == gpualloc.CategoryOptimizerState
			if ev.Op == traces.OpAlloc {
				bytesOf[ev.Category] += ev.Size
				live[ev.Category] += ev.Size
				if !long {
					lastOther = i
				}
			} else {
				live[ev.Category] -= ev.Size
				if long && firstLongFree < 0 {
					firstLongFree = i
				}
			}
		}
		require.NoError(t, r.Err())
		assert.Greater(t, firstLongFree, lastOther, "%s: weights and optimizer state live until the teardown", name)
		assert.Equal(t, 2*bytesOf[gpualloc.CategoryParameter], bytesOf[gpualloc.CategoryOptimizerState], name)
		for _, c := range []gpualloc.Category{gpualloc.CategoryInput, gpualloc.CategoryActivation, gpualloc.CategoryTemporary,
			gpualloc.CategoryGradient, gpualloc.CategoryAutogradDetail} {
			assert.Positive(t, bytesOf[c], "%s: %s", name, c)
		}
		for c, n := range live {
			assert.Zero(t, n, "%s: %s", name, c)
		}
	}
	r, err := traces.NewReader(bytes.NewReader(generate(t, "random", gen.Options{Events: 1000})), "random", traces.Options{})
	require.NoError(t, err)
	for r.Scan() {
		require.Equal(t, gpualloc.CategoryUnknown, r.Event().Category)
	}
	require.NoError(t, r.Err())
}
