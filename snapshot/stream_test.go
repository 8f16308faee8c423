package snapshot_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pk "github.com/gpualloc/gpualloc/internal/pickletest"
	"github.com/gpualloc/gpualloc/snapshot"
)

// withoutEmptyCache returns a copy of s without the EmptyCache marks.
func withoutEmptyCache(s *snapshot.Snapshot) *snapshot.Snapshot {
	traces := snapshot.Traces(s)
	for _, t := range traces {
		for i := range t {
			t[i].EmptyCache = false
		}
	}
	c := *s
	c.SetTraces(traces...)
	return &c
}

// sameAsOgrek reads data with Read and with the decoder it replaced and
// requires the same snapshot, entry for entry.
func sameAsOgrek(t *testing.T, data []byte, name string) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.Read(bytes.NewReader(data), name)
	require.NoError(t, err)
	old, err := snapshot.ReadOgrek(bytes.NewReader(data), name)
	require.NoError(t, err)
	// og-rek's memo keeps a list as it was when memoized, empty, so that
	// the frames lists that PyTorch's C++ pickler shares between entries
	// are empty there: the stacks, and the empty-cache marks told from
	// them, are not compared (FuzzReadOgrek compares them on pickles that
	// share no list).
	got, want := withoutEmptyCache(withoutStacks(s)), withoutEmptyCache(withoutStacks(old))
	wt, gt := snapshot.Traces(want), snapshot.Traces(got)
	require.Equal(t, len(wt), len(gt))
	for d := range wt {
		require.Equal(t, len(wt[d]), len(gt[d]), "device %d", d)
		for i := range wt[d] {
			require.Equal(t, wt[d][i], gt[d][i], "device_traces[%d][%d]", d, i)
		}
	}
	require.Equal(t, snapshot.Flat(want), snapshot.Flat(got))
	noStacks(t, data, name, s)
	held(t, data, name, s)
	return s
}

func TestReadSameAsOgrekShared(t *testing.T) {
	pk.ForEachShared(t, sharedDir, func(t *testing.T, name string, data []byte) {
		s := sameAsOgrek(t, data, name)
		if len(s.Trace(0).Entries()) > 0 {
			require.NotEmpty(t, s.Frames, "the real files record frames")
			fr := s.StackFrames(s.Trace(0).Entries()[0].Stack)
			require.NotEmpty(t, fr)
			assert.NotEmpty(t, fr[0].Name)
		}
		// Written back and read again, frames and all.
		var b bytes.Buffer
		require.NoError(t, snapshot.Write(&b, s, snapshot.WriteOptions{}))
		again, err := snapshot.Read(&b, name)
		require.NoError(t, err)
		for d := range s.NumTraces() {
			for i, e := range s.Trace(d).All() {
				require.Equal(t, s.StackFrames(e.Stack), again.StackFrames(again.Trace(d).At(i).Stack))
			}
		}
	})
}

