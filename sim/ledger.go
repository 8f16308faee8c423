package sim

// Where the memory goes: the engine's ledger of each device's allocations,
// which splits reserved memory into live, rounding, fragmented and cached
// bytes (see Result.AtPeakLiveBytes).
//
// A device allocation is a region that the backend's Malloc returned, or
// physical memory that a gpualloc.VirtualMemory's Create made. The ledger
// keeps, for each, how many live blocks overlap it (through its own range,
// or through the ranges at which Map mapped it), and the running total of
// the bytes of those that no live block overlaps: the cached bytes. Then,
// at any moment,
//
//	live       = requested bytes of the blocks served
//	rounding   = handed-out bytes - live
//	cached     = the ledger's total
//	fragmented = reserved - handed-out - cached
//
// and the four add up to the reserved bytes by construction. Fragmented is
// the free space inside the device allocations that hold a live block.
//
// Cost: nothing per event while the peak is not moving, near enough. A
// block handed out from the pool is not counted at once: its slot joins a
// pending list (one store), and the list is resolved, each block still
// live counted once, when a split is taken (a new peak); past maxPending
// blocks the list stops and the split looks at every slot. A free of a
// block never counted is one compare. A block that made a device
// allocation is counted at once; one that fills the region made for it
// (unpooled, every event) holds that region with no record at all, made
// only if the strategy keeps the region when the block is freed. A block
// being counted is found in its address range through the range of the
// last block, then a direct-mapped cache keyed by its address, then the
// table of ranges by start address, then a sorted index of the ranges,
// built when first needed and kept while lookups use it (O(log ranges) a
// lookup, O(ranges) a range added out of address order or removed while
// it is kept, O(ranges log ranges) to build it again). The free of a
// counted block finds its range in O(1) from the slot; a device free finds
// its region through the block just freed or the table. A block over k
// ranges (the pages of an expandable segment, GMLake's chunks) costs O(k)
// when counted and when freed. Nothing is allocated per event once the
// records, the table and the index have grown.

import (
	"cmp"
	"math"
	"slices"
)

// record kinds
const (
	recFree    = iota // a spare record
	recRegion         // a region that Malloc returned: its own range and its own allocation
	recMemory         // physical memory from Create: mapped by recMapping records
	recMapping        // a range at which Map mapped physical memory
)

// A ledgerRec is the ledger's record of a device allocation or of an
// address range of one.
type ledgerRec struct {
	start, end uint64 // the range; 0, 0 for physical memory and for a spare record
	size       int64  // bytes held from the device: a region's, physical memory's; 0 for a mapping
	owner      int32  // the record of the allocation: itself for a region, the memory for a mapping
	live       int32  // live blocks that overlap the range
	hold       int32  // overlaps of live blocks with the allocation's ranges
	kind       uint8
}

// ledgerBits is the log2 of the size of the direct-mapped cache of ranges,
// keyed by a hash of a block's address (aligned to 512 bytes, as every
// device hands them out): a block handed out again, or at the start of its
// range, is found at once.
const ledgerBits = 12

func ledgerKey(addr uint64) int { return int(((addr >> 9) * 0x9e3779b97f4a7c15) >> (64 - ledgerBits)) }

// An indexEntry is a range in the index: its start, beside its record, so
// that a search reads the index alone.
type indexEntry struct {
	start uint64
	id    int32
}

// A ledger is one device's record of its allocations. Record 0 is never
// used, so that 0 means none: it holds no range, and every lookup that
// lands on it fails. The engine makes it with newLedger.
type ledger struct {
	recs    []ledgerRec
	spare   []int32
	index   []indexEntry // the ranges, by start address, while indexed
	indexed bool         // index holds every range
	used    bool         // a lookup used the index since it last changed
	last    int32        // the range that the last block was found in
	hint    int32        // the range of the block being freed
	cache   [1 << ledgerBits]int32
	pos     [1 << ledgerBits]int32 // where walk found the first range of a block over several, by the block's address
	cached  int64                  // bytes of the allocations that hold no live block
	ranges  int                    // records with a range
	orphan  int64                  // bytes of the live blocks that lie in no range
	starts  startTable             // the ranges by start address
	// pending[:npend] are the slots of the blocks handed out since the
	// last resolve, not counted yet (their span is spanPending), at most
	// maxPending; past that, overflow is set and resolve looks at every
	// slot.
	pending  *[maxPending]int32
	npend    uint
	overflow bool
	// fresh is the region the last Malloc returned, while it has no
	// record: the block of the event may fill it (see engine.alloc).
	// freshSize is 0 when there is none.
	freshAddr uint64
	freshSize int64
	// own is the address of the region of a block that fills it, while
	// the block is freed: a device free of it needs no record.
	own    uint64
	owning bool
}

