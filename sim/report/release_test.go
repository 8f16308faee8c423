package report

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Releases sort by their numbers, 2.9 before 2.10, where fractions sort by
// value.
func TestCompareReleases(t *testing.T) {
	v := []string{"2.10", "2.2", "2.11", "2.1", "2.9"}
	slices.SortFunc(v, compareValues)
	assert.Equal(t, []string{"2.1", "2.2", "2.9", "2.10", "2.11"}, v)
	f := []string{"0.75", "0.5", "0.125"}
	slices.SortFunc(f, compareValues)
	assert.Equal(t, []string{"0.125", "0.5", "0.75"}, f)
}
