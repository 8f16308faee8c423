package snapshot

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
)

// TestReadPoolAndEmptyCache reads a segment's segment_pool_id and marks
// the segment frees whose frames name empty_cache; a pool id that is not a
// pair of integers is an error naming it; empty traces name no device.
func TestReadPoolAndEmptyCache(t *testing.T) {
	seg := pk.Segment(0, pk.A0, 0, "large", pk.Block(pk.A0, 20<<20, 0, "inactive"))
	for i := range seg {
		if seg[i].K == "segment_pool_id" {
			seg[i].V = [2]any{2, 3}
		}
	}
	frames := func(name, file string) pk.KV {
		return pk.KV{K: "frames", V: []any{pk.Dict{{K: "filename", V: file}, {K: "line", V: 1}, {K: "name", V: name}}}}
	}
	byPython := pk.Entry("segment_free", pk.A1, 20<<20, 0, -1)
	byPython[len(byPython)-1] = frames("empty_cache", "/x/torch/cuda/memory.py")
	byCpp := pk.Entry("segment_free", pk.A1, 20<<20, 0, -1)
	byCpp[len(byCpp)-1] = frames("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::emptyCache(c10::cuda::MempoolId_t)", "CUDACachingAllocator.cpp")
	byMalloc := pk.Entry("segment_free", pk.A1, 20<<20, 0, -1)
	byMalloc[len(byMalloc)-1] = frames("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", "CUDACachingAllocator.cpp")
	other := pk.Entry("alloc", pk.A1, 512, 0, -1)
	other[len(other)-1] = frames("empty_cache", "/x/torch/cuda/memory.py")
	data := pk.Encode(pk.Snapshot([]any{seg}, [][]any{{byPython, byCpp, byMalloc, other}, nil}, nil), pk.Options{Proto: 4, Memo: true})
	s, err := Read(bytes.NewReader(data), "x.pickle")
	require.NoError(t, err)
	assert.Equal(t, PoolID{2, 3}, s.Segments[0].Pool)
	assert.True(t, s.Segments[0].Pool.Private())
	assert.Equal(t, "(2, 3)", s.Segments[0].Pool.String())
	var got []bool
	for _, e := range s.Trace(0).All() {
		got = append(got, e.EmptyCache)
	}
	assert.Equal(t, []bool{true, true, false, false}, got, "only segment frees are releases")
	assert.Equal(t, []int{0}, s.Devices(), "an empty trace names no device")

	for _, tc := range []struct {
		id   any
		want string
	}{
		{"pool", "x.pickle: segments[0].segment_pool_id: not a pair of non-negative integers but a string"},
		{[2]any{-1, 0}, "x.pickle: segments[0].segment_pool_id: not a pair of non-negative integers but a tuple"},
	} {
		for i := range seg {
			if seg[i].K == "segment_pool_id" {
				seg[i].V = tc.id
			}
		}
		_, err = Read(bytes.NewReader(pk.Encode(pk.Snapshot([]any{seg}, nil, nil), pk.Options{Proto: 4})), "x.pickle")
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}
