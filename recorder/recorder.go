// Package recorder records the live use of an allocator as a trace: it wraps
// any [gpualloc.Allocator] and writes every successful Alloc and Free to a
// native trace ([traces.Writer]), which simulate then replays through every
// strategy. It is the Go counterpart of the LD_PRELOAD recorder of
// traces/record, for programs that allocate through gpualloc.
//
// A [Log] is one trace being written; [Log.Wrap] gives a recording allocator
// for each device, and all of them write to the log. [New] is the short form
// for one allocator.
//
// What is recorded: the requested size, the stream (the one passed to
// AllocStream or AllocCategory, 0 for Alloc), the category (the one passed
// to AllocCategory, unknown otherwise; written when the Writer has a
// category column), the device index given to Wrap, and the time in
// microseconds since the log was made. Ids are a counter of the log's
// allocations (1, 2, ...), so they stay unique across devices. Failed
// allocations and failed frees are not recorded: the trace is what the
// program held.
package recorder

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

// Options configure a [Log].
type Options struct {
	// Clock returns the current time; nil means time.Now. Timestamps are
	// microseconds since the first reading, made when the log is, and never
	// go backwards even if the clock does.
	Clock func() time.Time
}

// A Log is a trace being recorded: the Writer, the clock and the ids. It is
// safe for concurrent use, and so are the allocators it wraps: each call of
// one holds the log's lock while it calls the wrapped allocator and writes
// the event, so the trace's order is the order of the calls.
type Log struct {
	mu     sync.Mutex
	w      *traces.Writer
	clock  func() time.Time
	start  time.Time
	last   int64  // the last timestamp written
	nextID uint64 // the id of the next allocation
	err    error  // the first error writing the trace
	closed bool
}

// NewLog returns a Log that writes to w. Close the log at the end: it
// flushes and closes w.
func NewLog(w *traces.Writer, opts Options) *Log {
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	return &Log{w: w, clock: clock, start: clock(), nextID: 1}
}

// write writes one event; l.mu is held. A write error is kept, returned by
// Err, Flush and Close, and stops the recording; the allocation it was about
// goes on.
func (l *Log) write(ev traces.Event) {
	if l.err != nil || l.closed {
		return
	}
	ev.TimeUS = max(l.clock().Sub(l.start).Microseconds(), l.last)
	l.last = ev.TimeUS
	if err := l.w.Write(ev); err != nil {
		l.err = fmt.Errorf("recorder: %w", err)
	}
}

// Err returns the first error that writing the trace met, if any.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Flush writes what is buffered to the Writer's output.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		if err := l.w.Flush(); err != nil {
			l.err = fmt.Errorf("recorder: %w", err)
		}
	}
	return l.err
}

// Close flushes and closes the Writer and returns the first error of the
// recording. Allocators of the log go on working after it, without
// recording.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.err
	}
	l.closed = true
	if err := l.w.Close(); err != nil && l.err == nil {
		l.err = fmt.Errorf("recorder: %w", err)
	}
	return l.err
}

// An Allocator records the calls of the allocator it wraps. Besides Alloc
// and Free it is a [gpualloc.StreamAllocator] (AllocStream calls the wrapped
// allocator's AllocStream when it has one, else its Alloc, and records the
// stream either way), a [gpualloc.CategoryAllocator] (AllocCategory calls
// the wrapped allocator's AllocCategory when it has one, else goes on as
// AllocStream, and records the category either way) and a [gpualloc.Specer] (the wrapped allocator's spec,
// "" if it has none). It implements [gpualloc.StatsReporter],
// [gpualloc.Releaser] and [gpualloc.FreeSpaceReporter] exactly when the
// wrapped allocator does, so that a type assertion finds what the wrapped
// allocator can do. Close closes the wrapped allocator if it is an
// io.Closer, and the log if the Allocator came from [New].
type Allocator interface {
	gpualloc.Allocator
	gpualloc.StreamAllocator
	gpualloc.CategoryAllocator
	gpualloc.Specer
	io.Closer
	// Unwrap returns the wrapped allocator.
	Unwrap() gpualloc.Allocator
}

// recorder is the Allocator without the optional interfaces.
type recorder struct {
	log     *Log
	a       gpualloc.Allocator
	stream  gpualloc.StreamAllocator
	cat     gpualloc.CategoryAllocator
	device  int32
	live    map[uint64]liveBlock // live blocks by address
	ownsLog bool
}

// liveBlock is what the free of a live block writes.
type liveBlock struct {
	id     uint64
	stream uint64
}

// Wrap returns an Allocator that forwards to a and records its use as the
// allocations of device index device.
func (l *Log) Wrap(a gpualloc.Allocator, device int) Allocator {
	r := &recorder{log: l, a: a, device: int32(device), live: map[uint64]liveBlock{}}
	r.stream, _ = a.(gpualloc.StreamAllocator)
	r.cat, _ = a.(gpualloc.CategoryAllocator)
	return withOptional(r)
}

