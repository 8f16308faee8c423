package strategytest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gpualloc/gpualloc"
)

// An OpenFunc builds the allocator under test on b. Check calls it once per
// check, each time with a fresh device ([NewDevice]).
type OpenFunc func(b gpualloc.Backend) (gpualloc.Allocator, error)

// Options tune [Check] and [Run]. The zero value (or a nil *Options) asks
// for the defaults.
type Options struct {
	// Capacity is the size in bytes of the device each check opens the
	// allocator on. It is small by default (256 MiB) so that random traces
	// run out of memory and exercise those paths.
	Capacity int64

	// MaxSize is the largest request the checks make, the largest size of
	// random traces and the block size used to exhaust the device (which
	// takes about Capacity/MaxSize allocations). Default: Capacity/8.
	MaxSize int64

	// Align is the alignment every Block.Addr must have. Default: 256, what
	// cudaMalloc guarantees. Strategies that hand out whole device
	// allocations or carve them at multiples of 512 bytes (MXNet's pools,
	// PyTorch's) pass [virtual.Alignment] (512).
	Align uint64

	// Caching says that the allocator keeps freed memory for reuse. When
	// set, an Alloc right after the Free of a block of the same size must be
	// served without a device malloc.
	Caching bool

	// Seeds are the seeds of the random traces, one trace each.
	// Default: 1 through 5.
	Seeds []uint64

	// Ops is the number of operations of each random trace. Default: 5000.
	Ops int
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Capacity <= 0 {
		r.Capacity = 256 << 20
	}
	if r.MaxSize <= 0 {
		r.MaxSize = max(r.Capacity/8, 1)
	}
	r.MaxSize = min(r.MaxSize, r.Capacity)
	if r.Align == 0 {
		r.Align = 256
	}
	if len(r.Seeds) == 0 {
		r.Seeds = []uint64{1, 2, 3, 4, 5}
	}
	if r.Ops <= 0 {
		r.Ops = 5000
	}
	return r
}

