package cli

import (
	"io"
	"sync"

	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// A stream is one decoding of a trace too long to hold, which the replays
// that run at once read together: a goroutine decodes the trace into
// chunks, each replay reads them in turn, and a chunk is dropped once every
// replay reading the stream is past it. The decoder stays at most
// streamWindow chunks ahead of the slowest replay, so memory is the window
// whatever the trace's length. A replay joins a stream while the stream's
// first chunk is still held; one that starts later (a sweep with more
// variants than -j) starts a stream of its own, which decodes the file
// again. The first stream of a trace goes on from the decoding that found
// the trace too long to hold, with the chunks it had decoded: no event is
// decoded twice for the replays that start together.
type stream struct {
	d   *decoded
	src traces.Reader
	cls io.Closer // closes src
	rmu sync.Mutex

	mu      sync.Mutex
	cond    *sync.Cond
	chunks  [][]traces.Event // the chunks held: first, first+1, ...
	first   int              // the stream index of chunks[0]
	n       int              // the chunks decoded
	done    bool             // the decoding is over: err says why, nil at the end
	err     error
	stopped bool // every replay of the trace is done: the decoder stops
	readers map[*streamReader]struct{}
	skipped int64

	finished chan struct{} // closed when the decoder has returned
}

// streamWindow is the most chunks a stream holds ahead of its slowest
// replay: 16 chunks, 48 MiB.
var streamWindow = 16

// newStream starts the decoding of src, of which chunks (full ones) were
// decoded already, and returns the stream; cls closes src.
func newStream(d *decoded, src traces.Reader, cls io.Closer, chunks [][]traces.Event) *stream {
	s := &stream{d: d, src: src, cls: cls, chunks: chunks, n: len(chunks), readers: map[*streamReader]struct{}{}, finished: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.decode()
	return s
}

// decode decodes the trace chunk by chunk, waiting while the window is
// full, until the end, an error, or every replay of the trace is done.
func (s *stream) decode() {
	defer func() {
		if s.cls != nil {
			s.cls.Close()
		}
		close(s.finished)
	}()
	for {
		s.mu.Lock()
		for len(s.chunks) >= streamWindow && !s.stopped {
			s.cond.Wait()
		}
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			return
		}
		s.rmu.Lock()
		chunk := make([]traces.Event, 0, chunkEvents)
		for len(chunk) < chunkEvents && s.src.Scan() {
			chunk = append(chunk, s.src.Event())
		}
		end := len(chunk) < chunkEvents
		var err error
		var skipped int64
		if end {
			err = s.src.Err()
			// Closing the input notes what its reader skipped.
			if cerr := s.cls.Close(); err == nil {
				err = cerr
			}
			s.cls = nil
			s.d.in.mu.Lock()
			skipped = s.d.in.skipped
			s.d.in.mu.Unlock()
		}
		s.rmu.Unlock()
		s.mu.Lock()
		if len(chunk) > 0 {
			s.chunks = append(s.chunks, chunk)
			s.n++
		}
		s.done, s.err, s.skipped = end, err, skipped
		s.cond.Broadcast()
		s.mu.Unlock()
		if end {
			return
		}
	}
}

// join returns a reader of the stream from its first event, or nil when
// the first chunk is no longer held.
func (s *stream) join() *streamReader {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first > 0 || s.stopped {
		return nil
	}
	r := &streamReader{s: s, k: -1, i: -1, start: s.d.start}
	s.readers[r] = struct{}{}
	return r
}

// drop drops the chunks that every reader is past; with no reader left,
// every chunk, and then, as no replay can join, the decoding stops.
func (s *stream) drop() {
	low := s.n
	for r := range s.readers {
		low = min(low, max(r.k, 0))
	}
	for s.first < low && len(s.chunks) > 0 {
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
		s.first++
	}
	if len(s.readers) == 0 && s.first > 0 {
		s.stopped = true
	}
	s.cond.Broadcast()
}

// stop ends the decoding, no replay of the trace being left to read it,
// and waits for the decoder to return: after it, nothing reads the file or
// counts its sizes.
func (s *stream) stop() {
	s.mu.Lock()
	s.stopped = true
	s.chunks = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.finished
}

// A streamReader is one replay's reader of a stream.
type streamReader struct {
	s     *stream
	k     int // the chunk read, its stream index; -1 before the first
	i     int // the event of cur read
	cur   []traces.Event
	err   error
	start *traces.Start // the source reader's recorded start state
}

// Start is the source reader's (see traces.StartReporter).
func (r *streamReader) Start() *traces.Start { return r.start }

// Scan advances to the next event, waiting for the decoder when it is
// ahead of it.
func (r *streamReader) Scan() bool {
	if r.i++; r.i < len(r.cur) {
		return true
	}
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.readers[r]; !ok {
		return false
	}
	r.k++
	r.cur, r.i = nil, 0
	s.drop()
	for r.k >= s.n && !s.done && !s.stopped {
		s.cond.Wait()
	}
	if r.k < s.n && !s.stopped {
		r.cur = s.chunks[r.k-s.first]
		return true
	}
	r.err = s.err
	delete(s.readers, r)
	s.drop()
	return false
}

// Event returns the current event.
func (r *streamReader) Event() traces.Event { return r.cur[r.i] }

// Err returns the decoding's error, once Scan has returned false.
func (r *streamReader) Err() error { return r.err }

// Name returns the trace's name.
func (r *streamReader) Name() string { return r.s.d.in.name }

// Skipped returns the bad events the decoding skipped, with --lenient.
func (r *streamReader) Skipped() int64 {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.skipped
}

// Stacks are the source reader's (see traces.StackReporter), which it
// read whole before its first event.
func (r *streamReader) Stacks() ([]snapshot.Frame, [][]int32) { return traces.StacksOf(r.s.src) }

// DeviceCapacity is the source reader's (see sim.CapacityReporter), read
// between the decoder's chunks.
func (r *streamReader) DeviceCapacity(device int) int64 {
	m, ok := r.s.src.(sim.CapacityReporter)
	if !ok {
		return 0
	}
	r.s.rmu.Lock()
	defer r.s.rmu.Unlock()
	return m.DeviceCapacity(device)
}

// Close leaves the stream.
func (r *streamReader) Close() error {
	s := r.s
	s.mu.Lock()
	delete(s.readers, r)
	s.drop()
	s.mu.Unlock()
	return nil
}
