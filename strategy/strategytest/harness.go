package strategytest

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
)

// A harness drives one allocator on its own device ([NewDevice]), keeps its own account of
// the live blocks and of what the allocator's Stats should say, and checks
// every invariant after every operation. Its methods return an error only
// for a violation, described with the numbers involved.
type harness struct {
	opt Options
	dev *virtual.Device
	a   gpualloc.Allocator

	// optional interfaces, nil where the allocator lacks them
	stats    gpualloc.StatsReporter
	releaser gpualloc.Releaser
	streams  gpualloc.StreamAllocator
	specer   gpualloc.Specer
	space    gpualloc.FreeSpaceReporter

	live []gpualloc.Block // sorted by address

	// what Stats should report
	allocs, frees, hits, ooms int64
	requested, allocated      int64
	peakRequested             int64
	peakAllocated             int64
	prev                      gpualloc.Stats

	step int    // operations done
	op   string // the operation under way, for messages
}

func newHarness(open OpenFunc, opt Options) (*harness, error) {
	dev := NewDevice(opt.Capacity)
	a, err := open(dev)
	if err != nil {
		return nil, fmt.Errorf("open on a device of %d bytes: %v", opt.Capacity, err)
	}
	if a == nil {
		return nil, errors.New("open returned a nil Allocator and no error")
	}
	h := &harness{opt: opt, dev: dev, a: a, op: "open"}
	h.stats, _ = a.(gpualloc.StatsReporter)
	h.releaser, _ = a.(gpualloc.Releaser)
	h.streams, _ = a.(gpualloc.StreamAllocator)
	h.specer, _ = a.(gpualloc.Specer)
	h.space, _ = a.(gpualloc.FreeSpaceReporter)
	if h.stats != nil {
		// An allocator may take memory from the device when it opens; the
		// counters start from there.
		h.prev = h.stats.Stats()
	}
	return h, h.verify()
}

// errorf describes a violation found during the current operation.
func (h *harness) errorf(format string, args ...any) error {
	return fmt.Errorf("op %d, %s: %s", h.step, h.op, fmt.Sprintf(format, args...))
}

func (h *harness) begin(format string, args ...any) {
	h.step++
	h.op = fmt.Sprintf(format, args...)
}

// alloc calls Alloc (or AllocStream when stream is not 0) and checks the
// result. ok is false when the allocator reported ErrOutOfMemory.
func (h *harness) alloc(size int64, stream uint64) (b gpualloc.Block, ok bool, err error) {
	mallocs := allocations(h.dev.Stats())
	if stream != 0 {
		h.begin("AllocStream(%d, %d)", size, stream)
		b, err = h.streams.AllocStream(size, stream)
	} else {
		h.begin("Alloc(%d)", size)
		b, err = h.a.Alloc(size)
	}
	if err != nil {
		if !errors.Is(err, gpualloc.ErrOutOfMemory) {
			free, total := h.dev.MemInfo()
			return b, false, h.errorf("error %q does not wrap gpualloc.ErrOutOfMemory (device: %d of %d bytes free)", err, free, total)
		}
		h.ooms++
		return gpualloc.Block{}, false, h.verify()
	}
	h.op += " = " + fmtBlock(b)
	switch {
	case b.Requested != size:
		return b, false, h.errorf("Requested = %d, want %d", b.Requested, size)
	case b.Size < b.Requested:
		return b, false, h.errorf("Size %d < Requested %d", b.Size, b.Requested)
	case b.Addr%h.opt.Align != 0:
		return b, false, h.errorf("address %#x is not a multiple of %d (%d bytes past one)", b.Addr, h.opt.Align, b.Addr%h.opt.Align)
	case b.Stream != stream:
		return b, false, h.errorf("Stream = %d, want %d", b.Stream, stream)
	case b.Addr+uint64(b.Size) < b.Addr:
		return b, false, h.errorf("block wraps around the address space")
	}
	i := sort.Search(len(h.live), func(i int) bool { return h.live[i].Addr >= b.Addr })
	if i > 0 && h.live[i-1].End() > b.Addr {
		return b, false, h.errorf("block overlaps live block %s", fmtBlock(h.live[i-1]))
	}
	if i < len(h.live) && b.End() > h.live[i].Addr {
		return b, false, h.errorf("block overlaps live block %s", fmtBlock(h.live[i]))
	}
	h.live = slices.Insert(h.live, i, b)
	if allocations(h.dev.Stats()) == mallocs {
		h.hits++
	}
	h.allocs++
	h.requested += b.Requested
	h.allocated += b.Size
	h.peakRequested = max(h.peakRequested, h.requested)
	h.peakAllocated = max(h.peakAllocated, h.allocated)
	return b, true, h.verify()
}

