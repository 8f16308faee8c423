package report_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpualloc/gpualloc/sim/report"
)

// A bin's bytes stay at 2^63-1 rather than wrap.
func TestSizeHistogramSaturates(t *testing.T) {
	var h report.SizeHistogram
	h.Add(6e18)
	h.Add(6e18)
	h.Add(3)
	assert.Equal(t, int64(3), h.Total())
	assert.Equal(t, int64(math.MaxInt64), h.Bytes[63])
	assert.Equal(t, int64(3), h.Bytes[2])
}
