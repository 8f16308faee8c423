package fidelity

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConf(t *testing.T) {
	for _, tc := range []struct {
		settings map[string]any
		want     string
	}{
		{nil, ""},
		{map[string]any{"max_split_size": int64(-1), "garbage_collection_threshold": 0.0, "expandable_segments": false,
			"roundup_power2_divisions": map[string]any{"1": int64(0), "2": int64(0)}, "pinned_num_register_threads": int64(1)}, ""},
		{map[string]any{"max_split_size": int64(256 << 20), "garbage_collection_threshold": 0.6, "expandable_segments": true,
			"roundup_power2_divisions": map[string]any{"1": int64(4), "2": int64(4)}},
			"max_split_size_mb:256,roundup_power2_divisions:4,garbage_collection_threshold:0.6,expandable_segments:True"},
		{map[string]any{"roundup_power2_divisions": map[string]any{"2": int64(8), "1": int64(4)}}, "roundup_power2_divisions:[1:4,2:8]"},
		{map[string]any{"last_allocator_settings": map[string]any{"expandable_segments": true}}, "expandable_segments:True"},
		{map[string]any{"PYTORCH_CUDA_ALLOC_CONF": "backend:native,max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]"},
			"max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]"},
	} {
		got, err := Conf(tc.settings)
		require.NoError(t, err, "%v", tc.settings)
		assert.Equal(t, tc.want, got, "%v", tc.settings)
	}
	_, err := Conf(map[string]any{"garbage_collection_threshold": "high"})
	assert.Error(t, err)
}