// mustAlloc is alloc where running out of memory is a violation too.
func (h *harness) mustAlloc(size int64) (gpualloc.Block, error) {
	b, ok, err := h.alloc(size, 0)
	if err == nil && !ok {
		free, total := h.dev.MemInfo()
		err = h.errorf("out of memory with %d of %d device bytes free and %d bytes live in %d blocks",
			free, total, h.requested, len(h.live))
	}
	return b, err
}

// allocEach allocates a block of each size, all of which must succeed.
func (h *harness) allocEach(sizes []int64) ([]gpualloc.Block, error) {
	var bs []gpualloc.Block
	for _, size := range sizes {
		b, err := h.mustAlloc(size)
		if err != nil {
			return nil, err
		}
		bs = append(bs, b)
	}
	return bs, nil
}

// allocFree allocates a block of size bytes and frees it, both of which must
// succeed.
func (h *harness) allocFree(size int64) error {
	b, err := h.mustAlloc(size)
	if err != nil {
		return err
	}
	return h.free(b)
}

// free frees a live block, which must succeed.
func (h *harness) free(b gpualloc.Block) error {
	h.begin("Free(%s)", fmtBlock(b))
	i, ok := h.index(b)
	if !ok {
		panic("strategytest: internal error: free of a block the harness does not hold")
	}
	if err := h.a.Free(b); err != nil {
		return h.errorf("error %q freeing a live block", err)
	}
	h.live = slices.Delete(h.live, i, i+1)
	h.frees++
	h.requested -= b.Requested
	h.allocated -= b.Size
	return h.verify()
}

// freeEach frees live blocks in order, which must succeed.
func (h *harness) freeEach(bs []gpualloc.Block) error {
	for _, b := range bs {
		if err := h.free(b); err != nil {
			return err
		}
	}
	return nil
}

// everyOther returns bs[first], bs[first+2], and so on.
func everyOther(bs []gpualloc.Block, first int) []gpualloc.Block {
	var r []gpualloc.Block
	for i := first; i < len(bs); i += 2 {
		r = append(r, bs[i])
	}
	return r
}

// freeInvalid frees a block that is not live, which must fail with
// ErrInvalidFree and change nothing.
func (h *harness) freeInvalid(b gpualloc.Block, what string) error {
	h.begin("Free(%s) of %s", fmtBlock(b), what)
	st, dev := h.snapshot()
	err := h.a.Free(b)
	if !errors.Is(err, gpualloc.ErrInvalidFree) {
		return h.errorf("got error %v, want one wrapping gpualloc.ErrInvalidFree", err)
	}
	if err := h.unchanged(st, dev); err != nil {
		return err
	}
	return h.verify()
}

// allocInvalid asks for size < 1 bytes, which must fail with ErrInvalidSize
// and change nothing.
func (h *harness) allocInvalid(size int64) error {
	h.begin("Alloc(%d)", size)
	st, dev := h.snapshot()
	b, err := h.a.Alloc(size)
	if !errors.Is(err, gpualloc.ErrInvalidSize) {
		return h.errorf("got %s, error %v; want an error wrapping gpualloc.ErrInvalidSize", fmtBlock(b), err)
	}
	if err := h.unchanged(st, dev); err != nil {
		return err
	}
	return h.verify()
}

// release calls ReleaseAll.
func (h *harness) release() error {
	h.begin("ReleaseAll()")
	if err := h.releaser.ReleaseAll(); err != nil {
		return h.errorf("error %q", err)
	}
	return h.verify()
}

// drain frees every live block, most recent address first, then, for a
// Releaser, releases the cache and checks that the device holds nothing.
func (h *harness) drain() error {
	for len(h.live) > 0 {
		if err := h.free(h.live[len(h.live)-1]); err != nil {
			return err
		}
	}
	if h.releaser == nil {
		return nil
	}
	if err := h.release(); err != nil {
		return err
	}
	return h.deviceEmpty()
}

