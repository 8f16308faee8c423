package traces

// A pairing keeps the live allocations of a trace for the readers of
// formats other than the native one: it gives each allocation its Slot, as a
// [CSVReader] does (the lowest slot never used, or the slot freed last), and
// finds a free's allocation. Its memory is proportional to the peak number
// of live allocations.
type pairing struct {
	live      liveTable
	freeSlots []int32
	nslots    int32
}

func newPairing() *pairing {
	p := &pairing{}
	p.live.init(10)
	return p
}

// alloc makes ev, an allocation, live and sets its Slot; it reports false,
// changing nothing, if ev's ID is live already.
func (p *pairing) alloc(ev *Event) bool {
	slot := p.nslots
	if n := len(p.freeSlots); n > 0 {
		slot = p.freeSlots[n-1]
	}
	if !p.live.insert(liveInfo{key: ev.ID, size: ev.Size, stream: ev.Stream, slot: slot, device: ev.Device}) {
		return false
	}
	if n := len(p.freeSlots); n > 0 {
		p.freeSlots = p.freeSlots[:n-1]
	} else {
		p.nslots++
	}
	ev.Slot = slot
	return true
}

// lookup returns the live allocation of id.
func (p *pairing) lookup(id uint64) (liveInfo, bool) {
	i := p.live.find(id)
	if i < 0 {
		return liveInfo{}, false
	}
	return p.live.e[i], true
}

// free ends the live allocation of ev.ID and completes ev, a free, with its
// slot, size, stream and device; it reports false if ev.ID is not live.
func (p *pairing) free(ev *Event) bool {
	i := p.live.find(ev.ID)
	if i < 0 {
		return false
	}
	a := p.live.e[i]
	ev.Slot, ev.Size, ev.Stream, ev.Device = a.slot, a.size, a.stream, a.device
	p.live.removeAt(i)
	p.freeSlots = append(p.freeSlots, a.slot)
	return true
}

// Live returns the number of live allocations.
func (p *pairing) Live() int { return p.live.n }

// Slots returns the number of distinct slots handed out so far.
func (p *pairing) Slots() int { return int(p.nslots) }
