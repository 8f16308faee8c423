package traces

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzReader checks that no input makes a reader panic, that every error is
// a *ParseError, that the events are consistent, and that decoding, encoding
// and decoding again gives the same events. It is seeded with the files of
// testdata and the first lines of each bundled trace, plain and compressed.
func FuzzReader(f *testing.F) {
	files, err := filepath.Glob("testdata/*.csv")
	require.NoError(f, err)
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(data)
	}
	for _, b := range Bundled() {
		zr, err := gzip.NewReader(bytes.NewReader(b.data))
		require.NoError(f, err)
		head := make([]byte, 4096)
		n, err := io.ReadFull(zr, head)
		require.NoError(f, err)
		head = head[:bytes.LastIndexByte(head[:n], '\n')+1]
		f.Add(head)
		f.Add(gz(f, string(head)))
	}
	for _, s := range []string{
		"op,id,size\nalloc,0x10,5\nalloc,16,5\nalloc,010,5\nfree,0x10,5\n",
		"id,op,size,time_us\n#c\nx,alloc,1,1\r\nx,free,,2\n y ,alloc, 3 ,2\n",
		"op,id,size,stream,device\nalloc,1,1,0x7,3\nfree,1,,7,3\n",
		"op,id,size\nalloc,1",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, lenient := range []bool{false, true} {
			r, err := NewReader(bytes.NewReader(data), "fuzz", Options{Lenient: lenient})
			if err != nil {
				var pe *ParseError
				require.True(t, errors.As(err, &pe), "%T %v", err, err)
				continue
			}
			var evs []Event
			live := map[int32]Event{}
			for r.Scan() {
				ev := r.Event()
				require.Less(t, int(ev.Slot), r.Slots())
				if ev.Op == OpAlloc {
					require.Positive(t, ev.Size)
					_, taken := live[ev.Slot]
					require.False(t, taken, "slot %d of a live allocation given again", ev.Slot)
					live[ev.Slot] = ev
				} else {
					a, ok := live[ev.Slot]
					require.True(t, ok)
					require.Equal(t, a.ID, ev.ID)
					require.Equal(t, a.Size, ev.Size)
					delete(live, ev.Slot)
				}
				evs = append(evs, ev)
			}
			if err := r.Err(); err != nil {
				var pe *ParseError
				require.True(t, errors.As(err, &pe), "%T %v", err, err)
			}
			require.Equal(t, len(live), r.Live())
			require.Equal(t, evs, roundTrip(t, evs, r.Columns()))

			// The fast path agrees with the slow one.
			slow, err := NewReader(bytes.NewReader(data), "fuzz", Options{Lenient: lenient})
			require.NoError(t, err)
			slow.slowOnly = true
			var slowEvs []Event
			for slow.Scan() {
				slowEvs = append(slowEvs, slow.Event())
			}
			require.Equal(t, evs, slowEvs)
			require.Equal(t, r.Err(), slow.Err())
			require.Equal(t, r.Skipped(), slow.Skipped())
			require.Equal(t, r.FirstSkipped(), slow.FirstSkipped())
		}
	})
}
