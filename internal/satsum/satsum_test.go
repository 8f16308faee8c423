package satsum

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAdd(t *testing.T) {
	assert.Equal(t, int64(5), Add(2, 3))
	assert.Equal(t, int64(math.MaxInt64), Add(math.MaxInt64-1, 1))
	assert.Equal(t, int64(math.MaxInt64), Add(6e18, 6e18))
	assert.Equal(t, int64(math.MaxInt64), Add(math.MaxInt64, math.MaxInt64))
	assert.Equal(t, int64(math.MaxInt64), Add(math.MaxInt64, 0))
}
