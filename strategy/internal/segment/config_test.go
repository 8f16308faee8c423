package segment

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGrowthNames(t *testing.T) {
	for _, g := range []Growth{GrowExact, GrowChunk, GrowDouble} {
		got, ok := ParseGrowth(g.String())
		assert.True(t, ok, "%v", g)
		assert.Equal(t, g, got)
	}
	_, ok := ParseGrowth("Chunk")
	assert.False(t, ok, "growth names are lower case")
	assert.Equal(t, "Growth(7)", Growth(7).String())
}

func TestRoundSize(t *testing.T) {
	c := Config{Round: 512, MinBlock: 512}
	c256 := Config{Round: 256, MinBlock: 1024}
	tests := []struct {
		c          Config
		size, want int64
	}{
		{c, 1, 512},
		{c, 511, 512},
		{c, 512, 512},
		{c, 513, 1024},
		{c, 100000, 100352},
		{c, 0, 0},
		{c, -1, 0},
		{c, math.MaxInt64 - 511, math.MaxInt64 - 511},
		{c, math.MaxInt64 - 510, 0},
		{c, math.MaxInt64, 0},
		{c256, 1, 1024},
		{c256, 1025, 1280},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.c.RoundSize(tt.size), "%+v.RoundSize(%d)", tt.c, tt.size)
	}
}