// New returns an Allocator that records a's use to w, as device index 0,
// with a log of its own, which its Close closes.
func New(a gpualloc.Allocator, w *traces.Writer, opts Options) Allocator {
	l := NewLog(w, opts)
	r := &recorder{log: l, a: a, live: map[uint64]liveBlock{}, ownsLog: true}
	r.stream, _ = a.(gpualloc.StreamAllocator)
	r.cat, _ = a.(gpualloc.CategoryAllocator)
	return withOptional(r)
}

func (r *recorder) Alloc(size int64) (gpualloc.Block, error) { return r.AllocStream(size, 0) }

func (r *recorder) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	return r.AllocCategory(size, stream, gpualloc.CategoryUnknown)
}

func (r *recorder) AllocCategory(size int64, stream uint64, cat gpualloc.Category) (gpualloc.Block, error) {
	l := r.log
	l.mu.Lock()
	defer l.mu.Unlock()
	var b gpualloc.Block
	var err error
	if r.cat != nil {
		b, err = r.cat.AllocCategory(size, stream, cat)
	} else if r.stream != nil {
		b, err = r.stream.AllocStream(size, stream)
	} else {
		b, err = r.a.Alloc(size)
	}
	if err != nil {
		return b, err
	}
	id := l.nextID
	l.nextID++
	r.live[b.Addr] = liveBlock{id, stream}
	l.write(traces.Event{Op: traces.OpAlloc, Category: cat, ID: id, Size: size, Stream: stream, Device: r.device})
	return b, nil
}

func (r *recorder) Free(b gpualloc.Block) error {
	l := r.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := r.a.Free(b); err != nil {
		return err
	}
	lb, ok := r.live[b.Addr]
	if !ok {
		// The wrapped allocator took back a block it did not hand out
		// through the recorder: there is nothing to pair it with.
		return nil
	}
	delete(r.live, b.Addr)
	l.write(traces.Event{Op: traces.OpFree, ID: lb.id, Size: b.Requested, Stream: lb.stream, Device: r.device})
	return nil
}

func (r *recorder) Spec() string {
	if s, ok := r.a.(gpualloc.Specer); ok {
		return s.Spec()
	}
	return ""
}

func (r *recorder) Unwrap() gpualloc.Allocator { return r.a }

func (r *recorder) Close() error {
	var errs []error
	if c, ok := r.a.(io.Closer); ok {
		r.log.mu.Lock()
		err := c.Close()
		r.log.mu.Unlock()
		errs = append(errs, err)
	}
	if r.ownsLog {
		errs = append(errs, r.log.Close())
	} else {
		errs = append(errs, r.log.Flush())
	}
	return errors.Join(errs...)
}

// The optional interfaces, each forwarded under the log's lock.

type stats struct{ r *recorder }

func (s stats) Stats() gpualloc.Stats {
	s.r.log.mu.Lock()
	defer s.r.log.mu.Unlock()
	return s.r.a.(gpualloc.StatsReporter).Stats()
}

type releaser struct{ r *recorder }

func (s releaser) ReleaseAll() error {
	s.r.log.mu.Lock()
	defer s.r.log.mu.Unlock()
	return s.r.a.(gpualloc.Releaser).ReleaseAll()
}

type freeSpace struct{ r *recorder }

func (s freeSpace) FreeSpace() (largest, total int64) {
	s.r.log.mu.Lock()
	defer s.r.log.mu.Unlock()
	return s.r.a.(gpualloc.FreeSpaceReporter).FreeSpace()
}

// withOptional returns r with exactly the optional interfaces that the
// wrapped allocator has.
func withOptional(r *recorder) Allocator {
	_, s := r.a.(gpualloc.StatsReporter)
	_, rel := r.a.(gpualloc.Releaser)
	_, f := r.a.(gpualloc.FreeSpaceReporter)
	switch {
	case s && rel && f:
		return struct {
			*recorder
			stats
			releaser
			freeSpace
		}{r, stats{r}, releaser{r}, freeSpace{r}}
	case s && rel:
		return struct {
			*recorder
			stats
			releaser
		}{r, stats{r}, releaser{r}}
	case s && f:
		return struct {
			*recorder
			stats
			freeSpace
		}{r, stats{r}, freeSpace{r}}
	case rel && f:
		return struct {
			*recorder
			releaser
			freeSpace
		}{r, releaser{r}, freeSpace{r}}
	case s:
		return struct {
			*recorder
			stats
		}{r, stats{r}}
	case rel:
		return struct {
			*recorder
			releaser
		}{r, releaser{r}}
	case f:
		return struct {
			*recorder
			freeSpace
		}{r, freeSpace{r}}
	}
	return r
}
