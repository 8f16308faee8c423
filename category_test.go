package gpualloc_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

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
	var listed []string
	for _, tt := range tests {
		assert.Equal(t, tt.name, tt.c.String())
		c, ok := gpualloc.ParseCategory(tt.name)
		assert.True(t, ok, tt.name)
		assert.Equal(t, tt.c, c)
		c, ok = gpualloc.ParseCategory(strings.ToUpper(tt.name))
		assert.True(t, ok, tt.name)
		assert.Equal(t, tt.c, c, "names match without regard to case")
		listed = append(listed, tt.name)
	}
	assert.ElementsMatch(t, listed, strings.Split(gpualloc.CategoryNames, ", "))
	assert.Equal(t, "category?", gpualloc.Category(gpualloc.NumCategories).String())
	for _, bad := range []string{"", "weights", "param", "unknown ", "optimizer-state"} {
		c, ok := gpualloc.ParseCategory(bad)
		assert.False(t, ok, bad)
		assert.Equal(t, gpualloc.CategoryUnknown, c)
	}
}
