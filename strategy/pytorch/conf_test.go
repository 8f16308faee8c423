package pytorch_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

// confVariants returns the conf of each variant that a sweep of conf,
// given in PYTORCH_CUDA_ALLOC_CONF, stands for.
func confVariants(conf string) ([]string, error) {
	getenv := func(k string) (string, bool) { return conf, k == "PYTORCH_CUDA_ALLOC_CONF" }
	p, err := gpualloc.Select("pytorch", getenv)
	if err != nil {
		return nil, err
	}
	ps, err := p.Expand()
	var out []string
	for _, p := range ps {
		out = append(out, p.Value("conf"))
	}
	return out, err
}

func TestConfSweep(t *testing.T) {
	// Setting by setting, the first slowest; a list in brackets is one
	// value, and an item the sweep does not vary keeps its text.
	got, err := confVariants("max_split_size_mb:64|128, expandable_segments:True|False,roundup_power2_divisions:[256:1,512:2]")
	require.NoError(t, err)
	assert.Equal(t, []string{
		"max_split_size_mb:64,expandable_segments:True,roundup_power2_divisions:[256:1,512:2]",
		"max_split_size_mb:64,expandable_segments:False,roundup_power2_divisions:[256:1,512:2]",
		"max_split_size_mb:128,expandable_segments:True,roundup_power2_divisions:[256:1,512:2]",
		"max_split_size_mb:128,expandable_segments:False,roundup_power2_divisions:[256:1,512:2]",
	}, got)
	got, err = confVariants("garbage_collection_threshold:0.5, max_split_size_mb:20..40/20,")
	require.NoError(t, err)
	assert.Equal(t, []string{"garbage_collection_threshold:0.5,max_split_size_mb:20", "garbage_collection_threshold:0.5,max_split_size_mb:40"}, got)

	_, err = confVariants("max_split_size_mb:64,expandable_segments:3..1")
	assert.EqualError(t, err, `PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64,expandable_segments:3..1": expandable_segments: range "3..1": start 3 is above end 1`)
}

// FuzzConfSweep checks that any conf expands or fails cleanly, each
// variant with as many settings as the conf (when no brackets hold commas
// of their own, and every item is a setting with a value), as the conf
// parameter reads them.
func FuzzConfSweep(f *testing.F) {
	for _, s := range []string{"max_split_size_mb:64|128,expandable_segments:True|False", "a:1..3,b:[1,2]", "a:1,,b:2|3", "a:3..1", ",", "a:1|2,"} {
		f.Add(s)
	}
	s, err := gpualloc.Lookup("pytorch")
	require.NoError(f, err)
	settings := s.Params[0].Settings
	require.NotNil(f, settings, s.Params[0].Name)
	f.Fuzz(func(t *testing.T, v string) {
		vals, err := confVariants(v)
		if err != nil || strings.TrimSpace(v) == "" {
			return
		}
		require.NotEmpty(t, vals)
		if strings.ContainsAny(v, "[]") {
			return // a list in brackets may hold commas of its own
		}
		want, _ := settings(v)
		for _, kv := range want {
			if kv.Value == "" {
				return // not a setting: PyTorch's parser rejects it
			}
		}
		for _, x := range vals {
			got, _ := settings(x)
			require.Len(t, got, len(want), "%q from %q", x, v)
		}
	})
}