// Slot spans of blocks the ledger does not count: one handed out and not
// counted yet (see ledger.pending), one that fills a region of its own.
const (
	spanPending = math.MinInt32
	spanOwn     = math.MinInt32 + 2 // the block fills a region that has no record (see engine.alloc)
)

// maxPending is the most blocks the pending list holds: past them, a
// resolve looks at every slot, which costs less than noting each block
// when splits are far apart.
const maxPending = 4096

func newLedger() ledger {
	return ledger{recs: make([]ledgerRec, 1, 16), pending: new([maxPending]int32)}
}

// resolve counts the blocks handed out since it last ran that are still
// live in their device allocations. It runs when a split is taken (see
// cachedNow). O(pending blocks), or O(slots) after an overflow, and a
// lookup for each block still live: a block is looked up at most once,
// and only if it lives until a split.
func (d *device) resolve() {
	l := &d.led
	slots := d.e.slots
	if l.overflow {
		for i := range slots {
			d.resolveSlot(&slots[i])
		}
	} else {
		for _, i := range l.pending[:l.npend] {
			d.resolveSlot(&slots[i])
		}
	}
	l.npend, l.overflow = 0, false
}

// resolveSlot counts the block of slot s in the ledger, if it is one of
// the device's pending blocks.
func (d *device) resolveSlot(s *slot) {
	if s.span != spanPending || int(s.dev) != d.index || s.state != slotLive && s.state != slotHeld {
		return
	}
	s.span = d.holdBlock(s.block.Addr, s.block.End(), s.block.Size)
}

// unledger takes the block of slot s, which is being freed, out of the
// ledger: a block counted in a range leaves it, so that a device free of
// its region finds it through the hint (a region's record is never reused
// while a block counts in it, see dropRec: the slot's span is the block's
// region). (The free of a block that fills its region notes the region
// itself, for the device free that may follow: see engine.free.)
func (d *device) unledger(s *slot) {
	l := &d.led
	sp := s.span
	if r := &l.recs[max(sp, 0)]; r.kind == recRegion && r.hold > 0 {
		if r.hold--; r.hold == 0 {
			d.addCached(r.size)
		}
	} else if sp != -1 {
		d.releaseSlow(sp, s.block.Addr, s.block.End())
	} else {
		l.orphan -= s.block.Size
	}
	l.hint = sp // a stale hint is harmless: find checks it
}

// holdBlock counts a live block over [addr, end) of size bytes and returns
// its span (see holdSlow): the region of the last block is tried first, as
// it nearly always is in a pool of few regions.
func (d *device) holdBlock(addr, end uint64, size int64) int32 {
	l := &d.led
	if l.freshSize != 0 {
		l.flush()
	}
	span := int32(-1)
	if r := &l.recs[l.last]; r.kind == recRegion && r.start <= addr && end <= r.end {
		if r.hold++; r.hold == 1 {
			d.addCached(-r.size)
		}
		span = l.last
	} else if l.ranges > 0 {
		span = d.holdSlow(addr, end)
	}
	if span == -1 {
		l.orphan += size
	}
	return span
}

// split is the breakdown of reserved bytes at one moment.
type split struct {
	live, rounding, fragmented, cached int64
}

// addCached adds n bytes to the device's cached bytes.
func (d *device) addCached(n int64) { d.led.cached += n }

// newRec makes a record of kind over [start, end) (0, 0 for physical
// memory) of size bytes, owned by owner (0: by itself), and returns it.
func (l *ledger) newRec(kind uint8, start, end uint64, size int64, owner int32) int32 {
	var id int32
	if k := len(l.spare); k > 0 {
		id = l.spare[k-1]
		l.spare = l.spare[:k-1]
	} else {
		id = int32(len(l.recs))
		l.recs = append(l.recs, ledgerRec{})
	}
	if owner == 0 {
		owner = id
	}
	r := &l.recs[id]
	r.start, r.end, r.size, r.owner, r.kind = start, end, size, owner, kind
	if end != 0 {
		l.ranges++
		if l.indexed {
			l.insert(id)
		}
		l.cache[ledgerKey(start)] = id
		l.starts.put(start, id)
		l.last = id
	}
	return id
}

