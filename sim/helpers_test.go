package sim

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/traces"
)

// sliceReader is a traces.Reader over events in memory, repeated reps times
// (with the time going on), ending with err.
type sliceReader struct {
	events []traces.Event
	reps   int
	i, rep int
	ev     traces.Event
	err    error
}

func newSliceReader(events []traces.Event) *sliceReader {
	return &sliceReader{events: events, reps: 1}
}

func (r *sliceReader) Scan() bool {
	if r.i == len(r.events) {
		r.rep++
		if r.rep >= r.reps || len(r.events) == 0 {
			return false
		}
		r.i = 0
	}
	r.ev = r.events[r.i]
	if r.rep > 0 && r.ev.TimeUS != traces.NoTime {
		r.ev.TimeUS += int64(r.rep) * (r.events[len(r.events)-1].TimeUS + 1)
	}
	r.i++
	return true
}

func (r *sliceReader) Event() traces.Event { return r.ev }
func (r *sliceReader) Err() error          { return r.err }

// lenientReader adds the optional Skipped and Name methods.
type lenientReader struct {
	*sliceReader
	name    string
	skipped int64
}

func (r lenientReader) Skipped() int64 { return r.skipped }
func (r lenientReader) Name() string   { return r.name }

// traceBuilder writes events as a trace reader would yield them: it gives
// each live allocation the lowest free slot.
type traceBuilder struct {
	events   []traces.Event
	live     map[uint64]traces.Event
	slots    []bool // in use
	time     int64
	device   int32
	stream   uint64
	category gpualloc.Category
}

func newTrace() *traceBuilder {
	return &traceBuilder{live: map[uint64]traces.Event{}}
}

// as sets the category of the following allocs.
func (t *traceBuilder) as(c gpualloc.Category) *traceBuilder {
	t.category = c
	return t
}

// on sets the device and stream of the following allocs.
func (t *traceBuilder) on(device int32, stream uint64) *traceBuilder {
	t.device, t.stream = device, stream
	return t
}

func (t *traceBuilder) alloc(id uint64, size int64) *traceBuilder {
	if _, ok := t.live[id]; ok {
		panic(fmt.Sprintf("id %d is live", id))
	}
	slot := -1
	for i, used := range t.slots {
		if !used {
			slot = i
			break
		}
	}
	if slot < 0 {
		slot = len(t.slots)
		t.slots = append(t.slots, false)
	}
	t.slots[slot] = true
	ev := traces.Event{Op: traces.OpAlloc, Category: t.category, ID: id, Slot: int32(slot), Device: t.device,
		Size: size, Stream: t.stream, TimeUS: t.time}
	t.time += 10
	t.live[id] = ev
	t.events = append(t.events, ev)
	return t
}

func (t *traceBuilder) free(id uint64) *traceBuilder {
	ev, ok := t.live[id]
	if !ok {
		panic(fmt.Sprintf("id %d is not live", id))
	}
	delete(t.live, id)
	t.slots[ev.Slot] = false
	ev.Op, ev.TimeUS = traces.OpFree, t.time
	t.time += 10
	t.events = append(t.events, ev)
	return t
}

// release asks the allocator of the current device to give back its
// cache (torch.cuda.empty_cache).
func (t *traceBuilder) release() *traceBuilder {
	t.events = append(t.events, traces.Event{Op: traces.OpRelease, Device: t.device, TimeUS: t.time})
	t.time += 10
	return t
}

func (t *traceBuilder) reader() *sliceReader { return newSliceReader(t.events) }

// A traceShape says what [randomTrace] draws.
type traceShape struct {
	maxSize int64 // allocations of 1 to maxSize bytes
	maxLive int   // at most this many live allocations
	// devices and streams, when above 1, spread the allocations over that
	// many devices and streams at random.
	devices, streams int
	balanced         bool // the last events free every allocation still live
}

// randomTrace returns a trace of n events drawn from rng: allocations, and
// frees of a random live allocation, each half the time while fewer than
// maxLive are live.
func randomTrace(rng *rand.Rand, n int, sh traceShape) *traceBuilder {
	tr := newTrace()
	var live []uint64
	// length is how long the trace is, counting in a balanced one the frees
	// of the allocations still live.
	length := func() int {
		if sh.balanced {
			return len(tr.events) + len(live)
		}
		return len(tr.events)
	}
	id := uint64(0)
	for length() < n {
		if len(live) > 0 && (rng.IntN(2) == 0 || len(live) >= sh.maxLive) {
			i := rng.IntN(len(live))
			tr.free(live[i])
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		id++
		if sh.devices > 1 || sh.streams > 1 {
			tr.on(int32(rng.IntN(max(sh.devices, 1))), uint64(rng.IntN(max(sh.streams, 1))))
		}
		tr.alloc(id, 1+rng.Int64N(sh.maxSize))
		live = append(live, id)
	}
	if sh.balanced {
		for _, id := range live {
			tr.free(id)
		}
	}
	return tr
}

// failAlloc is how the test strategies fail an Alloc on err from the
// device: counting it in m when the device is out of memory.
func failAlloc(m *gpualloc.Meter, err error) (gpualloc.Block, error) {
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		m.CountOOM()
	}
	return gpualloc.Block{}, err
}

