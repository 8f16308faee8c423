package sim

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

// TestReplayBatchAndPrefetchAgree replays the same events from a
// traces.SliceReader (read in place) and from a reader the replay reads
// ahead on a goroutine, across several batches: the results are the same.
func TestReplayBatchAndPrefetchAgree(t *testing.T) {
	tr := randomTrace(rand.New(rand.NewPCG(3, 4)), 5*prefetchSize+17, traceShape{maxSize: 1 << 20, maxLive: 50, devices: 2, streams: 2})
	cfg := Config{Open: openExact, Verify: true}
	batch, err := Replay(traces.NewSliceReader("t", tr.events), cfg)
	require.NoError(t, err)
	ahead, err := Replay(tr.reader(), cfg)
	require.NoError(t, err)
	for _, r := range []*Result{&batch, &ahead} {
		r.Trace, r.ElapsedNS, r.EventsPerSec = "", 0, 0
	}
	assert.Equal(t, batch, ahead)
	assert.Equal(t, int64(len(tr.events)), ahead.Events)
}

// panicReader panics after n events.
type panicReader struct {
	*sliceReader
	n int
}

func (r *panicReader) Scan() bool {
	if r.n == 0 {
		panic("reader bug")
	}
	r.n--
	return r.sliceReader.Scan()
}

// TestPrefetchStops checks that the goroutine reading ahead ends with the
// replay, whether the replay failed early or the reader panicked.
func TestPrefetchStops(t *testing.T) {
	before := runtime.NumGoroutine()
	long := smallTrace().reader()
	long.reps = 10_000
	open := func(b gpualloc.Backend) (gpualloc.Allocator, error) { return &buggyAlloc{exactAlloc{b: b}}, nil }
	_, err := Replay(long, Config{Open: open})
	require.Error(t, err, "the allocator fails at the fifth event")

	fresh := smallTrace().reader()
	fresh.reps = 10_000
	_, err = Replay(&panicReader{sliceReader: fresh, n: 3 * prefetchSize}, Config{Open: openNop, NewBackend: newNullBackend})
	assert.EqualError(t, err, "panic while reading the trace: reader bug")

	// The goroutines are gone (allowing the runtime a moment).
	for range 100 {
		if runtime.NumGoroutine() <= before {
			break
		}
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before)
}

// TestNativeReaderFills: the reader of the native format, whether it reads
// plain or gzip-compressed text, decodes straight into the prefetcher's
// batches.
func TestNativeReaderFills(t *testing.T) {
	r, err := traces.NewReader(strings.NewReader("op,id,size\nalloc,1,10\nfree,1,\n"), "t.csv", traces.Options{})
	require.NoError(t, err)
	_, ok := r.(filler)
	assert.True(t, ok, "%T is no filler", r)
	bd, ok := traces.LookupBundled("training")
	require.True(t, ok)
	gz, err := bd.Open()
	require.NoError(t, err)
	defer gz.Close()
	_, ok = gz.(filler)
	assert.True(t, ok, "%T is no filler", gz)
}