// dropRec drops record id. A range that live blocks still count in
// (which a strategy should not free) keeps its record, emptied, for good,
// so that the slots that name it never name another: the engine's free
// trusts a slot's region.
func (l *ledger) dropRec(id int32) {
	r := &l.recs[id]
	if r.end != 0 {
		l.ranges--
		l.starts.del(r.start, id)
		if l.indexed {
			l.remove(id)
		}
	}
	r.start, r.end, r.size = 0, 0, 0
	if r.hold > 0 && r.kind == recRegion || r.live > 0 && r.kind == recMapping {
		return
	}
	r.kind, r.hold, r.live = recFree, 0, 0
	l.spare = append(l.spare, id)
}

// region notes a region of size bytes at addr that Malloc returned: it
// stays fresh, with no record, until the event's block is known to fill it
// or another use of the ledger needs it (see flush).
func (d *device) region(addr uint64, size int64) {
	l := &d.led
	if l.freshSize != 0 {
		l.flush()
	}
	l.freshAddr, l.freshSize = addr, size
}

// flush makes the record of the fresh region, which holds no block. Not
// inlined, so that region, on the path of every device allocation, is.
//
//go:noinline
func (l *ledger) flush() {
	l.newRec(recRegion, l.freshAddr, l.freshAddr+uint64(l.freshSize), l.freshSize, 0)
	l.cached += l.freshSize
	l.freshSize = 0
}

// ownFreed makes the record of the region at addr of size bytes that the
// block just freed filled, when the strategy kept the region: it holds no
// live block.
func (d *device) ownFreed(addr uint64, size int64) {
	d.led.owning = false
	if d.led.freshSize != 0 {
		d.led.flush()
	}
	d.led.newRec(recRegion, addr, addr+uint64(size), size, 0)
	d.addCached(size)
}

// regionFreed notes the Free of the region at addr. A region the ledger
// does not know changes nothing. The region of the block just freed, which
// filled it, is the common case, inlined.
func (d *device) regionFreed(addr uint64) {
	if l := &d.led; l.owning && addr == l.own {
		l.owning = false
		return
	}
	d.recordFreed(addr)
}

// recordFreed is regionFreed for a region that may have a record.
func (d *device) recordFreed(addr uint64) {
	l := &d.led
	if l.freshSize != 0 && addr == l.freshAddr {
		l.freshSize = 0
		return
	}
	id := l.find(addr)
	if id == 0 || l.recs[id].kind != recRegion {
		return
	}
	if r := &l.recs[id]; r.hold == 0 {
		d.addCached(-r.size)
	}
	l.dropRec(id)
}

// memory notes physical memory of size bytes and returns its record.
func (d *device) memory(size int64) int32 {
	id := d.led.newRec(recMemory, 0, 0, size, 0)
	d.addCached(size)
	return id
}

// memoryReleased notes the Release of the physical memory of record id.
func (d *device) memoryReleased(id int32) {
	l := &d.led
	if id <= 0 || int(id) >= len(l.recs) || l.recs[id].kind != recMemory {
		return
	}
	if r := &l.recs[id]; r.hold == 0 {
		d.addCached(-r.size)
	}
	l.dropRec(id)
}

// mapped notes the mapping of the physical memory of record mem at addr.
func (d *device) mapped(addr uint64, mem int32) {
	l := &d.led
	if mem <= 0 || int(mem) >= len(l.recs) || l.recs[mem].kind != recMemory {
		return
	}
	l.newRec(recMapping, addr, addr+uint64(l.recs[mem].size), 0, mem)
}

// unmapped notes the Unmap of the mapping at addr. Live blocks that still
// overlap it (which a strategy should not leave) stop counting for its
// memory.
func (d *device) unmapped(addr uint64) {
	l := &d.led
	id := l.find(addr)
	if id == 0 || l.recs[id].kind != recMapping {
		return
	}
	if r := &l.recs[id]; r.live > 0 {
		o := &l.recs[r.owner]
		o.hold -= r.live
		if o.hold <= 0 {
			o.hold = 0
			d.addCached(o.size)
		}
	}
	l.dropRec(id)
}