// deviceEmpty checks that the allocator holds nothing from the device.
func (h *harness) deviceEmpty() error {
	if ds := h.dev.Stats(); ds.Used != 0 || ds.Regions != 0 {
		return h.errorf("no block is live and the cache was released, yet the device holds %d bytes in %d regions %s and %d bytes of physical memory; want 0",
			ds.Used, ds.Regions, fmtRegions(h.dev.Regions()), ds.Physical)
	}
	if ds := h.dev.Stats(); ds.Ranges != 0 {
		return h.errorf("no block is live and the cache was released, yet %d address ranges (%d bytes) are still reserved; want 0",
			ds.Ranges, ds.AddressSpace)
	}
	return nil
}

func (h *harness) index(b gpualloc.Block) (int, bool) {
	i := sort.Search(len(h.live), func(i int) bool { return h.live[i].Addr >= b.Addr })
	return i, i < len(h.live) && h.live[i] == b
}

func (h *harness) snapshot() (gpualloc.Stats, virtual.Stats) {
	var st gpualloc.Stats
	if h.stats != nil {
		st = h.stats.Stats()
	}
	return st, h.dev.Stats()
}

// unchanged checks that neither the allocator's stats nor the device changed
// since the snapshot.
func (h *harness) unchanged(st gpualloc.Stats, dev virtual.Stats) error {
	if now := h.dev.Stats(); now != dev {
		return h.errorf("the device changed: %+v, was %+v", now, dev)
	}
	if h.stats != nil {
		if now := h.stats.Stats(); now != st {
			return h.errorf("Stats changed: %s", diffStats(st, now))
		}
	}
	return nil
}

// verify checks every invariant: the device saw no invalid call; live blocks
// lie inside regions the allocator holds from the device and overlap no
// other; the free space reported lies in the rest of that memory; the stats
// add up against the blocks and the device.
func (h *harness) verify() error {
	ds := h.dev.Stats()
	if ds.InvalidCalls != 0 {
		return h.errorf("the allocator made %d invalid device calls; the first: %v", ds.InvalidCalls, h.dev.Err())
	}
	for i, b := range h.live {
		if !h.dev.Holds(b.Addr, b.Size) {
			return h.errorf("live block %s lies outside the memory the allocator holds from the device %s",
				fmtBlock(b), fmtRegions(h.dev.Regions()))
		}
		if i > 0 && h.live[i-1].End() > b.Addr {
			return h.errorf("live blocks %s and %s overlap", fmtBlock(h.live[i-1]), fmtBlock(b))
		}
	}
	if h.space != nil {
		// Free space lies in memory held from the device and not in live
		// blocks; its largest block is part of it.
		largest, total := h.space.FreeSpace()
		if room := ds.Used - h.allocated; largest < 0 || largest > total || total > room || (largest == 0) != (total == 0) {
			return h.errorf("FreeSpace() = (largest %d, total %d), want 0 <= largest <= total <= %d (held from the device less live blocks), and largest 0 only when total is",
				largest, total, room)
		}
	}
	if h.stats == nil {
		return nil
	}
	s := h.stats.Stats()
	var bad []string
	eq := func(field string, got, want int64, what string) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s = %d, want %d (%s)", field, got, want, what))
		}
	}
	atLeast := func(field string, got, min int64, what string) {
		if got < min {
			bad = append(bad, fmt.Sprintf("%s = %d, want at least %d (%s)", field, got, min, what))
		}
	}
	n := len(h.live)
	eq("Requested", s.Requested, h.requested, fmt.Sprintf("sum of Requested over %d live blocks", n))
	eq("Allocated", s.Allocated, h.allocated, fmt.Sprintf("sum of Size over %d live blocks", n))
	eq("Reserved", s.Reserved, ds.Used, fmt.Sprintf("bytes the device holds in %d regions", ds.Regions))
	eq("Allocs", s.Allocs, h.allocs, "successful Alloc calls")
	eq("Frees", s.Frees, h.frees, "successful Free calls")
	eq("Allocs-Frees", s.Allocs-s.Frees, int64(n), "live blocks")
	eq("DeviceMallocs", s.DeviceMallocs, allocations(ds), "successful device mallocs and creates")
	eq("DeviceFrees", s.DeviceFrees, ds.Frees+ds.Releases, "device frees and releases")
	eq("DeviceMallocBytes", s.DeviceMallocBytes, ds.MallocBytes+ds.CreateBytes, "bytes of successful device mallocs and creates")
	eq("DeviceMaps", s.DeviceMaps, ds.Maps, "successful device maps")
	eq("DeviceUnmaps", s.DeviceUnmaps, ds.Unmaps, "successful device unmaps")
	eq("CacheHits", s.CacheHits, h.hits, "successful Alloc calls that made no device malloc")
	eq("OOMs", s.OOMs, h.ooms, "Alloc calls that failed with ErrOutOfMemory")
	eq("PeakRequested", s.PeakRequested, h.peakRequested, "largest Requested so far")
	eq("PeakAllocated", s.PeakAllocated, h.peakAllocated, "largest Allocated so far")
	atLeast("PeakReserved", s.PeakReserved, s.Reserved, "Reserved")
	atLeast("PeakReserved", s.PeakReserved, h.prev.PeakReserved, "the peak reported before: peaks never fall")
	if s.PeakReserved > ds.PeakUsed {
		bad = append(bad, fmt.Sprintf("PeakReserved = %d, want at most %d (the most the device ever held)", s.PeakReserved, ds.PeakUsed))
	}
	atLeast("Retries", s.Retries, h.prev.Retries, "the count reported before")
	if s.Retries > ds.FailedMallocs {
		bad = append(bad, fmt.Sprintf("Retries = %d, want at most %d (device mallocs that failed)", s.Retries, ds.FailedMallocs))
	}
	if len(bad) > 0 {
		return h.errorf("Stats do not add up:\n\t%s", strings.Join(bad, "\n\t"))
	}
	h.prev = s
	return nil
}

