package snapshot_test

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// noStacks reads data with and without stacks and requires the same
// snapshot but for the stacks, EmptyCache included.
func noStacks(t *testing.T, data []byte, name string, full *snapshot.Snapshot) {
	t.Helper()
	s, err := snapshot.ReadWith(bytes.NewReader(data), name, snapshot.ReadOptions{NoStacks: true})
	require.NoError(t, err)
	assert.Nil(t, s.Frames)
	assert.Nil(t, s.Stacks)
	require.Equal(t, snapshot.Flat(withoutStacks(full)), snapshot.Flat(s))
}

// withoutStacks returns a copy of full without its stacks, as a read with
// ReadOptions.NoStacks gives it.
func withoutStacks(full *snapshot.Snapshot) *snapshot.Snapshot {
	want := *full
	want.Frames, want.Stacks = nil, nil
	want.Segments = append([]snapshot.Segment(nil), full.Segments...)
	for i := range want.Segments {
		sg := &want.Segments[i]
		sg.Stack = 0
		sg.Blocks = slices.Clone(sg.Blocks)
		for j := range sg.Blocks {
			sg.Blocks[j].Stack = 0
		}
	}
	traces := snapshot.Traces(full)
	for _, tr := range traces {
		for i := range tr {
			tr[i].Stack = 0
		}
	}
	want.SetTraces(traces...)
	return &want
}

// absorbPickle returns a snapshot whose one entry lists its frames as the
// opcodes body does after the frames list's EMPTY_LIST, the frame dict
// being memo entry 0 (BINGET 0 is "h\x00").
func absorbPickle(body string) []byte {
	str := func(s string) string { return "\x8c" + string(rune(len(s))) + s }
	return []byte("\x80\x04}(" + str("segments") + "]" + str("device_traces") + "](](}(" +
		str("action") + str("segment_free") + str("addr") + "K\x01" + str("size") + "K\x02" + str("frames") + "](" +
		"}q\x00(" + str("name") + str("empty_cache") + str("filename") + str("torch/cuda/memory.py") + str("line") + "K\x07ue" +
		"u}(" + str("action") + str("segment_free") + str("addr") + "K\x01" + str("size") + "K\x02" + str("frames") + "]" + body +
		"ueeu.")
}

// TestReadAbsorbedFrames reads frames lists whose memo references the
// decoder takes straight into the list, and those where the pickle does
// something else with them first: each reads as the pickle says.
func TestReadAbsorbedFrames(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		frames     int    // of the second entry
		err        string // or the error
	}{
		{"appends", "(h\x00h\x00j\x00\x00\x00\x00e", 3, ""},
		{"two batches", "(h\x00e(h\x00h\x00e", 3, ""},
		{"pop mark", "(h\x00h\x001(h\x00e", 1, ""},
		{"pop", "(h\x00h\x000e", 1, ""},
		{"dup", "(h\x00h\x002e", 3, ""},
		{"memo put", "(h\x00h\x00q\x01h\x01e", 3, ""},
		{"append after", "(h\x00h\x00ea", 0, "APPEND into a string"},
		{"tuple", "(h\x00h\x00ta", 0, "device_traces[0][1].frames[0]: not a dict but a tuple"},
		{"an int after", "(h\x00K\x01e", 0, "device_traces[0][1].frames[1]: not a dict but an integer"},
		{"stop", "(h\x00h\x00.", 0, "STOP with 23 values on the stack"},
		{"additems", "(h\x00\x90", 0, "ADDITEMS into a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := absorbPickle(tc.body)
			for _, o := range []snapshot.ReadOptions{{}, {NoStacks: true}} {
				s, err := snapshot.ReadWith(bytes.NewReader(data), "a.pickle", o)
				if tc.err != "" {
					require.Error(t, err)
					assert.Contains(t, err.Error(), tc.err)
					continue
				}
				require.NoError(t, err)
				tr := s.Trace(0).Entries()
				require.Len(t, tr, 2)
				assert.True(t, tr[0].EmptyCache)
				assert.Equal(t, tc.frames > 0, tr[1].EmptyCache)
				if !o.NoStacks {
					assert.Len(t, s.StackFrames(tr[1].Stack), tc.frames)
				}
			}
		})
	}
}