// Check checks that the allocators open builds behave as a
// [gpualloc.Allocator] must, and returns an error describing every failure,
// or nil. It needs no [testing.T]: a fuzz target, a main or another test
// framework can call it. Each check runs on a fresh allocator and device
// ([NewDevice]); after every operation it checks that
//
//   - every live block lies inside one region the allocator holds from the
//     device (or, for a strategy that uses the device's
//     [gpualloc.VirtualMemory], in mapped memory of one reserved range),
//     overlaps no other live block, is aligned to Options.Align, and
//     has Size >= Requested and Requested equal to the size asked for;
//   - the device saw no invalid call (a free of an address it did not hand
//     out or with the wrong size, a malloc of less than one byte);
//   - if the allocator is a [gpualloc.StatsReporter], its Stats add up
//     exactly: Requested and Allocated are the sums over the live blocks,
//     Reserved is what the device holds, DeviceMallocs, DeviceFrees and
//     DeviceMallocBytes are the device's counts (Create and Release of
//     physical memory counted with Malloc and Free), DeviceMaps and
//     DeviceUnmaps its Map and Unmap calls, Allocs and Frees the
//     successful calls, CacheHits the allocations that made no device
//     malloc, OOMs the allocations that failed with ErrOutOfMemory;
//     PeakRequested and PeakAllocated are the largest values seen,
//     PeakReserved lies between Reserved and the device's peak and never
//     falls, and Retries never exceeds the device mallocs that failed.
//
// The checks:
//
//   - Spec: for a [gpualloc.Specer], the spec parses, and if it names a
//     registered strategy it opens an allocator with the same spec.
//   - InvalidSize: Alloc of 0 or fewer bytes fails with ErrInvalidSize and
//     changes nothing.
//   - Blocks: requests from 1 byte to MaxSize (and on other streams, for a
//     [gpualloc.StreamAllocator]), held together, then freed.
//   - Reuse (Options.Caching): an Alloc right after the Free of a block of
//     the same size makes no device malloc, and the cached block is handed
//     out only once.
//   - ReleaseAll (for a [gpualloc.Releaser]): live blocks survive it, and
//     once every block is freed it leaves the device holding 0 bytes and
//     no reserved address range.
//   - OutOfMemory: a request larger than the device and requests that
//     exhaust it fail with ErrOutOfMemory; the allocator stays usable.
//   - InvalidFree: a double free, a free of a block never allocated, of an
//     address inside a block, or with a changed Size or Requested fails with
//     ErrInvalidFree and changes nothing.
//   - RandomTrace/seed=N: for each seed, Options.Ops random operations with
//     sizes from 1 byte to MaxSize, on a device small enough to run out, with
//     invalid calls, ReleaseAll and device mallocs that fail with room to
//     spare mixed in; then everything is freed.
//
// A check that does not apply to the allocator (Spec, Reuse, ReleaseAll) is
// passed over. The error joins one error per failed check, in the order
// above; the text of each begins with the check's name and goes on with the
// operation and the numbers that do not add up, as in
//
//	Reuse: op 5, Alloc(4096) = {Addr:0x7f4000000000 Size:4096 Requested:4096}: Stats do not add up: ...
func Check(open OpenFunc, opt *Options) error {
	o := opt.withDefaults()
	var errs []error
	for _, c := range checks(o) {
		if _, err := c.do(open, o); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// Run runs the checks of [Check], each as a subtest of t named as the
// check, which fails with the check's error or is skipped when the check
// does not apply.
func Run(t *testing.T, open OpenFunc, opt *Options) {
	t.Helper()
	o := opt.withDefaults()
	for _, c := range checks(o) {
		t.Run(c.name, func(t *testing.T) {
			t.Helper()
			skip, err := c.do(open, o)
			if skip != "" {
				t.Skip(skip)
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A check is one check of the suite, on a fresh allocator.
type check struct {
	name string                  // "RandomTrace/seed=1": a subtest of Run's
	skip func(h *harness) string // why the check does not apply, or ""
	run  func(h *harness) error
}

// do opens an allocator on a fresh device and runs c on it. It returns why
// c does not apply to the allocator, or c's error.
func (c check) do(open OpenFunc, o Options) (skip string, err error) {
	h, err := newHarness(open, o)
	if err != nil {
		return "", err
	}
	if why := c.skip(h); why != "" {
		return why, nil
	}
	return "", c.run(h)
}

func always(*harness) string { return "" }

func checks(o Options) []check {
	cs := []check{
		{name: "Spec", run: checkSpec, skip: func(h *harness) string {
			if h.specer == nil {
				return "the allocator is not a gpualloc.Specer"
			}
			return ""
		}},
		{name: "InvalidSize", run: checkInvalidSize, skip: always},
		{name: "Blocks", run: checkBlocks, skip: always},
		{name: "Reuse", run: checkReuse, skip: func(*harness) string {
			if !o.Caching {
				return "Options.Caching is not set"
			}
			return ""
		}},
		{name: "ReleaseAll", run: checkReleaseAll, skip: func(h *harness) string {
			if h.releaser == nil {
				return "the allocator is not a gpualloc.Releaser"
			}
			return ""
		}},
		{name: "OutOfMemory", run: checkOutOfMemory, skip: always},
		{name: "InvalidFree", run: checkInvalidFree, skip: always},
	}
	for _, seed := range o.Seeds {
		cs = append(cs, check{
			name: fmt.Sprintf("RandomTrace/seed=%d", seed),
			skip: always,
			run:  func(h *harness) error { return randomTrace(h, seed) },
		})
	}
	return cs
}

func checkSpec(h *harness) error {
	spec := h.specer.Spec()
	sp, err := gpualloc.ParseSpec(spec)
	if err != nil {
		return fmt.Errorf("Spec() = %q: %v", spec, err)
	}
	if _, err := gpualloc.Lookup(sp.Name); err != nil {
		return nil // not registered: nothing more to compare with
	}
	p, err := gpualloc.Resolve(sp, nil)
	if err != nil {
		return fmt.Errorf("Spec() = %q names a registered strategy, but: %v", spec, err)
	}
	a, err := p.Open(NewDevice(h.opt.Capacity))
	if err != nil {
		return fmt.Errorf("Spec() = %q names a registered strategy, but opening it fails: %v", spec, err)
	}
	s, ok := a.(gpualloc.Specer)
	if !ok {
		return fmt.Errorf("Spec() = %q opens an allocator that is not a gpualloc.Specer", spec)
	}
	if got := s.Spec(); got != spec {
		return fmt.Errorf("Spec() = %q, but the allocator that spec opens reports %q", spec, got)
	}
	return nil
}

func checkInvalidSize(h *harness) error {
	for _, size := range []int64{0, -1, math.MinInt64} {
		if err := h.allocInvalid(size); err != nil {
			return err
		}
	}
	// The allocator still works.
	b, err := h.mustAlloc(1)
	if err != nil {
		return err
	}
	if err := h.allocInvalid(0); err != nil {
		return err
	}
	if err := h.free(b); err != nil {
		return err
	}
	return h.drain()
}

// sizes are requests that sit on and around the roundings strategies use.
var sizes = []int64{
	1, 2, 255, 256, 257, 511, 512, 513, 1000, 4095, 4096, 4097,
	65536, 100000, 1 << 20, 1<<20 + 1, 2 << 20, 2<<20 + 1, 5000000,
	16 << 20, 16<<20 + 1, 40 << 20,
}

// fitting returns the sizes up to MaxSize, and MaxSize, keeping their sum
// under a quarter of the device.
func fitting(o Options) []int64 {
	var r []int64
	var sum int64
	for _, s := range append(sizes[:len(sizes):len(sizes)], o.MaxSize) {
		if s > o.MaxSize || sum+s > o.Capacity/4 {
			continue
		}
		r = append(r, s)
		sum += s
	}
	return r
}

func checkBlocks(h *harness) error {
	live, err := h.allocEach(fitting(h.opt))
	if err != nil {
		return err
	}
	if h.streams != nil {
		for _, stream := range []uint64{1, 7} {
			for _, size := range []int64{1, 4096, 100000} {
				b, ok, err := h.alloc(size, stream)
				if err != nil {
					return err
				}
				if !ok {
					return h.errorf("out of memory with %d bytes live", h.requested)
				}
				live = append(live, b)
			}
		}
	}
	// Free every other block, then the rest from the last.
	if err := h.freeEach(everyOther(live, 0)); err != nil {
		return err
	}
	rest := everyOther(live, 1)
	slices.Reverse(rest)
	if err := h.freeEach(rest); err != nil {
		return err
	}
	return h.drain()
}

func checkReuse(h *harness) error {
	// A neighbour stays live throughout, so the pool is never empty.
	keep, err := h.mustAlloc(4096)
	if err != nil {
		return err
	}
	for _, size := range []int64{1, 4096, 4097, 100000, 1 << 20, 5000000, h.opt.MaxSize} {
		if size > h.opt.MaxSize {
			continue
		}
		if err := h.allocFree(size); err != nil {
			return err
		}
		before := h.dev.Stats().Mallocs
		b, err := h.mustAlloc(size)
		if err != nil {
			return err
		}
		if n := h.dev.Stats().Mallocs - before; n != 0 {
			return h.errorf("right after the Free of a block of the same size, the allocator made %d device mallocs; with Options.Caching it must reuse its cache", n)
		}
		// The cached block was handed out once: another of the same size
		// is a different block.
		b2, err := h.mustAlloc(size)
		if err != nil {
			return err
		}
		if err := h.freeEach([]gpualloc.Block{b, b2}); err != nil {
			return err
		}
	}
	if err := h.free(keep); err != nil {
		return err
	}
	return h.drain()
}

func checkReleaseAll(h *harness) error {
	// On an empty allocator, ReleaseAll is harmless.
	if err := h.release(); err != nil {
		return err
	}
	live, err := h.allocEach(fitting(h.opt))
	if err != nil {
		return err
	}
	// Free half, release: the other half stays live and in device memory.
	if err := h.freeEach(everyOther(live, 0)); err != nil {
		return err
	}
	if err := h.release(); err != nil {
		return err
	}
	if err := h.release(); err != nil {
		return err
	}
	// Live blocks are still usable; new ones can be had.
	if err := h.allocFree(4096); err != nil {
		return err
	}
	if err := h.drain(); err != nil {
		return err
	}
	// And again after the device was emptied.
	if err := h.allocFree(100000); err != nil {
		return err
	}
	return h.drain()
}

func checkOutOfMemory(h *harness) error {
	capacity := h.opt.Capacity
	for _, size := range []int64{capacity + 1, 2 * capacity, math.MaxInt64} {
		if size <= 0 {
			continue
		}
		_, ok, err := h.alloc(size, 0)
		if err != nil {
			return err
		}
		if ok {
			return h.errorf("succeeded on a device of %d bytes; want ErrOutOfMemory", capacity)
		}
	}
	// Exhaust the device with blocks of MaxSize.
	chunk := h.opt.MaxSize
	limit := int(capacity/chunk)*2 + 16
	var live []gpualloc.Block
	for {
		if len(live) == limit {
			return h.errorf("%d allocations of %d bytes (%d in all) on a device of %d bytes all succeeded; want ErrOutOfMemory",
				len(live), chunk, int64(len(live))*chunk, capacity)
		}
		b, ok, err := h.alloc(chunk, 0)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		live = append(live, b)
	}
	if len(live) == 0 {
		return h.errorf("Alloc(%d) on an empty device of %d bytes ran out of memory", chunk, capacity)
	}
	// Still usable: a freed block's size can be had again.
	last := live[len(live)-1]
	if err := h.free(last); err != nil {
		return err
	}
	b, err := h.mustAlloc(chunk)
	if err != nil {
		return fmt.Errorf("after running out of memory and freeing a block of %d bytes: %w", chunk, err)
	}
	live[len(live)-1] = b
	// Run out again, then free everything.
	if _, ok, err := h.alloc(capacity, 0); err != nil {
		return err
	} else if ok {
		return h.errorf("succeeded with %d bytes live on a device of %d bytes; want ErrOutOfMemory", h.requested, capacity)
	}
	if err := h.drain(); err != nil {
		return err
	}
	if h.releaser == nil {
		return nil
	}
	// With the device empty, half of it can be had in one block.
	if err := h.allocFree(capacity / 2); err != nil {
		return fmt.Errorf("after running out of memory and releasing everything: %w", err)
	}
	return h.drain()
}

func checkInvalidFree(h *harness) error {
	b1, err := h.mustAlloc(4096)
	if err != nil {
		return err
	}
	b2, err := h.mustAlloc(100000)
	if err != nil {
		return err
	}
	if err := h.free(b1); err != nil {
		return err
	}
	changedRequested := b2
	if b2.Requested > 1 {
		changedRequested.Requested--
	} else {
		changedRequested.Requested++
	}
	cases := []struct {
		b    gpualloc.Block
		what string
	}{
		{b1, "a block already freed"},
		{gpualloc.Block{}, "the zero Block"},
		{gpualloc.Block{Addr: 0x1000, Size: 4096, Requested: 4096}, "a block never allocated"},
		{gpualloc.Block{Addr: b2.Addr + h.opt.Align, Size: b2.Size - int64(h.opt.Align), Requested: b2.Requested - int64(h.opt.Align)}, "an address inside a live block"},
		{gpualloc.Block{Addr: b2.Addr, Size: b2.Size + 512, Requested: b2.Requested}, "a live block with a larger Size"},
		{gpualloc.Block{Addr: b2.Addr, Size: b2.Size / 2, Requested: b2.Requested / 2}, "a live block with a smaller Size"},
		{changedRequested, "a live block with a changed Requested"},
	}
	for _, c := range cases {
		if err := h.freeInvalid(c.b, c.what); err != nil {
			return err
		}
	}
	if err := h.free(b2); err != nil {
		return err
	}
	if err := h.freeInvalid(b2, "a block already freed"); err != nil {
		return err
	}
	return h.drain()
}
