package viewercheck_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/internal/viewercheck"
)

const sharedDir = "../../../shared/traces/pytorch"

// TestShared holds the checker to what PyTorch writes: real snapshots pass,
// but for the one with no segment and an empty trace, on which the viewer
// has nothing to show.
func TestShared(t *testing.T) {
	pk.ForEachShared(t, sharedDir, func(t *testing.T, name string, data []byte) {
		err := viewercheck.Check(data, viewercheck.Options{})
		if name == "empty.pickle" {
			require.ErrorContains(t, err, "nothing to show")
			return
		}
		require.NoError(t, err)
	})
}

const a0, a1 = pk.A0, pk.A1

// good is a small consistent snapshot: one segment, a block allocated in
// the trace and live, one allocated and freed, from an empty allocator.
func good() pk.Dict {
	return pk.Snapshot([]any{
		pk.Segment(0, a0, 0, "small", pk.Block(a0, 1024, 1000, "active_allocated"), pk.Block(a0+1024, 2<<20-1024, 0, "inactive")),
	}, [][]any{{
		pk.Entry("segment_alloc", a0, 2<<20, 0, 1),
		pk.Entry("alloc", a0+1024, 500, 0, 2),
		pk.Entry("alloc", a0, 1000, 0, 3),
		pk.Entry("free_requested", a0+1024, 500, 0, 4),
		pk.Entry("free_completed", a0+1024, 500, 0, 5),
	}}, nil)
}

func TestGood(t *testing.T) {
	for _, proto := range []int{2, 3, 4} {
		for _, memo := range []bool{false, true} {
			data := pk.Encode(good(), pk.Options{Proto: proto, Memo: memo})
			require.NoError(t, viewercheck.Check(data, viewercheck.Options{Complete: true}), "protocol %d", proto)
		}
	}
}

// set returns d with key set to v (added when absent).
func set(d pk.Dict, key string, v any) pk.Dict {
	d = append(pk.Dict(nil), d...)
	for i := range d {
		if d[i].K == key {
			d[i].V = v
			return d
		}
	}
	return append(d, pk.KV{K: key, V: v})
}

func drop(d pk.Dict, key string) pk.Dict {
	var out pk.Dict
	for _, kv := range d {
		if kv.K != key {
			out = append(out, kv)
		}
	}
	return out
}

// with returns good() with its trace replaced.
func with(entries ...any) pk.Dict {
	return set(good(), "device_traces", []any{entries})
}

