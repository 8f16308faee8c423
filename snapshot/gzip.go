package snapshot

import (
	"bufio"
	"io"

	"github.com/klauspost/compress/gzip"
)

// gzipReader decompresses a gzip file as Python's gzip module reads one,
// which PyTorch's users open snapshots with: member after member, the NUL
// bytes that pad a file after a member skipped (CPython's Lib/gzip.py,
// _GzipReader._read_eof: "Gzip files can be padded with zeroes and still
// have archives"), anything else after a member read as the next
// member's header, refused when it is not one. Each member's CRC and
// size are checked at its end.
type gzipReader struct {
	br *bufio.Reader // the compressed input; gzip reads no further than a member's end from it
	z  *gzip.Reader
}

func newGzipReader(r io.Reader) (*gzipReader, error) {
	br := bufio.NewReader(r)
	z, err := gzip.NewReader(br)
	if err != nil {
		return nil, err
	}
	z.Multistream(false)
	return &gzipReader{br: br, z: z}, nil
}

func (g *gzipReader) Read(p []byte) (int, error) {
	for {
		n, err := g.z.Read(p)
		if err != io.EOF {
			return n, err
		}
		if n > 0 {
			return n, nil // the member's end: the next Read looks past it
		}
		// A member's end: skip the padding, then the next member, if any.
		for {
			b, err := g.br.ReadByte()
			if err != nil {
				return 0, err // io.EOF: the file's end
			}
			if b != 0 {
				g.br.UnreadByte()
				break
			}
		}
		if err := g.z.Reset(g.br); err != nil {
			return 0, err
		}
		g.z.Multistream(false)
	}
}

// Close closes the decompressor, not the input.
func (g *gzipReader) Close() error { return g.z.Close() }
