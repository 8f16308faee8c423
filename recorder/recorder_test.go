package recorder_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/recorder"
	"github.com/gpualloc/gpualloc/sim"
	_ "github.com/gpualloc/gpualloc/strategy/all"
	"github.com/gpualloc/gpualloc/traces"
)

func params(t *testing.T, name string) *gpualloc.Params {
	t.Helper()
	p, err := gpualloc.Resolve(gpualloc.Spec{Name: name}, nil)
	require.NoError(t, err)
	return p
}

// figures is a Result without what may differ between two replays of the
// same events: names, timings, the series.
func figures(r sim.Result) sim.Result {
	r.Trace, r.ElapsedNS, r.EventsPerSec, r.Series = "", 0, 0, nil
	return r
}

// TestRecordThenReplay replays a bundled trace through a recording
// allocator, then replays the recorded trace: every strategy measures the
// same figures on both.
func TestRecordThenReplay(t *testing.T) {
	for _, name := range []string{"transformer-cpu", "training"} {
		bundle, ok := traces.LookupBundled(name)
		require.True(t, ok)
		r, err := bundle.Open()
		require.NoError(t, err)
		events, err := traces.ReadAll(r)
		require.NoError(t, err)

		var buf bytes.Buffer
		log := recorder.NewLog(traces.NewWriter(&buf, traces.ColOp, traces.ColID, traces.ColSize, traces.ColStream, traces.ColDevice, traces.ColTime, traces.ColCategory), recorder.Options{})
		var device int
		p := params(t, "bestfit") // stats, release, free space: all forwarded
		res, err := sim.Replay(traces.NewSliceReader(name, events), sim.Config{
			Params: p,
			NewBackend: func(i int) (gpualloc.Backend, error) {
				device = i
				return virtual.New(virtual.Options{Index: i})
			},
			Open: func(b gpualloc.Backend) (gpualloc.Allocator, error) {
				a, err := p.Open(b)
				if err != nil {
					return nil, err
				}
				return log.Wrap(a, device), nil
			},
			Verify: true,
		})
		require.NoError(t, err)
		require.Zero(t, res.OOMs)
		require.NotNil(t, res.LargestFreeBytes, "FreeSpace is forwarded")
		require.NoError(t, log.Close())

		recorded, err := traces.NewReader(bytes.NewReader(buf.Bytes()), "recorded", traces.Options{})
		require.NoError(t, err)
		again, err := traces.ReadAll(recorded)
		require.NoError(t, err)
		require.Len(t, again, len(events))

		for _, s := range gpualloc.Names() {
			p := params(t, s)
			want, err := sim.Replay(traces.NewSliceReader(name, events), sim.Config{Params: p, SeriesBuckets: -1})
			require.NoError(t, err)
			got, err := sim.Replay(traces.NewSliceReader(name, again), sim.Config{Params: p, SeriesBuckets: -1})
			require.NoError(t, err)
			assert.Equal(t, figures(want), figures(got), "%s: %s", name, s)
		}
	}
}

// tick is a clock that advances by step at each reading.
type tick struct {
	now  time.Time
	step time.Duration
}

func (c *tick) read() time.Time { c.now = c.now.Add(c.step); return c.now }

func TestEvents(t *testing.T) {
	var buf bytes.Buffer
	clock := &tick{now: time.Unix(1000, 0), step: 1500 * time.Microsecond}
	dev, err := virtual.New(virtual.Options{Capacity: 1 << 30})
	require.NoError(t, err)
	a, err := gpualloc.Open("bestfit", dev)
	require.NoError(t, err)
	rec := recorder.New(a, traces.NewWriter(&buf), recorder.Options{Clock: clock.read})

	b1, err := rec.Alloc(1000)
	require.NoError(t, err)
	b2, err := rec.AllocStream(5000, 7)
	require.NoError(t, err)
	require.NoError(t, rec.Free(b1))
	assert.ErrorIs(t, rec.Free(b1), gpualloc.ErrInvalidFree, "errors pass through, unrecorded")
	require.NoError(t, rec.Free(b2))
	assert.Equal(t, a.(gpualloc.Specer).Spec(), rec.Spec())
	assert.Equal(t, a, rec.Unwrap())
	require.NoError(t, rec.Close())

	assert.Equal(t, `# gpualloc trace v1
op,id,size,stream,device,time_us
alloc,1,1000,0,0,1500
alloc,2,5000,7,0,3000
free,1,,0,0,4500
free,2,,7,0,6000
`, buf.String())
}

// plain is an allocator with none of the optional interfaces.
type plain struct{ next uint64 }

