package pytorch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/snapshot"
)

// TestAllocatorSettings checks that the settings a snapshot records give the
// allocator's configuration back, through the conf and through AllocConf.
func TestAllocatorSettings(t *testing.T) {
	for _, conf := range []string{
		"",
		"max_split_size_mb:64",
		"max_split_size_mb:128,roundup_power2_divisions:[1:4,2:8,1024:2],garbage_collection_threshold:0.6,expandable_segments:True,max_non_split_rounding_mb:40,memory_fraction:0.5",
		"roundup_power2_divisions:4",
	} {
		c, err := ParseConf(conf)
		require.NoError(t, err, conf)
		dev, err := virtual.New(virtual.Options{})
		require.NoError(t, err)
		a, err := New(dev, c)
		require.NoError(t, err)
		s := a.AllocatorSettings()
		assert.Equal(t, conf, s.Conf)
		assert.True(t, s.Effective)
		back, err := ParseConf(s.AllocConf())
		require.NoError(t, err, s.AllocConf())
		assert.Equal(t, c, back, conf)
		var _ snapshot.SettingsReporter = a
		assert.Equal(t, c.RoundSize(1000), a.RoundSize(1000))
	}
}