func fmtBlock(b gpualloc.Block) string {
	s := fmt.Sprintf("{Addr:%#x Size:%d Requested:%d", b.Addr, b.Size, b.Requested)
	if b.Stream != 0 {
		s += fmt.Sprintf(" Stream:%d", b.Stream)
	}
	return s + "}"
}

// fmtRegions lists up to 8 regions for a message.
func fmtRegions(rs []virtual.Region) string {
	var sb strings.Builder
	sb.WriteString("[")
	for i, r := range rs {
		if i == 8 {
			fmt.Fprintf(&sb, " ... %d more", len(rs)-i)
			break
		}
		if i > 0 {
			sb.WriteString(" ")
		}
		fmt.Fprintf(&sb, "%#x+%d", r.Addr, r.Size)
	}
	sb.WriteString("]")
	return sb.String()
}

// diffStats lists the fields that differ between two Stats.
func diffStats(was, now gpualloc.Stats) string {
	type field struct {
		name     string
		was, now int64
	}
	fields := []field{
		{"Requested", was.Requested, now.Requested},
		{"Allocated", was.Allocated, now.Allocated},
		{"Reserved", was.Reserved, now.Reserved},
		{"PeakRequested", was.PeakRequested, now.PeakRequested},
		{"PeakAllocated", was.PeakAllocated, now.PeakAllocated},
		{"PeakReserved", was.PeakReserved, now.PeakReserved},
		{"Allocs", was.Allocs, now.Allocs},
		{"Frees", was.Frees, now.Frees},
		{"DeviceMallocs", was.DeviceMallocs, now.DeviceMallocs},
		{"DeviceFrees", was.DeviceFrees, now.DeviceFrees},
		{"DeviceMallocBytes", was.DeviceMallocBytes, now.DeviceMallocBytes},
		{"DeviceMaps", was.DeviceMaps, now.DeviceMaps},
		{"DeviceUnmaps", was.DeviceUnmaps, now.DeviceUnmaps},
		{"CacheHits", was.CacheHits, now.CacheHits},
		{"OOMs", was.OOMs, now.OOMs},
		{"Retries", was.Retries, now.Retries},
	}
	var parts []string
	for _, f := range fields {
		if f.was != f.now {
			parts = append(parts, fmt.Sprintf("%s %d -> %d", f.name, f.was, f.now))
		}
	}
	return strings.Join(parts, ", ")
}

// allocations returns the device allocations: Malloc and Create calls.
func allocations(s virtual.Stats) int64 { return s.Mallocs + s.Creates }