// TestReadInPieces reads snapshots through readers that return a byte or
// a few at a time, so that runs of memo references, integers and frames
// stop at every place in the decoder's buffer: the snapshot is the same.
func TestReadInPieces(t *testing.T) {
	var g bytes.Buffer
	_, err := genSnapshot(&g, genOptions{Devices: 2, Events: 300, Slots: 4, Frames: 300, Stacks: 7, Pools: true, Seed: 4})
	require.NoError(t, err)
	for _, data := range [][]byte{g.Bytes(), pk.Encode(pk.TwoDevices(true), pk.Options{Proto: 2}),
		pk.Encode(pk.TwoDevices(false), pk.Options{Proto: 4, Memo: true, AllLong: true}), absorbPickle("(h\x00h\x00K\x01\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01N\x88\x89e")} {
		want, wantErr := snapshot.Read(bytes.NewReader(data), "p.pickle")
		for _, piece := range []func(io.Reader) io.Reader{iotest.OneByteReader, iotest.HalfReader} {
			for _, o := range []snapshot.ReadOptions{{}, {NoStacks: true}} {
				got, err := snapshot.ReadWith(piece(bytes.NewReader(data)), "p.pickle", o)
				if wantErr != nil {
					require.EqualError(t, err, wantErr.Error())
					continue
				}
				require.NoError(t, err)
				if !o.NoStacks {
					require.Equal(t, snapshot.Flat(want), snapshot.Flat(got))
				} else {
					require.Equal(t, snapshot.Flat(withoutStacks(want)), snapshot.Flat(got))
				}
			}
		}
	}
}

// TestReadRepeatedFrameRuns reads runs of frames that repeat, taken from
// the runs read before from the first memo entry on: runs that start alike
// and end apart (one on the empty-cache path, one not), a run cut by the
// pickle's 64 KiB FRAME, and a run followed by more references. Each
// entry reads as the pickle says, with and without the stacks.
func TestReadRepeatedFrameRuns(t *testing.T) {
	str := func(s string) string { return "\x8c" + string(rune(len(s))) + s }
	plain := strings.Repeat("h\x01", 8)
	runs := []struct {
		body   string
		frames int
		ec     bool
	}{
		{"(" + plain + "h\x00e", 9, true},
		{"(" + plain + "h\x01e", 9, false},
		{"(" + plain + "h\x00e", 9, true},
		{"(" + plain + "h\x00e(h\x01e", 10, true},
		{"(" + plain + "\x95\x00\x00\x00\x00\x00\x00\x00\x00h\x00e", 9, true},
		{"(" + plain + "h\x01e", 9, false},
		{"(" + plain + "h\x01h\x00e", 10, true},
		{"(" + plain + "h\x00e", 9, true},
	}
	entry := func(frames string) string {
		return "}(" + str("action") + str("segment_free") + str("addr") + "K\x01" + str("size") + "K\x02" + str("frames") + "]" + frames + "u"
	}
	p := "\x80\x04}(" + str("segments") + "]" + str("device_traces") + "](](" +
		entry("(}q\x00("+str("name")+str("empty_cache")+str("filename")+str("torch/cuda/memory.py")+str("line")+"K\x07u"+
			"}q\x01("+str("name")+str("f")+str("filename")+str("m.py")+str("line")+"K\x08ue")
	for _, r := range runs {
		p += entry(r.body)
	}
	// Memo entry 1 stored over with another frame: a run read before
	// refers to it.
	p += entry("(}q\x01(" + str("name") + str("g") + str("filename") + str("n.py") + str("line") + "K\x09ue")
	p += entry(runs[0].body)
	p += "eeu."
	for _, o := range []snapshot.ReadOptions{{}, {NoStacks: true}} {
		s, err := snapshot.ReadWith(bytes.NewReader([]byte(p)), "runs.pickle", snapshot.RunsFromStart(o))
		require.NoError(t, err)
		tr := s.Trace(0).Entries()
		require.Len(t, tr, len(runs)+3)
		for i, r := range runs {
			e := tr[i+1]
			assert.Equal(t, r.ec, e.EmptyCache, "entry %d", i+1)
			if !o.NoStacks {
				assert.Len(t, s.StackFrames(e.Stack), r.frames, "entry %d", i+1)
			}
		}
		last := tr[len(tr)-1]
		assert.True(t, last.EmptyCache)
		if !o.NoStacks {
			fr := s.StackFrames(last.Stack)
			require.Len(t, fr, 9)
			assert.Equal(t, "g", fr[0].Name)
			assert.Equal(t, "empty_cache", fr[8].Name)
		}
	}
}
