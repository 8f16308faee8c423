package sim

import (
	"errors"
	"io"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

// The wrappers through which the recorder of a snapshot sees a replay (see
// snapRecorder); the engine puts them in place only when it records.

// recording returns the reader the replay loop reads: r itself, or with a
// snapshot, r wrapped to note each event's time.
func (e *engine) recording(r traces.Reader) traces.Reader {
	if e.rec == nil {
		return r
	}
	rr := &recReader{Reader: r, rec: e.rec}
	rr.batch, _ = r.(traces.BatchReader)
	return rr
}

// A recReader hands the replay loop its events one at a time, as batches
// of one, and notes the time of each as it does, or its index in the trace
// when the trace has no times (so that a reader that merges the devices'
// traces by time finds the replay's order): the loop replays a batch
// before it asks for the next, so the time noted is the event's being
// replayed. It reads a BatchReader a batch at a time and hands that out, and
// any other reader with Scan, never ahead of the replay.
type recReader struct {
	traces.Reader
	batch   traces.BatchReader // the reader, when it is one
	pending []traces.Event     // of the batch read last, those not yet handed out
	one     [1]traces.Event
	rec     *snapRecorder
	n       int64 // events handed out
}

// Batch returns the next event alone.
func (r *recReader) Batch() []traces.Event {
	var b []traces.Event
	switch {
	case len(r.pending) > 0:
		b, r.pending = r.pending[:1], r.pending[1:]
	case r.batch != nil:
		r.pending = r.batch.Batch()
		if len(r.pending) == 0 {
			return nil
		}
		b, r.pending = r.pending[:1], r.pending[1:]
	case r.Reader.Scan():
		r.one[0] = r.Reader.Event()
		b = r.one[:]
	default:
		return nil
	}
	r.rec.at(&b[0], r.n)
	r.n++
	return b
}

// at notes event n, ev, about to be replayed: its time or, when the trace
// has none, its index in the trace, so that a reader that merges the
// devices' traces by time finds the replay's order. The recording reader
// calls it as it hands the event to the replay loop, alone: the loop would
// read ahead otherwise.
func (r *snapRecorder) at(ev *traces.Event, n int64) {
	r.timeUS, r.stack = ev.TimeUS, ev.Stack
	if ev.TimeUS == traces.NoTime {
		r.timeUS = n
		r.indexTimes = true
	}
}

// A recAlloc records the blocks a device's allocator hands out and takes
// back. It is every kind of allocator the engine dispatches on, and calls
// the one the wrapped allocator is: AllocCategory, else AllocStream, else
// Alloc.
type recAlloc struct {
	inner  gpualloc.Allocator
	stream gpualloc.StreamAllocator   // inner, when it is one
	cat    gpualloc.CategoryAllocator // inner, when it is one
	rec    *snapRecorder
	d      *device
}

func (a *recAlloc) Alloc(size int64) (gpualloc.Block, error) {
	return a.AllocCategory(size, 0, gpualloc.CategoryUnknown)
}

func (a *recAlloc) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	return a.AllocCategory(size, stream, gpualloc.CategoryUnknown)
}

func (a *recAlloc) AllocCategory(size int64, stream uint64, c gpualloc.Category) (b gpualloc.Block, err error) {
	a.rec.begin(stream, c)
	switch {
	case a.cat != nil:
		b, err = a.cat.AllocCategory(size, stream, c)
	case a.stream != nil:
		b, err = a.stream.AllocStream(size, stream)
	default:
		b, err = a.inner.Alloc(size)
	}
	switch {
	case err == nil:
		a.rec.alloc(a.d.index, b, size)
	case errors.Is(err, gpualloc.ErrOutOfMemory):
		if r, ok := a.inner.(interface{ RoundSize(int64) int64 }); ok {
			if n := r.RoundSize(size); n > 0 {
				size = n
			}
		}
		free, _ := a.d.backend.MemInfo()
		a.rec.oom(a.d.index, size, free)
	}
	return b, err
}

func (a *recAlloc) Free(b gpualloc.Block) error {
	a.rec.free(a.d.index, b)
	return a.inner.Free(b)
}

// Close closes the wrapped allocator when it is an io.Closer.
func (a *recAlloc) Close() error {
	if c, ok := a.inner.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// A recReleaser is the recAlloc of an allocator that is a
// gpualloc.Releaser, and one too: the device frees of its ReleaseAll are
// recorded by its backend, as those of an empty_cache.
type recReleaser struct {
	*recAlloc
	rel gpualloc.Releaser
}

func (a *recReleaser) ReleaseAll() error {
	a.rec.releasing = true
	defer func() { a.rec.releasing = false }()
	return a.rel.ReleaseAll()
}

// backend returns the backend to give device d's allocator: b, the counting
// wrapper, wrapped to record the device calls.
func (r *snapRecorder) backend(d *device, b gpualloc.Backend) gpualloc.Backend {
	rb := recBackend{Backend: b, rec: r, dev: d.index}
	if vm, ok := b.(*vmDevice); ok {
		return &recVM{recBackend: rb, vm: vm}
	}
	return &rb
}

// A recBackend records the Malloc and Free calls of an allocator.
type recBackend struct {
	gpualloc.Backend
	rec *snapRecorder
	dev int
}

// Index returns the index of the device recorded.
func (b *recBackend) Index() int { return b.dev }

func (b *recBackend) Malloc(size int64) (uint64, error) {
	addr, err := b.Backend.Malloc(size)
	if err == nil {
		b.rec.segmentAlloc(b.dev, addr, size)
	}
	return addr, err
}

func (b *recBackend) Free(addr uint64, size int64) error {
	err := b.Backend.Free(addr, size)
	if err == nil {
		b.rec.segmentFree(b.dev, addr, size)
	}
	return err
}

// A recVM is a recBackend of a device with virtual memory, which also
// records the ranges reserved and the maps and unmaps.
type recVM struct {
	recBackend
	vm *vmDevice
}

func (v *recVM) Granularity() int64 { return v.vm.Granularity() }

func (v *recVM) Reserve(size int64) (uint64, error) {
	addr, err := v.vm.Reserve(size)
	if err == nil {
		v.rec.reserve(v.dev, addr, size)
	}
	return addr, err
}

func (v *recVM) Unreserve(addr uint64, size int64) error {
	err := v.vm.Unreserve(addr, size)
	if err == nil {
		v.rec.unreserve(v.dev, addr)
	}
	return err
}

func (v *recVM) Create(size int64) (uint64, error) { return v.vm.Create(size) }
func (v *recVM) Release(h uint64) error            { return v.vm.Release(h) }

func (v *recVM) Map(addr uint64, h uint64) error {
	err := v.vm.Map(addr, h)
	if err == nil {
		v.rec.segmentMap(v.dev, addr, v.vm.sizes[h])
	}
	return err
}

func (v *recVM) Unmap(addr uint64, size int64) error {
	err := v.vm.Unmap(addr, size)
	if err == nil {
		v.rec.segmentUnmap(v.dev, addr, size)
	}
	return err
}