// holdSlow counts a live block over [addr, end) in the ranges it
// overlaps, and returns the range that holds all of it; else, when it
// overlaps ranges (several, or one in part), -2 - the position in the
// index of the first (see walk); else -1. (The engine tries the region of
// the last block itself first: see engine.alloc.)
func (d *device) holdSlow(addr, end uint64) int32 {
	l := &d.led
	if id := l.cache[ledgerKey(addr)]; id != 0 {
		if r := &l.recs[id]; r.start <= addr && end <= r.end {
			l.last = id
			d.hold(id)
			return id
		}
	}
	if id := l.starts.get(addr); id != 0 {
		if r := &l.recs[id]; end <= r.end {
			l.last = id
			d.hold(id)
			return id
		}
	}
	return d.walk(addr, end, +1, int(l.pos[ledgerKey(addr)]))
}

// releaseSlow undoes holdSlow for a block that is freed; span is what
// holdSlow returned. (The engine tries a span that is a region itself
// first: see engine.free.)
func (d *device) releaseSlow(span int32, addr, end uint64) {
	l := &d.led
	if span == -1 {
		return // the block lay in no range
	}
	if span > 0 {
		r := &l.recs[span]
		if r.kind == recMapping && r.end == 0 {
			// Unmapped under the block, which stopped counting then.
			r.live = max(r.live-1, 0)
			return
		}
		if r.kind == recMapping && r.live > 0 && r.start <= addr && end <= r.end {
			d.unhold(span)
			return
		}
	}
	d.walk(addr, end, -1, int(-span-2))
}

// walk counts (by +1) or uncounts (by -1) a block over [addr, end) in every
// range it overlaps, through the index, and returns what holdSlow
// returns: the range that holds all of the block; else, when the block
// overlaps ranges, -2 - the position in the index of the first, which
// releaseSlow gives back as at, where the search starts when the range
// there still holds addr (positions move as ranges come and go); else -1.
func (d *device) walk(addr, end uint64, by int, at int) int32 {
	l := &d.led
	l.search()
	i := at
	if i < 0 || i >= len(l.index) || l.index[i].start > addr || l.recs[l.index[i].id].end <= addr {
		i = max(l.upper(addr)-1, 0)
	}
	first := i
	found, n := int32(-1), 0
	for ; i < len(l.index) && l.index[i].start < end; i++ {
		id := l.index[i].id
		r := &l.recs[id]
		if r.end <= addr {
			continue
		}
		n++
		if by > 0 {
			d.hold(id)
			if r.start <= addr && end <= r.end {
				found = id
			}
		} else if r.live > 0 || r.kind == recRegion && r.hold > 0 {
			d.unhold(id)
		}
	}
	if n == 0 {
		return -1
	}
	if n > 1 || found < 0 {
		l.pos[ledgerKey(addr)] = int32(first)
		return int32(-2 - first)
	}
	l.last = found
	l.cache[ledgerKey(addr)] = found
	return found
}

// hold counts one live block more in range id. A region counts its live
// blocks in hold alone, a mapping in live and in its memory's hold.
func (d *device) hold(id int32) {
	r := &d.led.recs[id]
	if r.kind == recMapping {
		r.live++
	}
	o := &d.led.recs[r.owner]
	o.hold++
	if o.hold == 1 {
		d.addCached(-o.size)
	}
}

// unhold counts one live block less in range id.
func (d *device) unhold(id int32) {
	r := &d.led.recs[id]
	if r.kind == recMapping {
		r.live--
	}
	o := &d.led.recs[r.owner]
	if o.hold > 0 {
		o.hold--
		if o.hold == 0 {
			d.addCached(o.size)
		}
	}
}

// find returns the range that starts at addr, 0 if there is none.
func (l *ledger) find(addr uint64) int32 {
	if l.freshSize != 0 {
		l.flush()
	}
	if id := l.hint; id > 0 && l.recs[id].start == addr && l.recs[id].end != 0 {
		return id
	}
	if id := l.last; l.recs[id].start == addr && l.recs[id].end != 0 {
		return id
	}
	if id := l.cache[ledgerKey(addr)]; l.recs[id].start == addr && l.recs[id].end != 0 {
		return id
	}
	return l.starts.get(addr)
}

