package snapshot_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// FuzzRead checks that no input makes Read, InitialState or a Tracker
// panic, that every error of Read is one line naming the file, and that
// every rebuilt or tracked segment is tiled by its blocks, and that a read
// without the stacks, a compact one, one that reads ahead on a goroutine,
// or one that looks up runs of frames read before in a small file too,
// gives the same snapshot (but for the stacks). It is seeded with the tests' snapshots, a
// generated one and the smallest of the shared real ones.
func FuzzRead(f *testing.F) {
	for _, proto := range []int{2, 4, 5} {
		f.Add(pk.Encode(pk.TwoDevices(true), pk.Options{Proto: proto, Memo: true}))
		f.Add(pk.Encode(pk.TwoDevices(false), pk.Options{Proto: proto, AllLong: true}))
	}
	f.Add(snap(pk.Entry("alloc", a0, 5, 0, 1), pk.Entry("free_completed", a0, 5, 0, 2), pk.Entry("free_completed", a0, 5, 0, 3)))
	f.Add(pk.Encode(pk.Snapshot([]any{
		pk.Segment(0, a0, 0, "small", pk.Block(a0, 512, 300, "active_allocated"), pk.Block(a0+512, 2<<20-512, 0, "inactive")),
		pk.Segment(0, a1, 0, "large", pk.Block(a1, 20<<20, 0, "inactive")),
	}, [][]any{{
		pk.Entry("segment_alloc", a1, 20<<20, 0, 1), pk.Entry("alloc", a1, 5<<20, 0, 2), pk.Entry("free_completed", a1, 5<<20, 0, 3),
		pk.Entry("free_completed", a0+512, 100, 0, 4), pk.Entry("segment_free", a2, 2<<20, 0, 5),
	}}, pk.Dict{{K: "PYTORCH_CUDA_ALLOC_CONF", V: "max_split_size_mb:64,"}, {K: "max_split_size", V: uint64(1<<64 - 1)},
		{K: "roundup_power2_divisions", V: pk.Dict{{K: "1", V: 4}}}}), pk.Options{Proto: 4, Memo: true}))
	legacy := pk.Dict{{K: "device", V: 0}, {K: "address", V: a0}, {K: "total_size", V: int64(2 << 20)}, {K: "blocks", V: oldBlocks()}}
	f.Add(pk.Encode([]any{legacy}, pk.Options{Proto: 2}))
	// A generated snapshot with frames shared through the memo, several
	// devices and pools; a shared list; a reference bomb; code.
	var g bytes.Buffer
	if _, err := genSnapshot(&g, genOptions{Devices: 2, Events: 40, Slots: 3, Frames: 6, Stacks: 3, Pools: true, Seed: 9}); err != nil {
		f.Fatal(err)
	}
	f.Add(g.Bytes())
	f.Add(mustHex(sharedListHex))
	f.Add(bomb(3, 4))
	f.Add(mustHex(codeHex))
	// Frames taken straight into their list, and put back.
	f.Add(absorbPickle("(h\x00h\x00j\x00\x00\x00\x00e"))
	f.Add(absorbPickle("(h\x00h\x001(h\x00e"))
	// The smallest real snapshot, where the shared fixtures are present.
	if data, err := os.ReadFile(filepath.Join(sharedDir, "small_train_step.pickle")); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := snapshot.Read(bytes.NewReader(data), "f.pickle")
		// Read ahead on a goroutine: the same snapshot, or the same error.
		ps, perr := snapshot.ReadWith(bytes.NewReader(data), "f.pickle", snapshot.Ahead(snapshot.ReadOptions{}))
		require.Equal(t, err == nil, perr == nil)
		if err != nil {
			require.Equal(t, err.Error(), perr.Error())
		} else {
			require.Equal(t, snapshot.Flat(s), snapshot.Flat(ps))
		}
		if err != nil {
			var se *snapshot.Error
			require.True(t, errors.As(err, &se), "%T: %v", err, err)
			require.True(t, strings.HasPrefix(err.Error(), "f.pickle: "), err.Error())
			require.NotContains(t, err.Error(), "\n")
			return
		}
		// Looking up runs of frames read before, from the first memo
		// entry on, reads the same.
		rs, err := snapshot.ReadWith(bytes.NewReader(data), "f.pickle", snapshot.RunsFromStart(snapshot.ReadOptions{}))
		require.NoError(t, err)
		rns, err := snapshot.ReadWith(bytes.NewReader(data), "f.pickle", snapshot.RunsFromStart(snapshot.ReadOptions{NoStacks: true}))
		require.NoError(t, err)
		require.Equal(t, snapshot.Flat(s), snapshot.Flat(rs))
		// Without the stacks the read is the same but for them.
		ns, err := snapshot.ReadWith(bytes.NewReader(data), "f.pickle", snapshot.ReadOptions{NoStacks: true})
		require.NoError(t, err)
		require.Equal(t, snapshot.Flat(withoutStacks(s)), snapshot.Flat(ns))
		require.Equal(t, snapshot.Flat(ns), snapshot.Flat(rns))
		_ = s.AllocatorSettings.AllocConf()
		rules, err := s.AllocatorSettings.Rules()
		if err != nil {
			rules = snapshot.DefaultRules()
		}
		for _, dev := range s.Devices() {
			st, _ := s.InitialStateWith(dev, rules)
			checkState(t, st)
			_ = st.Allocs()
			// Following the trace forward keeps every segment tiled.
			tr := snapshot.NewTracker(st, rules)
			for _, e := range s.Trace(dev).Entries() {
				_ = tr.Apply(&e)
			}
			checkState(t, tr.State(dev))
		}
	})
}
