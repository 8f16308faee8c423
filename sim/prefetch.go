package sim

import (
	"fmt"
	"sync"

	"github.com/gpualloc/gpualloc/traces"
)

// Prefetching: a replay of a trace that is read as it goes (a file being
// decoded) reads it on a goroutine of its own, a few batches ahead of the
// replay, so that decoding and replaying take two cores instead of one
// after the other: the replay then takes about as long as the slower of
// the two. The engine reads the batches in place (see
// [traces.BatchReader]), and a reader that decodes straight into a batch
// (a filler, such as the native CSV reader) fills it without an interface
// call per event. It costs prefetchBatches x prefetchSize events of
// memory (4 x 4096 x 48 bytes, 768 KiB), whatever the trace's length.
//
// A batch is handed over through a channel, which wakes the goroutine
// waiting for it: a few microseconds on a busy machine. Batches of 4096
// events make that a cost of a few tenths of a nanosecond an event, and
// delay the start of a replay by the decoding of one batch.
const (
	prefetchSize    = 4096
	prefetchBatches = 4
)

// A filler is a reader that can also decode its next events straight into
// a caller's slice: Fill appends the events after the last one that Scan or
// Fill yielded to dst, up to cap(dst), and returns the slice; fewer than
// cap(dst)-len(dst) events mean the end of the trace or an error, which Err
// then returns. The events are those Scan would have yielded, valid as a
// Reader yields them (see [traces.Event]). The native CSV reader of package
// traces is one.
type filler interface {
	Fill(dst []traces.Event) []traces.Event
}

// A prefetcher reads a Reader on its own goroutine into batches.
type prefetcher struct {
	r     traces.Reader
	full  chan []traces.Event // batches read, in order
	free  chan []traces.Event // batches the replay is done with
	quit  chan struct{}
	done  sync.WaitGroup
	cur   []traces.Event // the batch the replay holds
	err   error          // the reader's error, once full is closed
	ended bool
}

// prefetch starts reading r ahead. stop must be called once the replay is
// done with it.
func prefetch(r traces.Reader) *prefetcher {
	p := &prefetcher{
		r:    r,
		full: make(chan []traces.Event, prefetchBatches),
		free: make(chan []traces.Event, prefetchBatches),
		quit: make(chan struct{}),
	}
	for range prefetchBatches {
		p.free <- make([]traces.Event, 0, prefetchSize)
	}
	p.done.Go(p.read)
	return p
}

// read fills batches until the reader ends or the replay stops.
func (p *prefetcher) read() {
	defer close(p.full)
	defer func() {
		if v := recover(); v != nil {
			p.err = fmt.Errorf("panic while reading the trace: %v", v)
		}
	}()
	for {
		var b []traces.Event
		select {
		case b = <-p.free:
		case <-p.quit:
			return
		}
		b = b[:0]
		if f, ok := p.r.(filler); ok {
			b = f.Fill(b)
		} else {
			for len(b) < cap(b) && p.r.Scan() {
				b = append(b, p.r.Event())
			}
		}
		if len(b) > 0 {
			select {
			case p.full <- b:
			case <-p.quit:
				return
			}
		}
		if len(b) < cap(b) {
			p.err = p.r.Err()
			return
		}
	}
}

// Batch returns the next batch, and gives the previous one back.
func (p *prefetcher) Batch() []traces.Event {
	if p.cur != nil {
		p.free <- p.cur
		p.cur = nil
	}
	if p.ended {
		return nil
	}
	b, ok := <-p.full
	if !ok {
		p.ended = true
		return nil
	}
	p.cur = b
	return b
}

// Err returns the reader's error, once Batch has returned no events.
func (p *prefetcher) Err() error {
	if !p.ended {
		return nil
	}
	return p.err
}

// stop ends the reading goroutine and waits for it, so that the reader is
// the caller's again.
func (p *prefetcher) stop() {
	close(p.quit)
	p.done.Wait()
}
