package pickle

import (
	"io"
	"sync"
)

// A prefetcher reads the input of a long read on a goroutine of its own,
// a few chunks ahead of the decoder, so that the read's system calls (or
// a gzip stream's decompression) run beside the decoding rather than in
// turn with it. The decoder takes each chunk's buffer as its own
// (Input.take), copying only the bytes of the last one it had not read
// yet into the headroom in front: a byte of the input is copied once, by
// the kernel or the decompressor, as it is without one.
//
// It holds prefetchChunks buffers of headroom+chunkSize bytes (3.2 MiB)
// whatever the input's length, and starts only once PrefetchFrom bytes
// have been read, so that a short input costs no goroutine nor buffers.
type prefetcher struct {
	full chan chunk  // chunks read, in order
	free chan []byte // buffers for the goroutine to fill
	done chan struct{}
	wg   sync.WaitGroup
}

// A chunk is the bytes read into a buffer, at buf[headroom:], and the
// reader's error after them, if any.
type chunk struct {
	buf []byte
	n   int
	err error
}

const (
	chunkSize      = 1 << 20
	headroom       = 64 << 10
	prefetchChunks = 3
)

// PrefetchFrom is the bytes read from which an Input starts a prefetcher
// by default.
const PrefetchFrom = 8 << 20

// startPrefetch starts reading r on a goroutine. The prefetcher must be
// stopped, which waits for the goroutine to return.
func startPrefetch(r io.Reader) *prefetcher {
	p := &prefetcher{full: make(chan chunk, prefetchChunks), free: make(chan []byte, prefetchChunks), done: make(chan struct{})}
	for range prefetchChunks {
		p.free <- make([]byte, headroom+chunkSize)
	}
	p.wg.Go(func() {
		for {
			var buf []byte
			select {
			case buf = <-p.free:
			case <-p.done:
				return
			}
			c := chunk{buf: buf}
			for c.n < chunkSize && c.err == nil {
				var m int
				m, c.err = r.Read(buf[headroom+c.n:])
				c.n += m
				select {
				case <-p.done: // stopped: one read, not a whole chunk, is waited for
					return
				default:
				}
			}
			select {
			case p.full <- c:
			case <-p.done:
				return
			}
			if c.err != nil {
				return
			}
		}
	})
	return p
}

// stop ends the reading and waits for its goroutine: for the one call of
// Read in progress, if any, to return.
func (p *prefetcher) stop() {
	close(p.done)
	p.wg.Wait()
}

// take makes the next chunk the input's buffer, after the bytes of the
// buffer not read yet; it waits for the chunk, which always comes: the
// prefetcher stops after a chunk with an error, which ends the input. The
// buffer given up goes back to the prefetcher. Unread bytes beyond the headroom
// (an argument longer than 64 KiB that straddles chunks) go with the
// chunk's into a buffer of their own, grown as append grows it.
func (in *Input) take() {
	c := <-in.pre.full
	left := in.Buf[in.Pos:in.End]
	var nb []byte
	switch {
	case len(left) <= headroom:
		start := headroom - len(left)
		copy(c.buf[start:], left)
		nb = c.buf[start : headroom+c.n]
		in.giveBack()
		in.chunk = c.buf
	case in.chunk == nil:
		// left is a buffer of its own already: append to it.
		nb = append(left, c.buf[headroom:headroom+c.n]...)
		in.pre.free <- c.buf
	default:
		nb = append(append(make([]byte, 0, 2*(len(left)+c.n)), left...), c.buf[headroom:headroom+c.n]...)
		in.giveBack()
		in.pre.free <- c.buf
	}
	in.base += int64(in.Pos)
	in.Buf, in.Pos, in.End = nb, 0, len(nb)
	if c.err != nil {
		in.Err = c.err
	}
}

// giveBack returns the chunk buffer that the input reads from, if it
// does, to the prefetcher.
func (in *Input) giveBack() {
	if in.chunk != nil {
		in.pre.free <- in.chunk
		in.chunk = nil
	}
}

// Stop stops the input's prefetcher, if it has one: its goroutine has
// returned when Stop does, so that what it reads may be closed.
func (in *Input) Stop() {
	if in.pre != nil {
		in.pre.stop()
	}
}
