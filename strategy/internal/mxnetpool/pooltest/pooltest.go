// Package pooltest holds the test helpers that the tests of mxnetpool and of
// the strategies built on it share.
package pooltest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/alloctest"
)

// A Pool is an MXNet pool as the helpers use it.
type Pool interface {
	gpualloc.Allocator
	gpualloc.StatsReporter
	gpualloc.Releaser
}

// Alloc allocates size bytes from p, failing t on an error.
func Alloc(t testing.TB, p gpualloc.Allocator, size int64) gpualloc.Block {
	t.Helper()
	b, err := p.Alloc(size)
	require.NoError(t, err, "Alloc(%d)", size)
	return b
}

// Free frees b, failing t on an error.
func Free(t testing.TB, p gpualloc.Allocator, b gpualloc.Block) {
	t.Helper()
	require.NoError(t, p.Free(b), "Free(%+v)", b)
}

// Retry checks release-and-retry on p, a new pool that takes its memory
// from dev. With a block of cached bytes in the cache, a device
// that refuses once is retried after the cache is released, and a request
// of size bytes succeeds; one that refuses twice fails the request with
// [gpualloc.ErrOutOfMemory], and the pool stays usable. Retry returns that
// error for the caller to check its text. cached and size must round to
// different sizes.
func Retry(t *testing.T, p Pool, dev *virtual.Device, cached, size int64) error {
	t.Helper()
	Free(t, p, Alloc(t, p, cached))

	// The device refuses once although MemInfo shows room.
	dev.FailMallocs(1)
	b := Alloc(t, p, size)
	st := p.Stats()
	assert.Equal(t, int64(1), st.Retries)
	assert.Equal(t, int64(1), st.DeviceFrees, "the cache was released before the retry")
	assert.Zero(t, st.OOMs)
	assert.Equal(t, b.Size, dev.Stats().Used)

	// Twice: the request fails, and the pool stays usable.
	dev.FailMallocs(2)
	_, err := p.Alloc(size)
	require.ErrorIs(t, err, gpualloc.ErrOutOfMemory)
	st = p.Stats()
	assert.Equal(t, int64(2), st.Retries)
	assert.Equal(t, int64(1), st.OOMs)
	assert.Equal(t, int64(1), st.Allocs-st.Frees)

	c := Alloc(t, p, size)
	Free(t, p, b)
	Free(t, p, c)
	assert.Equal(t, int64(3), p.Stats().Allocs)
	return err
}

// SharedPool checks that a pool of strategy s, of its default
// configuration on a device of 1 GiB, reaches the shared pool with its name
// and its rounding: [Retry] with 100000 bytes cached and requests of 5000
// bytes, which round to 8192; then, after a ReleaseAll, that a block of a
// bytes, once freed, serves a request of b bytes, which rounds to the same
// size (msg says why).
func SharedPool[C comparable, P interface {
	alloctest.Pool[C]
	Pool
}](t *testing.T, s alloctest.Strategy[C, P], a, b int64, msg string) {
	t.Helper()
	p, dev := alloctest.New(t, 1<<30, s.New, s.Default)
	err := Retry(t, p, dev, 100000, 5000)
	assert.EqualError(t, err, s.Name+": alloc of 5000 bytes (8192 rounded): virtual: device 0: malloc of 8192 bytes: injected failure: out of memory")

	require.NoError(t, p.ReleaseAll())
	blk := Alloc(t, p, a)
	Free(t, p, blk)
	assert.Equal(t, blk.Addr, Alloc(t, p, b).Addr, msg)
}

// Params checks the registry parameters every MXNet pool has, of the
// strategy s: "page" first, read from MXNet 1's and MXNet 2's variables,
// and "reserve" last.
func Params(t *testing.T, s gpualloc.Strategy) {
	t.Helper()
	require.NotEmpty(t, s.Params)
	assert.Equal(t, []string{"MXNET_GPU_MEM_POOL_PAGE_SIZE", "MXNET_GPU_POOL_PAGE_SIZE"}, s.Params[0].Env)
	assert.Equal(t, []string{"MXNET_GPU_MEM_POOL_RESERVE"}, s.Params[len(s.Params)-1].Env)
}

// AllocFree is the body of the MXNet pools' BenchmarkAllocFree: the
// cache-hit path, an Alloc served from a free list and the Free that puts
// the block back, for the four sizes of [alloctest.HitSizes] in turn.
func AllocFree(b *testing.B, p gpualloc.Allocator) {
	alloctest.Warm(b, p, alloctest.HitSizes[:])
	alloctest.AllocFree(b, p, alloctest.HitSizes)
}
