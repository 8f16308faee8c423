package segment

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/strategy/strategytest"
)

var testConfig = Config{Round: 512, MinBlock: 512, SplitThreshold: 512, Grow: GrowExact, Chunk: 1}

func newHeap(t *testing.T) (*Heap, *Sorted) {
	t.Helper()
	h, ix := new(Heap), new(Sorted)
	require.NoError(t, h.Init(strategytest.NewDevice(1<<30), "test", testConfig, ix))
	return h, ix
}

func TestBuildRejects(t *testing.T) {
	tests := []struct {
		segs    [][]LayoutBlock
		wantErr string
	}{
		{[][]LayoutBlock{{{Size: 1000, Free: true}}}, "segment 0, block 0: size 1000 is not a positive multiple of 512"},
		{[][]LayoutBlock{{{Size: 512}, {Size: 0}}}, "segment 0, block 1: size 0 is not a positive multiple of 512"},
		{[][]LayoutBlock{{{Size: 512, Free: true}, {Size: 512, Free: true}}}, "segment 0, blocks 0 and 1: adjacent free blocks"},
		{[][]LayoutBlock{{{Size: 512}}, {}}, "segment 1: no blocks"},
	}
	for _, tt := range tests {
		h, _ := newHeap(t)
		_, err := h.Build(tt.segs)
		assert.EqualError(t, err, tt.wantErr)
	}
	h, _ := newHeap(t)
	_, err := h.Build([][]LayoutBlock{{{Size: 512}}})
	require.NoError(t, err)
	_, err = h.Build([][]LayoutBlock{{{Size: 512}}})
	assert.EqualError(t, err, "test: Build on a heap that is not empty")
}

// TestCheckFindsCorruption breaks a valid heap in the ways Check looks for
// and expects it to say so.
func TestCheckFindsCorruption(t *testing.T) {
	layout := [][]LayoutBlock{{{Size: 512}, {Size: 1024, Free: true}, {Size: 512}}, {{Size: 2048, Free: true}, {Size: 512}}}
	tests := []struct {
		name    string
		corrupt func(h *Heap)
		wantErr string
	}{
		{"a size changed", func(h *Heap) { h.Nodes[1].Size += 512 }, "block 2 at"},
		{"a size not a multiple of round", func(h *Heap) { h.Nodes[2].Size--; h.Nodes[3].Addr--; h.free-- }, "not a positive multiple of 512"},
		{"a broken Prev link", func(h *Heap) { h.Nodes[3].Prev = 1 }, "has Prev 1, want 2"},
		{"adjacent free blocks", func(h *Heap) { h.Nodes[3].Free = true; h.free += h.Nodes[3].Size }, "are adjacent"},
		{"free bytes off", func(h *Heap) { h.free += 512 }, "FreeBytes = "},
		{"a leaked record", func(h *Heap) { h.Nodes = append(h.Nodes, Node{}) }, "records"},
		{"a live block below min block", func(h *Heap) { h.c.MinBlock = 1024 }, "< min block 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ix := newHeap(t)
			_, err := h.Build(layout)
			require.NoError(t, err)
			_, err = h.Check()
			require.NoError(t, err)
			_, err = ix.Check(h.Nodes)
			require.NoError(t, err)
			tt.corrupt(h)
			_, err = h.Check()
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestLayoutRoundTrip(t *testing.T) {
	h, _ := newHeap(t)
	layout := [][]LayoutBlock{{{Size: 512}, {Size: 1024, Free: true}, {Size: 512}}, {{Size: 2048, Free: true}, {Size: 512}}}
	live, err := h.Build(layout)
	require.NoError(t, err)
	assert.Len(t, live, 3)
	got := h.Layout()
	require.Len(t, got, 2)
	assert.Equal(t, layout[0], got[0].Blocks)
	assert.Equal(t, layout[1], got[1].Blocks)
	assert.Equal(t, got[0].Addr, live[0].Addr)
	assert.Equal(t, got[0].Addr+1536, live[1].Addr)
	assert.Equal(t, 2, h.Segments())
	assert.Equal(t, int64(3072), h.FreeBytes())
}
