package traces

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSliceReader(t *testing.T) {
	r, err := NewReader(strings.NewReader("op,id,size\nalloc,1,10\nalloc,2,20\nfree,1,\n"), "t", Options{})
	require.NoError(t, err)
	events, err := ReadAll(r)
	require.NoError(t, err)
	require.Len(t, events, 3)
	s := NewSliceReader("mem", events)
	assert.Equal(t, "mem", s.Name())
	for pass := 0; pass < 2; pass++ {
		var got []Event
		for s.Scan() {
			got = append(got, s.Event())
		}
		assert.NoError(t, s.Err())
		assert.Equal(t, events, got, "pass %d", pass)
		assert.False(t, s.Scan(), "stays at the end")
		s.Reset()
	}
	assert.Equal(t, OpFree, events[2].Op)
	assert.Equal(t, int64(10), events[2].Size)
	assert.Equal(t, events[0].Slot, events[2].Slot)

	_, err = ReadAll(mustReader(t, "op,id,size\nalloc,1,10\nfree,2,\n"))
	assert.EqualError(t, err, "t:3: free of unknown id 2")
}

func mustReader(t *testing.T, text string) FileReader {
	r, err := NewReader(strings.NewReader(text), "t", Options{})
	require.NoError(t, err)
	return r
}

func TestSliceReaderBatch(t *testing.T) {
	events := []Event{{Op: OpAlloc, ID: 1, Size: 8}, {Op: OpAlloc, ID: 2, Size: 16, Slot: 1}, {Op: OpFree, ID: 1, Size: 8}}
	r := NewSliceReader("x", events)
	var _ BatchReader = r
	require.True(t, r.Scan())
	assert.Equal(t, events[0], r.Event())
	assert.Equal(t, events[1:], r.Batch(), "the events after the one scanned")
	assert.Empty(t, r.Batch())
	assert.False(t, r.Scan())
	r.Reset()
	assert.Equal(t, events, r.Batch())
	assert.Empty(t, NewSliceReader("empty", nil).Batch())
}