func (p *plain) Alloc(size int64) (gpualloc.Block, error) {
	p.next += uint64(size)
	return gpualloc.Block{Addr: p.next, Size: size, Requested: size}, nil
}
func (p *plain) Free(gpualloc.Block) error { return nil }

func TestOptionalInterfaces(t *testing.T) {
	log := recorder.NewLog(traces.NewWriter(&bytes.Buffer{}), recorder.Options{})
	var a gpualloc.Allocator = log.Wrap(&plain{}, 0)
	_, ok := a.(gpualloc.StatsReporter)
	assert.False(t, ok)
	_, ok = a.(gpualloc.Releaser)
	assert.False(t, ok)
	_, ok = a.(gpualloc.FreeSpaceReporter)
	assert.False(t, ok)
	_, ok = a.(gpualloc.StreamAllocator)
	assert.True(t, ok, "always: the stream is recorded")

	for _, name := range gpualloc.Names() {
		dev, err := virtual.New(virtual.Options{Capacity: 1 << 30})
		require.NoError(t, err)
		inner, err := gpualloc.Open(name, dev)
		require.NoError(t, err)
		var a gpualloc.Allocator = log.Wrap(inner, 0)
		for _, c := range []struct {
			what       string
			inner, rec bool
		}{
			{"StatsReporter", is[gpualloc.StatsReporter](inner), is[gpualloc.StatsReporter](a)},
			{"Releaser", is[gpualloc.Releaser](inner), is[gpualloc.Releaser](a)},
			{"FreeSpaceReporter", is[gpualloc.FreeSpaceReporter](inner), is[gpualloc.FreeSpaceReporter](a)},
		} {
			assert.Equal(t, c.inner, c.rec, "%s: %s", name, c.what)
		}
	}
	require.NoError(t, log.Close())
}

func is[T any](a gpualloc.Allocator) bool { _, ok := a.(T); return ok }

func TestConcurrentUse(t *testing.T) {
	var buf bytes.Buffer
	dev, err := virtual.New(virtual.Options{Capacity: 1 << 30})
	require.NoError(t, err)
	a, err := gpualloc.Open("bestfit", dev)
	require.NoError(t, err)
	rec := recorder.New(a, traces.NewWriter(&buf), recorder.Options{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				b, err := rec.Alloc(int64(1 + g*1000 + i))
				if err != nil {
					t.Error(err)
					return
				}
				if err := rec.Free(b); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, rec.Close())
	r, err := traces.NewReader(&buf, "concurrent", traces.Options{})
	require.NoError(t, err)
	events, err := traces.ReadAll(r)
	require.NoError(t, err, "the trace reads back: every free follows its alloc")
	assert.Len(t, events, 8*200*2)
}

// failing is an output that fails every write.
type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteErrorKeepsAllocating(t *testing.T) {
	dev, err := virtual.New(virtual.Options{Capacity: 1 << 30})
	require.NoError(t, err)
	a, err := gpualloc.Open("naive", dev)
	require.NoError(t, err)
	rec := recorder.New(a, traces.NewWriter(failing{}), recorder.Options{})
	for range 5000 { // more than the Writer buffers
		b, err := rec.Alloc(1 << 20)
		require.NoError(t, err, "the allocation goes on")
		require.NoError(t, rec.Free(b))
	}
	assert.ErrorContains(t, rec.Close(), "disk full")
}

// TestRecordsCategories checks that AllocCategory reaches a wrapped
// CategoryAllocator and that the category is written, and that a wrapped
// allocator without categories is served by AllocStream.
func TestRecordsCategories(t *testing.T) {
	cols := []traces.Column{traces.ColOp, traces.ColID, traces.ColSize, traces.ColStream, traces.ColCategory}
	for _, name := range []string{"dualcursor", "bestfit"} {
		var buf bytes.Buffer
		dev, err := virtual.New(virtual.Options{Capacity: 1 << 30})
		require.NoError(t, err)
		a, err := gpualloc.Open(name, dev)
		require.NoError(t, err)
		rec := recorder.New(a, traces.NewWriter(&buf, cols...), recorder.Options{})
		w, err := rec.AllocCategory(1000, 3, gpualloc.CategoryParameter)
		require.NoError(t, err)
		x, err := rec.AllocStream(2000, 4)
		require.NoError(t, err)
		require.NoError(t, rec.Free(x))
		require.NoError(t, rec.Free(w))
		require.NoError(t, rec.Close())
		assert.Equal(t, "# gpualloc trace v1\nop,id,size,stream,category\n"+
			"alloc,1,1000,3,parameter\nalloc,2,2000,4,unknown\nfree,2,,4,\nfree,1,,3,\n", buf.String(), name)
	}
}
