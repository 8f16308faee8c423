package traces

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The live bytes of a trace never pass 2^63-1: the allocation that would
// take them past is a bad event at its line, so that every sum of live
// sizes downstream fits in an int64.
func TestLiveBytesFit(t *testing.T) {
	const trace = "op,id,size\nalloc,1,6000000000000000000\nfree,1,\nalloc,2,6000000000000000000\nalloc,3,4000000000000000000\nfree,2,\n"
	r, err := NewReader(strings.NewReader(trace), "big.csv", Options{})
	require.NoError(t, err)
	n := 0
	for r.Scan() {
		n++
	}
	assert.Equal(t, 3, n, "two allocations of 6e18 in turn are fine")
	require.EqualError(t, r.Err(), "big.csv:5: alloc of id 3 (4000000000000000000 bytes) takes the live bytes past 2^63-1 (8 EiB), more than a trace can sum")

	r, err = NewReader(strings.NewReader(trace), "big.csv", Options{Lenient: true})
	require.NoError(t, err)
	n = 0
	for r.Scan() {
		n++
	}
	require.NoError(t, r.Err())
	assert.Equal(t, 4, n)
	assert.Equal(t, int64(1), r.Skipped())
}
