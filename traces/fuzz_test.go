package traces

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fuzz targets check that no input makes a reader panic, that every
// error is a *ParseError, that the events are consistent, and that
// decoding, encoding and decoding again gives the same events (see
// checkDecode).

// FuzzReader fuzzes the native format, through detection, as NewReader
// reads it, and checks that its fast path agrees with the slow one. It is
// seeded with the files of testdata (categories.csv among them) and the
// first lines of each bundled trace, plain and compressed, and with lines
// of every column, category included.
func FuzzReader(f *testing.F) {
	fuzzSeeds(f, "testdata/*.csv")
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
		"op,id,size,category\nalloc,1,5,parameter\nalloc,2,5,Gradient\nfree,1,,parameter\nfree,2,,\nalloc,3,1,bogus\n",
		"category,op,id\n,alloc,1\nunknown,free,1\n",
		"op,id,size,tag,device\nalloc,1,5,warm up,1\nrelease,,,x,1\nfree,1,,\"q\",1\nrelease,7,,,0\nrelease,,5,,0\n",
		"tag,op,id,size\n,alloc,1,5\n,release,,\n,free,1,\n",
		",op,id,size,time_us\n0,alloc,1,4096.0,0\n1,free,1,,1.0\n2,alloc,2,1.5,2\n",
		"op,id,size,\nalloc,1,6000000000000000000,\nalloc,2,6000000000000000000,\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data, newReader)
		for _, lenient := range []bool{false, true} {
			fastSlow(t, "fuzz", data, Options{Lenient: lenient})
		}
	})
}

func FuzzRMMReader(f *testing.F) {
	fuzzSeeds(f, "testdata/rmm/*.log")
	f.Add([]byte("Thread,Time,Action,Pointer,Size,Stream\n1,23:59:59.9,allocate,0x10,5,0x0\n1,00:00:00,free,0x10,5,7\n"))
	open := openerOf(f, rmmFormat)
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, data, open) })
}

func FuzzMiniMallocReader(f *testing.F) {
	fuzzSeeds(f, "testdata/minimalloc/*.csv")
	f.Add([]byte("size,end,start,buffer\n5,3,0,x\n5,0,0,y\n"))
	open := openerOf(f, miniMallocFormat)
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, data, open) })
}

// FuzzDetect checks detection: any input gives a reader, an error wrapping
// ErrNotTrace or a *ParseError, never a panic; plain and gzip input give the
// same format.
func FuzzDetect(f *testing.F) {
	fuzzSeeds(f, "testdata/*.csv", "testdata/rmm/*.log", "testdata/minimalloc/*.csv")
	f.Add([]byte(""))
	f.Add([]byte("\x1f\x8b"))
	for _, s := range []string{"id,size\n1,5\n", "op;id;size\nalloc;1;5\n", "\"op\",\"id\"\n", "# c\nevent\tid\top\n", "operation,id,size\n",
		"PK\x03\x04\x14\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0e\x00\x00\x00archive/data.pkl"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		plain := checkDecode(t, data, newReader)
		if compressed := checkDecode(t, gz(t, string(data)), newReader); plain != "" {
			require.Equal(t, plain, compressed)
		}
	})
}
