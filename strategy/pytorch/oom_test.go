package pytorch_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// TestVersionOOMExpandable: out of memory with expandable segments and a
// max split size, PyTorch 2.4's release_available_cached_blocks reaches
// the free 60 MiB block of an expandable segment and fails release_block's
// internal assert; 2.5 passes over it (pytorch/pytorch#134338), unmaps it
// in release_cached_blocks and retries, which fits the 80 MiB of pages.
func TestVersionOOMExpandable(t *testing.T) {
	run := func(conf, version string) (*gpualloc.Block, error) {
		c := mustConf(t, conf)
		var err error
		c.Version, err = pytorch.ParseVersion(version)
		require.NoError(t, err)
		a, err := pytorch.New(strategytest.NewDevice(100*MiB), c)
		require.NoError(t, err)
		x := alloc(t, a, 60*MiB, 0)
		alloc(t, a, 20*MiB, 0)
		require.NoError(t, a.Free(x))
		b, err := a.Alloc(70 * MiB)
		return &b, err
	}
	const conf = es + ",max_split_size_mb:40"
	_, err := run(conf, "2.4")
	require.ErrorIs(t, err, pytorch.ErrInternalAssert)
	assert.NotErrorIs(t, err, gpualloc.ErrOutOfMemory)
	assert.ErrorContains(t, err, "#134338")
	for _, tt := range []struct{ conf, version string }{{conf, "2.5"}, {conf, "2.11"}, {es, "2.4"}} {
		b, err := run(tt.conf, tt.version)
		require.NoError(t, err, "%s under %s", tt.conf, tt.version)
		assert.Equal(t, int64(70*MiB), b.Size)
	}
}
