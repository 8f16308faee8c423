package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

// closeCounter counts Close calls.
type closeCounter struct{ n *atomic.Int64 }

func (c closeCounter) Close() error { c.n.Add(1); return nil }

func TestRunAll(t *testing.T) {
	var closed atomic.Int64
	var jobs []Job
	var want []int64
	for i := range 12 {
		tr := newTrace()
		for j := range uint64(i + 1) {
			tr.alloc(j, 1000)
		}
		want = append(want, int64(i+1)*1000)
		open, name := openExact, "exact"
		if i%2 == 1 {
			open, name = openCache, "cache"
		}
		jobs = append(jobs, Job{
			Open: func() (traces.Reader, io.Closer, error) {
				return tr.reader(), closeCounter{&closed}, nil
			},
			Config: Config{Trace: fmt.Sprintf("t%d", i), Open: open, Strategy: name},
		})
	}
	for _, workers := range []int{0, 1, 3, 100} {
		closed.Store(0)
		out := RunAll(context.Background(), jobs, workers)
		require.Len(t, out, len(jobs))
		for i, jr := range out {
			require.NoError(t, jr.Err)
			assert.Equal(t, fmt.Sprintf("t%d", i), jr.Result.Trace)
			assert.Equal(t, want[i], jr.Result.PeakRequestedBytes)
		}
		assert.Equal(t, int64(len(jobs)), closed.Load())
	}
	assert.Empty(t, RunAll(context.Background(), nil, 4))
}

// panicAlloc panics on its first allocation.
type panicAlloc struct{ nopAlloc }

func (*panicAlloc) Alloc(int64) (gpualloc.Block, error) { panic("index out of range") }

func TestRunAllErrors(t *testing.T) {
	ok := func() (traces.Reader, io.Closer, error) { return smallTrace().reader(), nil, nil }
	openErr := errors.New("open t1: no such file")
	jobs := []Job{
		{Open: ok, Config: Config{Trace: "t0", Open: openExact}},
		{Open: func() (traces.Reader, io.Closer, error) { return nil, nil, openErr }, Config: Config{Trace: "t1", Open: openExact}},
		{Open: ok, Config: Config{Trace: "t2", Strategy: "panicky", Open: func(gpualloc.Backend) (gpualloc.Allocator, error) { return &panicAlloc{}, nil }}},
		{Open: ok, Config: Config{Trace: "t3"}},
		{Config: Config{Trace: "t4", Open: openExact}},
		{Open: ok, Config: Config{Trace: "t5", Open: openCache}},
	}
	out := RunAll(context.Background(), jobs, 2)
	assert.NoError(t, out[0].Err)
	assert.Same(t, openErr, out[1].Err)
	assert.EqualError(t, out[2].Err, "t2: panicky: panic during replay: index out of range")
	assert.ErrorContains(t, out[3].Err, "no strategy")
	assert.ErrorContains(t, out[4].Err, "no Open function")
	assert.NoError(t, out[5].Err)
	assert.Equal(t, int64(13312), out[5].Result.PeakReservedBytes)
}

func TestRunAllCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok := func() (traces.Reader, io.Closer, error) { return smallTrace().reader(), nil, nil }
	out := RunAll(ctx, []Job{{Open: ok, Config: Config{Open: openExact}}}, 1)
	assert.ErrorIs(t, out[0].Err, context.Canceled)
}