func TestRejects(t *testing.T) {
	g := good()
	seg := g[0].V.([]any)[0].(pk.Dict)
	blk := seg[len(seg)-1].V.([]any)[0].(pk.Dict)
	ent := g[1].V.([]any)[0].([]any)[1].(pk.Dict)
	withSeg := func(s pk.Dict) pk.Dict { return set(good(), "segments", []any{s}) }
	withBlock := func(b pk.Dict) pk.Dict {
		return withSeg(set(seg, "blocks", []any{b, pk.Block(a0+1024, 2<<20-1024, 0, "inactive")}))
	}
	withEntry := func(e pk.Dict) pk.Dict {
		return with(pk.Entry("segment_alloc", a0, 2<<20, 0, 1), e, pk.Entry("alloc", a0, 1000, 0, 3))
	}
	for _, tc := range []struct {
		name     string
		data     []byte
		complete bool
		want     string
	}{
		{"protocol 5", pk.Encode(good(), pk.Options{Proto: 5}), false, "pickle protocol 5"},
		{"no pickle", []byte("{}"), false, "not a pickle"},
		{"class opcode", append([]byte{0x80, 2, 'c'}, "builtins\nset\n)R."...), false, "opcode 0x63"},
		{"byte string", []byte{0x80, 3, 'C', 1, 'x', '.'}, false, "opcode 0x43"},
		{"text int", []byte{0x80, 2, 'I', '1', '\n', '.'}, false, "opcode 0x49"},
		{"bigint", []byte{0x80, 2, 0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, '.'}, false, "BigInt"},
		{"inexact", []byte{0x80, 2, 0x8a, 8, 1, 0, 0, 0, 0, 0, 0x20, 0, '.'}, false, "not exact"},
		{"after stop", append(pk.Encode(good(), pk.Options{Proto: 2}), 'N'), false, "after STOP"},
		{"not a dict", pk.Encode([]any{}, pk.Options{Proto: 2}), false, "a list, not a dict"},
		{"no segments", pk.Encode(drop(good(), "segments"), pk.Options{Proto: 2}), false, `snapshot: no "segments"`},
		{"empty", pk.Encode(pk.Snapshot(nil, nil, nil), pk.Options{Proto: 2}), false, "nothing to show"},
		{"device string", pk.Encode(withSeg(set(seg, "device", "0")), pk.Options{Proto: 2}), false, "segments[0].device: a str"},
		{"device beyond", pk.Encode(withSeg(set(seg, "device", 1)), pk.Options{Proto: 2}), false, "not an index of device_traces"},
		{"size string", pk.Encode(withBlock(set(blk, "size", "1024")), pk.Options{Proto: 2}), false, "segments[0].blocks[0].size: a str, not an integer"},
		{"bad state", pk.Encode(withBlock(set(blk, "state", "live")), pk.Options{Proto: 2}), false, `"live", not one of`},
		{"no requested", pk.Encode(withBlock(drop(blk, "requested_size")), pk.Options{Proto: 2}), false, `no "requested_size"`},
		{"frames None", pk.Encode(withBlock(set(blk, "frames", nil)), pk.Options{Proto: 2}), false, "frames: a None, not a list"},
		{"block address", pk.Encode(withBlock(set(blk, "address", a1)), pk.Options{Proto: 2}), false, "the viewer places a block"},
		{"no tiling", pk.Encode(withSeg(set(seg, "total_size", 4<<20)), pk.Options{Proto: 2}), false, "they cover 2097152 bytes of a segment of 4194304"},
		{"action", pk.Encode(withEntry(set(ent, "action", "malloc")), pk.Options{Proto: 2}), false, `"malloc", not one of`},
		{"addr string", pk.Encode(withEntry(set(ent, "addr", "0x7f")), pk.Options{Proto: 2}), false, "device_traces[0][1].addr: a str"},
		{"no stream", pk.Encode(withEntry(drop(ent, "stream")), pk.Options{Proto: 2}), false, `device_traces[0][1]: no "stream"`},
		{"category", pk.Encode(withEntry(set(ent, "category", "activation")), pk.Options{Proto: 2}), false, `none is "unknown"`},
		{"free unknown", pk.Encode(with(pk.Entry("free_requested", a1, 10, 0, 1)), pk.Options{Proto: 2}), false, "free_requested of 0x7f3a00200000, where no block"},
		{"free outside", pk.Encode(with(pk.Entry("free_completed", a1, 10, 0, 1)), pk.Options{Proto: 2}), false, "which no segment holds"},
		{"alloc not live", pk.Encode(with(pk.Entry("alloc", a0+4096, 10, 0, 1)), pk.Options{Proto: 2}), false, "which is not live after it"},
		{"segment_alloc", pk.Encode(with(pk.Entry("segment_alloc", a0, 4<<20, 0, 1)), pk.Options{Proto: 2}), false, "which is not a segment after it"},
		{"segment_alloc live", pk.Encode(with(pk.Entry("segment_alloc", a0, 2<<20, 0, 1)), pk.Options{Proto: 2}), false, "holds the block"},
		{"segment_free", pk.Encode(with(pk.Entry("segment_free", a0+4096, 4096, 0, 1)), pk.Options{Proto: 2}), false, "memory that a segment holds after it"},
		{"segment_map", pk.Encode(with(pk.Entry("segment_map", a1, 2<<20, 0, 1)), pk.Options{Proto: 2}), false, "which no segment holds after it"},
		{"incomplete", pk.Encode(with(pk.Entry("alloc", a0, 1000, 0, 1)), pk.Options{Proto: 2}), true, "does not start from an empty allocator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := viewercheck.Check(tc.data, viewercheck.Options{Complete: tc.complete})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestExpandable walks maps and unmaps: an unmapped range merges with its
// neighbour of the same stream, as in the viewer.
func TestExpandable(t *testing.T) {
	const p = 2 << 20
	d := pk.Snapshot([]any{
		set(pk.Segment(0, a0, 3, "small", pk.Block(a0, p, 100, "active_allocated"), pk.Block(a0+p, p, 0, "inactive")), "is_expandable", true),
	}, [][]any{{
		pk.Entry("segment_map", a0, p, 3, 1),
		pk.Entry("segment_map", a0+p, 2*p, 3, 2),
		pk.Entry("alloc", a0+2*p, 100, 3, 3),
		pk.Entry("alloc", a0, 100, 3, 4),
		pk.Entry("free_requested", a0+2*p, 100, 3, 5),
		pk.Entry("free_completed", a0+2*p, 100, 3, 6),
		pk.Entry("segment_unmap", a0+2*p, p, 3, 7),
	}}, nil)
	require.NoError(t, viewercheck.Check(pk.Encode(d, pk.Options{Proto: 4, Memo: true}), viewercheck.Options{Complete: true}))
}

// FuzzCheck checks that no input makes the checker panic, seeded with
// consistent snapshots.
func FuzzCheck(f *testing.F) {
	for _, proto := range []int{2, 4} {
		f.Add(pk.Encode(good(), pk.Options{Proto: proto, Memo: true}))
		f.Add(pk.Encode(pk.TwoDevices(true), pk.Options{Proto: proto, Memo: true}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = viewercheck.Check(data, viewercheck.Options{Complete: true})
		_ = viewercheck.Check(data, viewercheck.Options{})
	})
}