// search makes the index ready for a lookup, building it if need be.
func (l *ledger) search() {
	l.used = true
	if l.indexed {
		return
	}
	l.index = l.index[:0]
	for id, r := range l.recs {
		if r.end != 0 {
			l.index = append(l.index, indexEntry{r.start, int32(id)})
		}
	}
	slices.SortFunc(l.index, func(a, b indexEntry) int { return cmp.Compare(a.start, b.start) })
	l.indexed = true
}

// upper returns the position in the index of the first range that starts
// after addr.
func (l *ledger) upper(addr uint64) int {
	lo, hi := 0, len(l.index)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.index[m].start <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// insert adds range id to the index, when it is kept.
func (l *ledger) insert(id int32) {
	if !l.indexed {
		return
	}
	start := l.recs[id].start
	if n := len(l.index); n == 0 || l.index[n-1].start < start {
		l.index = append(l.index, indexEntry{start, id})
		return
	}
	if !l.used {
		l.indexed = false
		return
	}
	l.index = slices.Insert(l.index, l.upper(start), indexEntry{start, id})
	l.used = false
}

// remove takes range id out of the index: in place while lookups use the
// index, else the index is dropped until a lookup needs it again.
func (l *ledger) remove(id int32) {
	if !l.indexed {
		return
	}
	n := len(l.index)
	if n > 0 && l.index[n-1].id == id {
		l.index = l.index[:n-1]
		return
	}
	if !l.used {
		l.indexed = false
		return
	}
	start := l.recs[id].start
	for i := l.upper(start) - 1; i >= 0 && l.index[i].start == start; i-- {
		if l.index[i].id == id {
			l.index = slices.Delete(l.index, i, i+1)
			l.used = false
			return
		}
	}
	l.indexed = false
}

// takeSplit notes the device's split of its reserved bytes now.
func (d *device) takeSplit() {
	cached := d.cachedNow()
	d.split = split{
		live: d.requested, rounding: d.allocated - d.requested,
		fragmented: d.reserved - d.allocated - cached, cached: cached,
	}
}

// cachedNow returns the device's cached bytes. Blocks that lie in no
// device allocation the ledger knows (a strategy that hands out addresses
// of its own, as pytorch's expandable segments do on a backend without
// virtual memory) are held by allocations it cannot name: they are taken
// to fill allocations that hold no known block, whose bytes, as many as
// theirs, stop counting as cached.
func (d *device) cachedNow() int64 {
	if d.led.npend > 0 || d.led.overflow {
		d.resolve()
	}
	return max(d.led.cached+d.led.freshSize-d.led.orphan, 0)
}

// takeSplit notes the split of the reserved bytes of all devices now.
// O(devices).
func (e *engine) takeSplit() {
	var served, cached int64
	for _, d := range e.devs {
		if d != nil {
			served += d.requested
			cached += d.cachedNow()
		}
	}
	e.split = split{
		live: served, rounding: e.allocated - served,
		fragmented: e.reserved - e.allocated - cached, cached: cached,
	}
}

// afterPeak runs after an event when the peak moved since free space was
// last taken, or while a split is that of a moment inside an event.
func (e *engine) afterPeak() {
	if e.peakRes != e.peakSeen {
		e.takeFreeSpace()
	}
	if e.unsettled {
		e.settle()
	}
	e.watch = e.peakSeen
	if e.unsettled {
		e.watch = -1
	}
}

// settle runs after an event while the split at the peak of the engine or
// of a device is that of a moment inside an event (see malloced): the
// split is that of the state after the first event after which reserved
// memory stands at its peak. O(devices).
func (e *engine) settle() {
	still := false
	if !e.splitAfter {
		if e.reserved == e.peakRes {
			e.takeSplit()
			e.splitAfter = true
		} else {
			still = true
		}
	}
	for _, d := range e.devs {
		if d == nil || d.splitAfter {
			continue
		}
		if d.reserved == d.peakRes {
			d.takeSplit()
			d.splitAfter = true
		} else {
			still = true
		}
	}
	e.unsettled = still
}
