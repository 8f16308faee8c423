package torchsize

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRoundToBlock(t *testing.T) {
	for _, tt := range []struct{ size, want int64 }{
		{-1, 0}, {0, 0}, {1, 512}, {511, 512}, {512, 512}, {513, 1024}, {1 << 20, 1 << 20},
		{math.MaxInt64 - 510, 0}, {math.MaxInt64 - 1022, math.MaxInt64 - 511},
	} {
		assert.Equal(t, tt.want, RoundToBlock(tt.size), "RoundToBlock(%d)", tt.size)
	}
}

func TestAllocationSize(t *testing.T) {
	for _, tt := range []struct{ rounded, want int64 }{
		{512, SmallBuffer}, {SmallSize, SmallBuffer}, {SmallSize + 512, LargeBuffer},
		{MinLargeAlloc - 512, LargeBuffer}, {MinLargeAlloc, MinLargeAlloc}, {MinLargeAlloc + 1, MinLargeAlloc + RoundLarge},
		{math.MaxInt64 - RoundLarge + 2, 0},
	} {
		assert.Equal(t, tt.want, AllocationSize(tt.rounded), "AllocationSize(%d)", tt.rounded)
	}
}

// TestDivisionsRoundTrip: what FormatDivisions writes, ParseDivisions reads
// back to the same divisions, as PyTorch would.
func TestDivisionsRoundTrip(t *testing.T) {
	for _, conf := range []string{"0", "4", "[1:0,2:8,8:2]", "[1:4,2:8,1024:2]", "[1:0,32768:2]"} {
		d, err := ParseDivisions(conf)
		assert.NoError(t, err, conf)
		assert.Equal(t, conf, FormatDivisions(d))
	}
	assert.Equal(t, 0, MiBInterval(1))
	assert.Equal(t, 10, MiBInterval(1024))
	assert.Equal(t, Intervals-1, MiBInterval(1<<20))
}
