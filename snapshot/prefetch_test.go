package snapshot_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/snapshot"
)

// A read that reads ahead on a goroutine, from its first byte on, gives
// what a read in turn gives: the same snapshot, and the same errors at the
// same byte offsets, plain and gzip, through readers that return a byte
// at a time or fail.
func TestPrefetchSameRead(t *testing.T) {
	var g bytes.Buffer
	_, err := genSnapshot(&g, genOptions{Devices: 2, Events: 30_000, Slots: 6, Frames: 60, Stacks: 30, Pools: true, Seed: 11})
	require.NoError(t, err)
	data := g.Bytes()
	require.Greater(t, len(data), 3<<20, "more than a few chunks")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, err = zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())

	read := func(r io.Reader, o snapshot.ReadOptions) (*snapshot.Snapshot, error) {
		return snapshot.ReadWith(r, "p.pickle", o)
	}
	inputs := map[string]func() io.Reader{
		"plain":     func() io.Reader { return bytes.NewReader(data) },
		"gzip":      func() io.Reader { return bytes.NewReader(z.Bytes()) },
		"half":      func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
		"truncated": func() io.Reader { return bytes.NewReader(data[:len(data)*2/3]) },
		"damaged": func() io.Reader {
			d := bytes.Clone(data)
			d[len(d)/2] = 0xff // no opcode
			return bytes.NewReader(d)
		},
		"failing": func() io.Reader {
			return io.MultiReader(bytes.NewReader(data[:len(data)/2]), iotest.ErrReader(io.ErrClosedPipe))
		},
	}
	for name, in := range inputs {
		for _, o := range []snapshot.ReadOptions{{}, {NoStacks: true}} {
			want, wantErr := read(in(), o)
			got, gotErr := read(in(), snapshot.Ahead(o))
			bad := name == "truncated" || name == "damaged" || name == "failing"
			require.Equal(t, bad, wantErr != nil, "%s: %v", name, wantErr)
			if wantErr != nil {
				require.Error(t, gotErr, name)
				assert.Equal(t, wantErr.Error(), gotErr.Error(), name)
				continue
			}
			require.NoError(t, gotErr, name)
			require.Equal(t, snapshot.Flat(want), snapshot.Flat(got), name)
		}
	}
}

// A gzip input that fails midway, in its pickle or its compressed
// stream, fails the read with the error, and the goroutine that reads it
// ahead stops before the gzip reader that it reads from is closed (run
// with -race: in "stalled", the decoder fails while the goroutine waits
// in the gzip reader for input that then fails).
func TestPrefetchGzipFailsMidway(t *testing.T) {
	var g bytes.Buffer
	_, err := genSnapshot(&g, genOptions{Devices: 1, Events: 30_000, Slots: 6, Frames: 60, Stacks: 30, Seed: 17})
	require.NoError(t, err)
	data := g.Bytes()
	// Damaged a quarter of the way, where an opcode stands.
	var damaged []byte
	for at := len(data) / 4; damaged == nil; at++ {
		d := bytes.Clone(data)
		d[at] = 0xff
		if _, err := snapshot.Read(bytes.NewReader(d), "p.pickle"); err != nil {
			damaged = d
		}
	}
	gz := func(b []byte) []byte {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, err := zw.Write(b)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		return z.Bytes()
	}
	zd := gz(damaged)
	cut := gz(data)
	cut = append(bytes.Clone(cut[:len(cut)/2]), make([]byte, 4096)...) // the deflate stream broken
	for name, in := range map[string]func() io.Reader{
		"pickle": func() io.Reader { return bytes.NewReader(zd) },
		"stream": func() io.Reader { return bytes.NewReader(cut) },
		"stalled": func() io.Reader {
			return io.MultiReader(bytes.NewReader(zd[:len(zd)/2]), stalled{time.Second})
		},
	} {
		_, err := snapshot.ReadWith(in(), "p.pickle.gz", snapshot.Ahead(snapshot.ReadOptions{NoStacks: true}))
		var se *snapshot.Error
		require.ErrorAs(t, err, &se, name)
		assert.Equal(t, "p.pickle.gz", se.Name, name)
		assert.Contains(t, err.Error(), "bad pickle", name)
	}
}

// stalled is a reader that waits, then fails.
type stalled struct{ wait time.Duration }

func (s stalled) Read([]byte) (int, error) {
	time.Sleep(s.wait)
	return 0, io.ErrClosedPipe
}
