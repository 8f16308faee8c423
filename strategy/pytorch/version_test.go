package pytorch_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/pytorch"
	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

// newVersion opens an allocator of conf under release version.
func newVersion(conf, version string) (*pytorch.Allocator, error) {
	c, err := pytorch.ParseConf(conf)
	if err != nil {
		return nil, err
	}
	if c.Version, err = pytorch.ParseVersion(version); err != nil {
		return nil, err
	}
	return pytorch.New(strategytest.NewDevice(GiB), c)
}

// TestVersionExpandable: expandable segments came in 2.1
// (pytorch/pytorch#96995); 2.0 rejects the setting.
func TestVersionExpandable(t *testing.T) {
	_, err := newVersion(es, "2.0")
	assert.ErrorContains(t, err, "expandable_segments: not in PyTorch 2.0")
	a, err := newVersion(es, "2.1")
	require.NoError(t, err)
	b := alloc(t, a, 15*MiB, 0)
	assert.Equal(t, int64(20*MiB), a.Stats().Reserved)
	require.NoError(t, a.Free(b))
	// Off, 2.0 takes the same request in a segment of its own size.
	a, err = newVersion("", "2.0")
	require.NoError(t, err)
	alloc(t, a, 15*MiB, 0)
	assert.Equal(t, int64(16*MiB), a.Stats().Reserved)
}

// TestVersionNonSplitRounding: max_non_split_rounding_mb came in 2.6
// (pytorch/pytorch#136174): there a request of at least max_split_size
// takes a cached block up to that much larger; 2.5 rejects the setting
// and keeps 20 MiB, so that it allocates a new segment.
func TestVersionNonSplitRounding(t *testing.T) {
	const conf = "max_split_size_mb:100,max_non_split_rounding_mb:60"
	_, err := newVersion(conf, "2.5")
	assert.ErrorContains(t, err, "max_non_split_rounding_mb: not in PyTorch 2.5")
	for _, tt := range []struct {
		conf, version string
		segments      int64
	}{{conf, "2.6", 1}, {"max_split_size_mb:100", "2.5", 2}} {
		a, err := newVersion(tt.conf, tt.version)
		require.NoError(t, err)
		b := alloc(t, a, 160*MiB, 0)
		require.NoError(t, a.Free(b))
		alloc(t, a, 120*MiB, 0) // 40 MiB smaller: within 60 MiB, not within 20
		assert.Equal(t, tt.segments, a.Stats().DeviceMallocs, "%s under %s", tt.conf, tt.version)
	}
}

// TestVersionParam: the version parameter, its spec and conf, and an
// unknown release, which gets one line listing those known.
func TestVersionParam(t *testing.T) {
	a, err := openSpec("pytorch:version=2.5")
	require.NoError(t, err)
	spec := a.(gpualloc.Specer).Spec()
	assert.Contains(t, spec, ",version=2.5")
	assert.Contains(t, a.(*pytorch.Allocator).AllocatorSettings().Conf, "version:2.5")
	assert.Contains(t, a.(*pytorch.Allocator).Models(), "PyTorch 2.5 ")
	b, err := openSpec(spec)
	require.NoError(t, err)
	assert.Equal(t, spec, b.(gpualloc.Specer).Spec())

	a, err = openSpec("pytorch:conf=version:2.3")
	require.NoError(t, err)
	assert.Equal(t, "2.3", a.(*pytorch.Allocator).Config().Version.String())
	a, err = openSpec("pytorch:conf=version:2.3,version=2.11")
	require.NoError(t, err)
	assert.NotContains(t, a.(gpualloc.Specer).Spec(), "version=", "the newest is the default")

	_, err = openSpec("pytorch:version=3.1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "known: 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8, 2.9, 2.10, 2.11")
	assert.NotContains(t, err.Error(), "\n")
	v, err := pytorch.ParseVersion("2.9.1")
	require.NoError(t, err)
	assert.Equal(t, "2.9", v.String())
	assert.Equal(t, "2.11", pytorch.Newest().String())
	assert.Len(t, pytorch.Versions(), 12)
}

// TestVersionSweep: a range of releases is a sweep, as other ranges are.
func TestVersionSweep(t *testing.T) {
	p, err := gpualloc.Select("pytorch:version=2.1..2.11", nil)
	require.NoError(t, err)
	ps, err := p.Expand()
	require.NoError(t, err)
	var got []string
	for _, q := range ps {
		got = append(got, q.Value("version"))
	}
	assert.Equal(t, []string{"2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11"}, got)
}

// TestVersionSplitTwenty: max_split_size_mb:20 is refused before 2.10,
// whose parser wants more than 20, and taken from 2.10 (#165135); 21 is
// taken by both.
func TestVersionSplitTwenty(t *testing.T) {
	_, err := newVersion("max_split_size_mb:20", "2.9")
	assert.ErrorContains(t, err, "max_split_size_mb: PyTorch 2.9 takes more than 20")
	a, err := newVersion("max_split_size_mb:20", "2.10")
	require.NoError(t, err)
	assert.Equal(t, int64(20*MiB), a.Config().MaxSplitSize)
	_, err = newVersion("max_split_size_mb:21", "2.9")
	assert.NoError(t, err)
}
