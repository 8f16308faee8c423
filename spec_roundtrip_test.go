package gpualloc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	_ "github.com/gpualloc/gpualloc/strategy/all"
)

// The full spec that results print (JSON, CSV, the report) parses back to
// the same strategy, for every built-in strategy and for values that hold
// commas: the pytorch strategy's conf with several settings, from a spec
// or from PyTorch's variable.
func TestFullSpecParsesBack(t *testing.T) {
	env := map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2,>:8],expandable_segments:True"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	specs := []string{
		"pytorch:conf=max_split_size_mb:128,expandable_segments:True",
		"pytorch:conf=max_split_size_mb:128,expandable_segments:True,garbage_collection_threshold:0.6,memory_fraction=0.5",
	}
	specs = append(specs, gpualloc.Names()...)
	for _, s := range specs {
		for _, ge := range []func(string) (string, bool){nil, getenv} {
			p, err := gpualloc.Select(s, ge)
			require.NoError(t, err, s)
			full := p.String()
			again, err := gpualloc.Select(full, nil)
			require.NoError(t, err, "%s printed as %s", s, full)
			require.Equal(t, p.Spec(), again.Spec(), "%s printed as %s", s, full)
			dev, err := virtual.New(virtual.Options{Capacity: 16 << 30})
			require.NoError(t, err)
			if _, err := p.Open(dev); err == nil { // the package's own test strategies may refuse their defaults
				_, err = again.Open(dev)
				require.NoError(t, err, full)
			}
		}
	}
}