// exactAlloc is the simplest strategy: every Alloc is a device allocation of
// the size asked for, every Free a device free.
type exactAlloc struct {
	gpualloc.Meter
	b gpualloc.Backend
}

func openExact(b gpualloc.Backend) (gpualloc.Allocator, error) { return &exactAlloc{b: b}, nil }

func (a *exactAlloc) Alloc(size int64) (gpualloc.Block, error) {
	addr, err := a.b.Malloc(size)
	if err != nil {
		return failAlloc(&a.Meter, err)
	}
	a.CountDeviceMalloc(size)
	a.CountAlloc(size, size, false)
	return gpualloc.Block{Addr: addr, Size: size, Requested: size}, nil
}

func (a *exactAlloc) Free(b gpualloc.Block) error {
	if err := a.b.Free(b.Addr, b.Size); err != nil {
		return err
	}
	a.CountDeviceFree(b.Size)
	a.CountFree(b.Requested, b.Size)
	return nil
}

// cacheAlloc is a toy caching pool: sizes round up to a power of two (at
// least 1 KiB), freed blocks are kept in LIFO lists by size and never given
// back, except all at once when the device is full, and then the device
// allocation is retried once. It allocates per stream and records the
// streams it is asked for.
type cacheAlloc struct {
	gpualloc.Meter
	b       gpualloc.Backend
	free    map[int64][]gpualloc.Block
	streams []uint64
}

func openCache(b gpualloc.Backend) (gpualloc.Allocator, error) {
	return &cacheAlloc{b: b, free: map[int64][]gpualloc.Block{}}, nil
}

func pow2(n int64) int64 {
	if n <= 1024 {
		return 1024
	}
	return 1 << bits.Len64(uint64(n-1))
}

func (a *cacheAlloc) Alloc(size int64) (gpualloc.Block, error) { return a.AllocStream(size, 0) }

func (a *cacheAlloc) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	a.streams = append(a.streams, stream)
	rs := pow2(size)
	if l := a.free[rs]; len(l) > 0 {
		b := l[len(l)-1]
		a.free[rs] = l[:len(l)-1]
		b.Requested, b.Stream = size, stream
		a.CountAlloc(size, rs, true)
		return b, nil
	}
	addr, err := a.b.Malloc(rs)
	if errors.Is(err, gpualloc.ErrOutOfMemory) {
		if err := a.ReleaseAll(); err != nil {
			return gpualloc.Block{}, err
		}
		a.CountRetry()
		addr, err = a.b.Malloc(rs)
	}
	if err != nil {
		return failAlloc(&a.Meter, err)
	}
	a.CountDeviceMalloc(rs)
	a.CountAlloc(size, rs, false)
	return gpualloc.Block{Addr: addr, Size: rs, Requested: size, Stream: stream}, nil
}

func (a *cacheAlloc) Free(b gpualloc.Block) error {
	a.free[b.Size] = append(a.free[b.Size], b)
	a.CountFree(b.Requested, b.Size)
	return nil
}

func (a *cacheAlloc) ReleaseAll() error {
	for size, l := range a.free {
		for _, b := range l {
			if err := a.b.Free(b.Addr, b.Size); err != nil {
				return err
			}
			a.CountDeviceFree(b.Size)
		}
		delete(a.free, size)
	}
	return nil
}

// nopAlloc hands out addresses from a counter and never calls its backend:
// replaying into it measures the engine alone. It allocates nothing.
type nopAlloc struct{ next uint64 }

func openNop(gpualloc.Backend) (gpualloc.Allocator, error) { return &nopAlloc{next: 1 << 40}, nil }

func (a *nopAlloc) Alloc(size int64) (gpualloc.Block, error) {
	b := gpualloc.Block{Addr: a.next, Size: size, Requested: size}
	a.next += uint64(size)
	return b, nil
}

func (a *nopAlloc) Free(gpualloc.Block) error { return nil }

// nullBackend is a backend of unlimited size that keeps no records.
type nullBackend struct{ next uint64 }

func (b *nullBackend) Malloc(size int64) (uint64, error) {
	a := b.next
	b.next += uint64(size)
	return a, nil
}
func (b *nullBackend) Free(uint64, int64) error     { return nil }
func (b *nullBackend) MemInfo() (free, total int64) { return 1 << 62, 1 << 62 }
func newNullBackend(int) (gpualloc.Backend, error)  { return &nullBackend{next: 1 << 40}, nil }
