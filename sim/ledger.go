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
// Cost: a block is found in its address range through the range of the
// last block, then a direct-mapped cache keyed by its address's 2 MiB
// page, then a sorted index of the ranges, which is built when first
// needed and kept while lookups use it (O(log ranges) a lookup, O(ranges)
// a range added out of address order or removed while it is kept, O(ranges
// log ranges) to build it again). A free finds its block's range in O(1)
// from the slot, which notes it; a device free finds its region through
// the block just freed. A block over k ranges (the pages of an expandable
// segment, GMLake's chunks) costs O(k) at its alloc and its free. Nothing
// is allocated per event once the records and the index have grown.

import (
	"cmp"
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

// ledgerSlots is the size of the direct-mapped cache of ranges.
const ledgerSlots = 256

func ledgerKey(addr uint64) int { return int(addr>>21) & (ledgerSlots - 1) }

// A ledger is one device's record of its allocations. Record 0 is never
// used, so that 0 means none: it holds no range, and every lookup that
// lands on it fails.
type ledger struct {
	recs    []ledgerRec
	spare   []int32
	index   []int32 // the ranges, by start address, while indexed
	indexed bool    // index holds every range
	used    bool    // a lookup used the index since it last changed
	last    int32   // the range that the last block was found in
	hint    int32   // the range of the block being freed
	cache   [ledgerSlots]int32
	cached  int64 // bytes of the allocations that hold no live block
}

// split is the breakdown of reserved bytes at one moment.
type split struct {
	live, rounding, fragmented, cached int64
}

// addCached adds n bytes to the device's and the engine's cached bytes.
func (d *device) addCached(n int64) {
	d.led.cached += n
	d.e.cached += n
}

func (l *ledger) newRec(r ledgerRec) int32 {
	if len(l.recs) == 0 {
		l.recs = append(l.recs, ledgerRec{}) // record 0
	}
	var id int32
	if k := len(l.spare); k > 0 {
		id = l.spare[k-1]
		l.spare = l.spare[:k-1]
		l.recs[id] = r
	} else {
		id = int32(len(l.recs))
		l.recs = append(l.recs, r)
	}
	if r.kind == recRegion {
		l.recs[id].owner = id
	}
	if r.end != 0 {
		l.insert(id)
		l.cache[ledgerKey(r.start)] = id
		l.last = id
	}
	return id
}

func (l *ledger) dropRec(id int32) {
	if l.recs[id].end != 0 {
		l.remove(id)
	}
	l.recs[id] = ledgerRec{}
	l.spare = append(l.spare, id)
}

// region notes a region of size bytes at addr that Malloc returned.
func (d *device) region(addr uint64, size int64) {
	d.led.newRec(ledgerRec{start: addr, end: addr + uint64(size), size: size, kind: recRegion})
	d.addCached(size)
}

// regionFreed notes the Free of the region at addr. A region the ledger
// does not know changes nothing.
func (d *device) regionFreed(addr uint64) {
	l := &d.led
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
	id := d.led.newRec(ledgerRec{size: size, kind: recMemory})
	d.led.recs[id].owner = id
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
	l.newRec(ledgerRec{start: addr, end: addr + uint64(l.recs[mem].size), owner: mem, kind: recMapping})
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

// holdBlock counts a live block of size bytes at addr in the ranges it
// overlaps, and returns the range that holds all of it, or -1 when it
// overlaps several ranges, or ranges only in part, or none.
func (d *device) holdBlock(addr uint64, size int64) int32 {
	l := &d.led
	if len(l.recs) == 0 {
		return -1
	}
	end := addr + uint64(size)
	if r := &l.recs[l.last]; r.start <= addr && end <= r.end {
		d.hold(l.last)
		return l.last
	}
	if id := l.cache[ledgerKey(addr)]; id != 0 {
		if r := &l.recs[id]; r.start <= addr && end <= r.end {
			l.last = id
			d.hold(id)
			return id
		}
	}
	return d.walk(addr, end, +1)
}

// releaseBlock undoes holdBlock for a block that is freed; span is what
// holdBlock returned.
func (d *device) releaseBlock(span int32, addr uint64, size int64) {
	l := &d.led
	end := addr + uint64(size)
	if span > 0 {
		if r := &l.recs[span]; r.live > 0 && r.start <= addr && end <= r.end {
			d.unhold(span)
			return
		}
	}
	if len(l.recs) > 0 {
		d.walk(addr, end, -1)
	}
}

// walk counts (by +1) or uncounts (by -1) a block over [addr, end) in every
// range it overlaps, through the index, and returns what holdBlock
// returns.
func (d *device) walk(addr, end uint64, by int) int32 {
	l := &d.led
	l.search()
	i := max(l.upper(addr)-1, 0)
	found, n := int32(-1), 0
	for ; i < len(l.index) && l.recs[l.index[i]].start < end; i++ {
		id := l.index[i]
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
		} else if r.live > 0 {
			d.unhold(id)
		}
	}
	if n != 1 || found < 0 {
		return -1
	}
	l.last = found
	l.cache[ledgerKey(addr)] = found
	return found
}

// hold counts one live block more in range id.
func (d *device) hold(id int32) {
	r := &d.led.recs[id]
	r.live++
	o := &d.led.recs[r.owner]
	o.hold++
	if o.hold == 1 {
		d.addCached(-o.size)
	}
}

// unhold counts one live block less in range id.
func (d *device) unhold(id int32) {
	r := &d.led.recs[id]
	r.live--
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
	if len(l.recs) == 0 {
		return 0
	}
	for _, id := range [...]int32{l.hint, l.last, l.cache[ledgerKey(addr)]} {
		if id > 0 && int(id) < len(l.recs) && l.recs[id].start == addr && l.recs[id].end != 0 {
			return id
		}
	}
	l.search()
	if i := l.upper(addr) - 1; i >= 0 && l.recs[l.index[i]].start == addr {
		return l.index[i]
	}
	return 0
}

// search makes the index ready for a lookup, building it if need be.
func (l *ledger) search() {
	l.used = true
	if l.indexed {
		return
	}
	l.index = l.index[:0]
	for id := range l.recs {
		if l.recs[id].end != 0 {
			l.index = append(l.index, int32(id))
		}
	}
	slices.SortFunc(l.index, func(a, b int32) int { return cmp.Compare(l.recs[a].start, l.recs[b].start) })
	l.indexed = true
}

// upper returns the position in the index of the first range that starts
// after addr.
func (l *ledger) upper(addr uint64) int {
	lo, hi := 0, len(l.index)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.recs[l.index[m]].start <= addr {
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
	if n := len(l.index); n == 0 || l.recs[l.index[n-1]].start < start {
		l.index = append(l.index, id)
		return
	}
	if !l.used {
		l.indexed = false
		return
	}
	l.index = slices.Insert(l.index, l.upper(start), id)
	l.used = false
}

// remove takes range id out of the index: in place while lookups use the
// index, else the index is dropped until a lookup needs it again.
func (l *ledger) remove(id int32) {
	if !l.indexed {
		return
	}
	n := len(l.index)
	if n > 0 && l.index[n-1] == id {
		l.index = l.index[:n-1]
		return
	}
	if !l.used {
		l.indexed = false
		return
	}
	start := l.recs[id].start
	for i := l.upper(start) - 1; i >= 0 && l.recs[l.index[i]].start == start; i-- {
		if l.index[i] == id {
			l.index = slices.Delete(l.index, i, i+1)
			l.used = false
			return
		}
	}
	l.indexed = false
}

// takeSplit notes the device's split of its reserved bytes now.
func (d *device) takeSplit() {
	d.split = split{
		live: d.requested, rounding: d.allocated - d.requested,
		fragmented: d.reserved - d.allocated - d.led.cached, cached: d.led.cached,
	}
}

// takeSplit notes the split of the reserved bytes of all devices now.
func (e *engine) takeSplit() {
	e.split = split{
		live: e.served, rounding: e.allocated - e.served,
		fragmented: e.reserved - e.allocated - e.cached, cached: e.cached,
	}
}
