package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// When both of PyTorch's variables are set, the one ignored is named, even
// when its value is not valid.
func TestIgnoredPyTorchVariable(t *testing.T) {
	code, _, errs := run(t, map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": "bogus:1"},
		"-s", "pytorch", "testdata/tiny.csv")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set pytorch's parameters; "+
		"PYTORCH_ALLOC_CONF=bogus:1 is ignored: PYTORCH_CUDA_ALLOC_CONF, also set, wins")
}