func TestReadSameAsOgrekGenerated(t *testing.T) {
	for _, o := range []genOptions{
		{Devices: 1, Events: 3000, Slots: 8, Frames: 50, Stacks: 20, Seed: 1},
		{Devices: 3, Events: 2500, Slots: 5, Frames: 300, Stacks: 40, Pools: true, Seed: 2},
		{Devices: 2, Events: 0, Slots: 0, Frames: 1, Stacks: 1, Seed: 3},
		// Past the decoder's first memo page and trace chunk.
		{Devices: 1, Events: 40_000, Slots: 6, Frames: 20, Stacks: 5, Seed: 6},
		// Past the memo entries from which runs of frames read before are
		// looked up (runsFrom).
		{Devices: 1, Events: 40_000, Slots: 6, Frames: 60, Stacks: 30, Seed: 7},
	} {
		var b bytes.Buffer
		_, err := genSnapshot(&b, o)
		require.NoError(t, err)
		s := sameAsOgrek(t, b.Bytes(), "gen.pickle")
		require.Equal(t, o.Devices, s.NumTraces())
		if o.Events > 0 {
			assert.LessOrEqual(t, len(s.Stacks), o.Stacks+1)
			for _, e := range s.Trace(0).Entries() {
				n := len(s.StackFrames(e.Stack))
				require.True(t, n >= 40 && n <= 90, "%d frames", n)
			}
		}
		for _, sg := range s.Segments {
			if slot := (sg.Address & (1<<36 - 1)) / (20 << 20); o.Pools && slot%2 == 1 {
				assert.Equal(t, snapshot.PoolID{1, 1}, sg.Pool)
			} else {
				assert.Equal(t, snapshot.PoolID{}, sg.Pool)
			}
		}
		for _, dev := range s.Devices() {
			st, err := s.InitialState(dev)
			require.NoError(t, err)
			checkState(t, st)
		}
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// l = [alloc, free]; pickle.dumps({"segments": [], "device_traces":
// [l, l, l]}, 4): the list once, then two memo references.
const sharedListHex = "80049596000000000000007d94288c087365676d656e7473945d948c0d6465766963655f747261636573945d94285d94287d94288c06616374696f6e948c05616c6c6f63948c0461646472944d00108c0473697a65944d00028c0673747265616d944b008c066672616d6573945d94757d942868078c0e667265655f636f6d706c657465649468094d0010680a4d0002680b4b00680c5d9475656805680565752e"

// pickle.dumps({"segments": [], "external_annotations": [OrderedDict()]}, 4).
const codeHex = "8004954d000000000000007d94288c087365676d656e7473945d948c1465787465726e616c5f616e6e6f746174696f6e73945d948c0b636f6c6c656374696f6e73948c0b4f7264657265644469637494939429529461752e"

func TestReadSharedList(t *testing.T) {
	data := mustHex(sharedListHex)
	s, err := snapshot.Read(bytes.NewReader(data), "l.pickle")
	require.NoError(t, err)
	require.Equal(t, 3, s.NumTraces())
	for d := range 3 {
		assert.Equal(t, []snapshot.TraceEntry{
			{Action: snapshot.Alloc, Addr: 4096, Size: 512, TimeUS: snapshot.NoTime},
			{Action: snapshot.FreeCompleted, Addr: 4096, Size: 512, TimeUS: snapshot.NoTime},
		}, s.Trace(d).Entries(), "device %d", d)
	}
	held(t, data, "l.pickle", s)
}

func TestReadRefusesCode(t *testing.T) {
	for _, tc := range []struct{ name, hex, op string }{
		{"ignored key", codeHex, "STACK_GLOBAL"},
		// {"segments": [], "allocator_settings": {"x": OrderedDict()}}, protocol 2.
		{"settings", "80027d71002858080000007365676d656e747371015d71025812000000616c6c6f6361746f725f73657474696e677371037d7104580100000078710563636f6c6c656374696f6e730a4f726465726564446963740a71062952710773752e", "GLOBAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := snapshot.Read(bytes.NewReader(mustHex(tc.hex)), "c.pickle")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "opcode "+tc.op+": the pickle names Python code")
			assert.Contains(t, err.Error(), "at byte ")
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestReadOOMWithoutSize(t *testing.T) {
	data := snap(pk.Entry("alloc", a0, 5, 0, 1), pk.Dict{{K: "action", V: "oom"}, {K: "device_free", V: 100}})
	_, err := snapshot.Read(bytes.NewReader(data), "o.pickle")
	require.EqualError(t, err, "o.pickle: device_traces[0][1].size: missing: an oom entry records the size that failed")
}

func TestReadTruncatedNamesOffset(t *testing.T) {
	var b bytes.Buffer
	_, err := genSnapshot(&b, genOptions{Devices: 1, Events: 2000, Slots: 4, Frames: 30, Stacks: 5, Seed: 4})
	require.NoError(t, err)
	for _, n := range []int{2, 100, b.Len() / 2, b.Len() - 1} {
		_, err := snapshot.Read(bytes.NewReader(b.Bytes()[:n]), "t.pickle")
		require.Error(t, err, "cut at %d", n)
		assert.Regexp(t, `^t\.pickle: not a PyTorch snapshot \(bad pickle: at byte \d+: truncated`, err.Error())
		assert.True(t, errors.Is(err, snapshot.ErrNotSnapshot))
	}
	damaged := bytes.Clone(b.Bytes())
	damaged[5000] = 0x00
	_, err = snapshot.Read(bytes.NewReader(damaged), "d.pickle")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at byte ")
}

func TestReadGzip(t *testing.T) {
	data := pk.Encode(pk.TwoDevices(true), pk.Options{Proto: 4, Memo: true})
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(data)
	zw.Close()
	s, err := snapshot.Read(&z, "t.pickle.gz")
	require.NoError(t, err)
	assert.Equal(t, snapshot.Flat(wantTwoDevices(true)), snapshot.Flat(s))
}

func TestReadGzipBomb(t *testing.T) {
	// A pickle's first bytes, then 256 MiB of zeros: refused at the first
	// zero, without reading the rest.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte{0x80, 4, '}'})
	zeros := make([]byte, 1<<20)
	for range 256 {
		zw.Write(zeros)
	}
	zw.Close()
	size := z.Len()
	_, err := snapshot.Read(&z, "z.pickle.gz")
	require.ErrorContains(t, err, "z.pickle.gz: not a PyTorch snapshot (bad pickle: at byte 3: opcode 0x00")
	assert.Less(t, size-z.Len(), 1<<20, "read only the start")
}

// bomb returns a pickle whose segments list holds one segment of blocks
// blocks, then refs memo references to it.
func bomb(blocks, refs int) []byte {
	var b []byte
	b = append(b, 0x80, 4, '}', 0x94, '(', 0x8c, 8)
	b = append(b, "segments"...)
	b = append(b, ']', 0x94, '(', '}', 0x94, '(', 0x8c, 10)
	b = append(b, "total_size"...)
	b = append(b, 'K', 0, 0x8c, 7)
	b = append(b, "address"...)
	b = append(b, 'K', 0, 0x8c, 6)
	b = append(b, "blocks"...)
	b = append(b, ']', 0x94)
	for range blocks {
		b = append(b, '}', 0x8c, 4)
		b = append(b, "size"...)
		b = append(b, 'K', 0, 's', 'a')
	}
	b = append(b, 'u')
	for range refs {
		b = append(b, 'h', 2) // the segment dict
	}
	return append(b, 'e', 'u', '.')
}

func TestReadReferenceBomb(t *testing.T) {
	s, err := snapshot.Read(bytes.NewReader(bomb(10, 5)), "b.pickle")
	require.NoError(t, err, "a few repeats are read")
	require.Len(t, s.Segments, 6)
	assert.Len(t, s.Segments[5].Blocks, 10)
	_, err = snapshot.Read(bytes.NewReader(bomb(10000, 1000)), "b.pickle")
	require.ErrorContains(t, err, "b.pickle: segments[")
	require.ErrorContains(t, err, "repeats more than 1048576 entries, blocks or segments")
}

// TestGenSnapshotPython checks the generator against CPython's unpickler,
// where python3 is installed.
func TestGenSnapshotPython(t *testing.T) {
	py := pythonPath(t)
	path := filepath.Join(t.TempDir(), "g.pickle")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = genSnapshot(f, genOptions{Devices: 2, Events: 5000, Slots: 6, Frames: 100, Stacks: 10, Seed: 5})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	out := runPython(t, py, "import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); print(sum(map(len,d['device_traces'])), len(d['device_traces'][0][7]['frames']))", path)
	s, err := snapshot.Read(mustOpen(t, path), path)
	require.NoError(t, err)
	want := strings.Fields(out)
	require.Len(t, want, 2)
	assert.Equal(t, want[0], itoa(len(s.Trace(0).Entries())+len(s.Trace(1).Entries())))
	assert.Equal(t, want[1], itoa(len(s.StackFrames(s.Trace(0).Entries()[7].Stack))))
}

func TestReadClaimedLengthCostsNoMemory(t *testing.T) {
	// A string that claims 1 GiB in a file of a few bytes: refused as
	// truncated, without a buffer of the claimed size.
	data := []byte{0x80, 4, 0x8d, 0, 0, 0, 0x40, 0, 0, 0, 0, 'x'}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := snapshot.Read(bytes.NewReader(data), "s.pickle")
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "s.pickle: not a PyTorch snapshot (bad pickle: at byte 2: truncated")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20))
}

func TestReadMemoIndexesOutOfOrder(t *testing.T) {
	// LONG_BINPUT at far indexes, then GETs of them: the memo holds what
	// the PUTs stored, no more.
	data := []byte{0x80, 2, '}', 'r', 0xff, 0xff, 0xff, 0x0f, '(', 0x8c, 8}
	data = append(data, "segments"...)
	data = append(data, ']', 'r', 0xfe, 0xff, 0xff, 0x0f, 0x8c, 13)
	data = append(data, "device_traces"...)
	data = append(data, 'j', 0xfe, 0xff, 0xff, 0x0f, 'u', '.')
	s, err := snapshot.Read(bytes.NewReader(data), "m.pickle")
	require.NoError(t, err)
	assert.Empty(t, s.Segments)
	_, err = snapshot.Read(bytes.NewReader(append(data[:len(data)-7:len(data)-7], 'j', 0xfd, 0xff, 0xff, 0x0f, 'u', '.')), "m.pickle")
	require.ErrorContains(t, err, "memo GET 268435453 of an entry never stored")
}

func TestReadEmptyCacheAndPool(t *testing.T) {
	frames := func(names ...string) []any {
		var l []any
		for _, n := range names {
			l = append(l, pk.Dict{{K: "name", V: n}, {K: "filename", V: "f.cpp"}, {K: "line", V: 0}})
		}
		return l
	}
	entry := func(action string, names ...string) pk.Dict {
		return pk.Dict{{K: "action", V: action}, {K: "addr", V: a0}, {K: "size", V: 2 << 20}, {K: "stream", V: 0}, {K: "frames", V: frames(names...)}}
	}
	seg := pk.Segment(0, a0, 0, "small")
	for i := range seg {
		if seg[i].K == "segment_pool_id" {
			seg[i].V = [2]any{3, 7}
		}
	}
	data := pk.Encode(pk.Snapshot([]any{seg}, [][]any{{
		entry("segment_free", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_cached_blocks()",
			"c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache()", "empty_cache"),
		entry("segment_free", "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc()"),
		entry("segment_free", "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache()"),
	}}, nil), pk.Options{Proto: 4, Memo: true})
	s, err := snapshot.Read(bytes.NewReader(data), "e.pickle")
	require.NoError(t, err)
	var got []bool
	for _, e := range s.Trace(0).Entries() {
		got = append(got, e.EmptyCache)
	}
	assert.Equal(t, []bool{true, false, true}, got)
	noStacks(t, data, "e.pickle", s)
	assert.Equal(t, snapshot.PoolID{3, 7}, s.Segments[0].Pool)
	assert.Len(t, s.StackFrames(s.Trace(0).Entries()[0].Stack), 3)
}

// TestReadText reads strings as Python's unpickler decodes them: a
// BINUNICODE that is not UTF-8, or a Python 2 BINSTRING that is not
// ASCII, makes the file one that Python refuses, and so does Read, naming
// the byte; a surrogate, which Python lets through, is read.
func TestReadText(t *testing.T) {
	frame := func(name string) []byte {
		return snap(pk.Dict{{K: "action", V: "alloc"}, {K: "addr", V: a0}, {K: "size", V: 5},
			{K: "frames", V: []any{pk.Dict{{K: "name", V: name}, {K: "filename", V: "x.py"}, {K: "line", V: 1}}}}})
	}
	for _, bad := range []string{"f\xff", "f\xc3", "\xe9t\xe9", "\xed\xa0"} {
		data := frame(bad)
		_, err := snapshot.Read(bytes.NewReader(data), "u.pickle")
		at := bytes.Index(data, []byte(bad)) // the string's first byte
		i := strings.IndexFunc(bad, func(r rune) bool { return r == utf8.RuneError })
		require.EqualError(t, err, fmt.Sprintf("u.pickle: not a PyTorch snapshot (bad pickle: at byte %d: byte 0x%02x of the string at byte %d is not UTF-8: Python refuses the file)",
			at+i, bad[i], at-2), "%q", bad)
	}
	s, err := snapshot.Read(bytes.NewReader(frame("f\xed\xa0\x80")), "u.pickle")
	require.NoError(t, err)
	assert.Equal(t, "f\xed\xa0\x80", s.Frames[0].Name)

	str := []byte("\x80\x02}(X\x08\x00\x00\x00segments]X\x01\x00\x00\x00xU\x02a\xe9u.")
	_, err = snapshot.Read(bytes.NewReader(str), "u.pickle")
	at := bytes.IndexByte(str, 0xe9)
	require.ErrorContains(t, err, fmt.Sprintf("at byte %d: byte 0xe9 of the string at byte %d is not ASCII, as Python 3 reads a string of Python 2", at, at-3))
	str[at] = 'b'
	_, err = snapshot.Read(bytes.NewReader(str), "u.pickle")
	require.NoError(t, err)
}

// TestReadGzipEnd reads a gzip stream to its end, where its CRC and size
// are, on a short file and on one read ahead on a goroutine: a damaged
// trailer or bytes after the stream are refused; another member, or
// bytes that the pickle leaves after its STOP, are not.
func TestReadGzipEnd(t *testing.T) {
	var g bytes.Buffer
	_, err := genSnapshot(&g, genOptions{Devices: 1, Events: 2000, Slots: 8, Frames: 50, Stacks: 20, Seed: 3})
	require.NoError(t, err)
	zip := func(b []byte) []byte {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(b)
		zw.Close()
		return z.Bytes()
	}
	flip := func(b []byte, back int) []byte {
		b = bytes.Clone(b)
		b[len(b)-back] ^= 1
		return b
	}
	for _, data := range [][]byte{snap(pk.Entry("alloc", a0, 5, 0, 1)), g.Bytes()} {
		z := zip(data)
		for _, tc := range []struct {
			name string
			in   []byte
			msg  string
		}{
			{"whole", z, ""},
			{"two members", append(bytes.Clone(z), zip([]byte("more"))...), ""},
			// Python's gzip module skips the NUL bytes that pad a file
			// after a member, and reads what follows them as a member.
			{"padded", append(bytes.Clone(z), make([]byte, 1000)...), ""},
			{"padded between members", append(append(bytes.Clone(z), make([]byte, 3)...), zip([]byte("more"))...), ""},
			{"garbage after padding", append(append(bytes.Clone(z), make([]byte, 3)...), "ab"...), "x.pickle: read: the end of the gzip stream: unexpected EOF"},
			{"padded, then garbage", append(append(bytes.Clone(z), make([]byte, 3)...), "garbage after the padding"...), "x.pickle: read: the end of the gzip stream: gzip: invalid header"},
			{"after STOP", zip(append(bytes.Clone(data), "more"...)), ""},
			{"CRC", flip(z, 8), "x.pickle: read: the end of the gzip stream: gzip: invalid checksum"},
			{"size", flip(z, 1), "x.pickle: read: the end of the gzip stream: gzip: invalid checksum"},
			{"garbage after", append(bytes.Clone(z), "garbage after the stream"...), "x.pickle: read: the end of the gzip stream: gzip: invalid header"},
		} {
			for _, ahead := range []bool{false, true} {
				var o snapshot.ReadOptions
				if ahead {
					o = snapshot.Ahead(o)
				}
				_, err := snapshot.ReadWith(bytes.NewReader(tc.in), "x.pickle", o)
				if tc.msg == "" {
					require.NoError(t, err, "%s of %d bytes, ahead %v", tc.name, len(data), ahead)
				} else {
					require.EqualError(t, err, tc.msg, "%s of %d bytes, ahead %v", tc.name, len(data), ahead)
				}
			}
		}
	}
}
