package gpualloc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

func TestCategoryNames(t *testing.T) {
	tests := []struct {
		c    gpualloc.Category
		name string
	}{
		{gpualloc.CategoryUnknown, "unknown"},
		{gpualloc.CategoryParameter, "parameter"},
		{gpualloc.CategoryOptimizerState, "optimizer_state"},
		{gpualloc.CategoryInput, "input"},
		{gpualloc.CategoryActivation, "activation"},
		{gpualloc.CategoryGradient, "gradient"},
		{gpualloc.CategoryTemporary, "temporary"},
		{gpualloc.CategoryAutogradDetail, "autograd_detail"},
	}
	assert.Len(t, tests, gpualloc.NumCategories)
	for _, tt := range tests {
		assert.Equal(t, tt.name, tt.c.String())
		var c gpualloc.Category
		require.NoError(t, c.UnmarshalText([]byte(tt.name)))
		assert.Equal(t, tt.c, c)
		c = gpualloc.CategoryUnknown
		require.NoError(t, c.UnmarshalText([]byte(strings.ToUpper(tt.name))))
		assert.Equal(t, tt.c, c, "names match without regard to case")
	}
	assert.Equal(t, "category?", gpualloc.Category(gpualloc.NumCategories).String())
	for _, bad := range []string{"", "weights", "param", "unknown ", "optimizer-state"} {
		c := gpualloc.CategoryGradient
		assert.EqualError(t, c.UnmarshalText([]byte(bad)), fmt.Sprintf("unknown category %q", bad))
		assert.Equal(t, gpualloc.CategoryGradient, c, "unchanged")
	}
}
