package sim

import (
	"errors"
	"fmt"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
	"github.com/gpualloc/gpualloc/traces"
)

// Replays that start from a recorded state.
//
// A PyTorch snapshot's trace is the tail of a ring buffer: when it begins,
// the allocator already holds segments, some of their blocks live, some
// free in its cache, some segments wholly free. Its reader (package
// traces) is a traces.StartReporter: its traces.Start holds that state,
// and its first Start.Initial events are the allocations of the blocks
// live in it.
//
// The engine is given that state (Config.Start, else the reader's) as one
// value, a startPlan, read once: the replay of any other trace holds none,
// and its step looks at none of it. As the events go by, the plan says
// what each alloc may take (a block of the start state, of a private pool,
// or the strategy's); the giver through which the device's allocs then go
// reads it.
//
// A replay of such a trace through an allocator that is a Restorer (the
// pytorch strategy) starts from the recorded state: when a device is first
// used, the engine takes each of the state's segments from the device (a
// Malloc of its size, through the counting wrapper, so that reserved bytes
// and the device's capacity include it), moves the segment to the address
// the device gave, and hands it to the allocator's Restore; the Initial
// events of the segments' live blocks then take the blocks that Restore
// returned, without calling the allocator. A segment that the allocator
// cannot restore (Restore fails: an expandable segment, blocks that do not
// fit its rules) is given back to the device, and the live blocks of it are
// allocated as the events ask, as are the blocks that no segment holds
// (State.Unplaced) and every start block for an allocator that is no
// Restorer. A device smaller than the state's segments restores only those
// that hold live blocks, the free pages past the last live block of an
// expandable one cut off: the rest is cache that PyTorch, short of memory,
// would have released (see fitState), so that the replay runs out of
// memory only where the live memory does not fit. A device that cannot
// hold the segments restored even so (a device allocation refused, or an
// expandable segment's range, which the allocator sizes from the device,
// too short for them) fails the replay with an error that wraps
// gpualloc.ErrOutOfMemory, in the same words whatever the segment: the
// device, the bytes of the segments restored and the device's (see
// startOOM).
//
// Either way the device calls made to build the start state (the restored
// segments, and the calls during the start events) are reported apart,
// in Result.StartSegments and Result.StartReservedBytes; DeviceMallocs,
// DeviceFrees and DeviceMallocBytes count only the calls made while the
// trace itself was replayed. Peak reserved bytes include the start state,
// as the recorded peak does.

// A Restorer is an allocator that can hold a segment of a recorded state
// as if it had allocated it from its backend, without calling the backend
// (the pytorch strategy's Restore): it returns the segment's live blocks in
// address order.
type Restorer interface {
	Restore(s snapshot.Segment) ([]gpualloc.Block, error)
}

// A startPlan is what the engine is given of a trace whose reader is a
// traces.StartReporter (or Config.Start), read once when the replay
// starts: the recorded
// state each device starts from, the number of start events, and the
// allocations and segment actions of private pools. As the events go by
// it says what each alloc may take (from: a block of the start state, of
// a private pool, or the strategy's), which the giver of each device
// reads, and what it took (took).
type startPlan struct {
	start    *traces.Start
	initial  int64                // the trace's first events, which allocate the blocks of the start state
	private  []uint64             // traces.Start.Private
	poolSegs []traces.PoolSegment // traces.Start.PoolSegments, poolSegs[nextSeg:] still to come
	nextSeg  int
	pools    []snapshot.PoolID // traces.Start.PrivatePools, pools[nextPool:] still to come
	nextPool int
	pool     snapshot.PoolID // the private pool of the event's alloc, when from has fromPrivate
	// starting is true while the start events, or a restore, are
	// replayed; active while events go through stepSpecial: start events
	// or private pools remain to look at.
	starting, active bool
	from             source // what the alloc of the event may take
	took             taken  // what it took
}

// What an alloc may take (startPlan.from), besides the strategy's block.
type source uint8

const (
	fromStrategy source = 0
	fromStart    source = 1 << iota // a start event: the device's next start block
	fromPrivate                     // an allocation in a private pool's segments
)

// What an alloc took (startPlan.took).
type taken uint8

const (
	tookNone     taken = iota // the strategy's block
	tookRestored              // a block of the restored start state
	tookHeld                  // a block of a private pool, which the engine holds
	tookPool                  // a block of a private pool, which the strategy served (PoolAllocator)
)

// planOf returns the plan of a trace that starts from st.
func planOf(st *traces.Start) *startPlan {
	p := &startPlan{start: st, initial: int64(st.Initial), private: st.Private, poolSegs: st.PoolSegments, pools: st.PrivatePools}
	p.active = p.initial > 0 || p.private != nil || len(p.poolSegs) > 0
	return p
}

// next readies the plan for event n: the private pools' segments that the
// trace allocates or frees before it, and what its alloc may take.
func (p *startPlan) next(e *engine, ev *traces.Event, n int64) error {
	p.starting = n < p.initial
	if p.nextSeg < len(p.poolSegs) {
		if err := e.poolSegments(n); err != nil {
			return err
		}
	}
	p.active = p.starting || p.private != nil || p.nextSeg < len(p.poolSegs)
	p.from = fromStrategy
	if ev.Op != traces.OpAlloc {
		return nil
	}
	if p.starting {
		p.from |= fromStart
	}
	if p.private != nil && n/64 < int64(len(p.private)) && p.private[n/64]&(1<<(n%64)) != 0 {
		p.from |= fromPrivate
		p.pool = snapshot.PoolID{}
		if p.nextPool < len(p.pools) {
			p.pool = p.pools[p.nextPool]
			p.nextPool++
		}
	}
	return nil
}

// A devStart is a device's part of a trace's plan: the blocks of its
// start state that the start events take, in the order of the reader's
// start events, and the private pools' segments that the engine holds
// for it. Zero for a trace with no plan.
type devStart struct {
	startBlocks []startBlock
	nextStart   int
	private     []startBlock       // while restoring: see holdPrivate
	heldSegs    int64              // segments of private pools that the engine holds
	pools       map[uint64]heldSeg // those segments, by recorded address; nil for none ever
	pooled      PoolAllocator      // the allocator, when it serves private pools itself; then the engine holds none
}

// A startBlock is a block live at the start of a device's trace, in the
// order of the reader's start events: restored (its Block) or to be
// allocated.
type startBlock struct {
	block    gpualloc.Block
	restored bool
	held     bool // in a private pool's segment, which the engine holds
	// pool is the private pool of a block to be allocated, for an
	// allocator that serves private pools (device.pooled).
	pool snapshot.PoolID
}

// restore restores the start state of device d, if the reader reports one
// and the allocator is a Restorer.
func (e *engine) restore(d *device) error {
	p := e.plan
	if p == nil {
		return nil
	}
	st := p.start.State(d.index)
	if st == nil {
		return nil
	}
	was := p.starting
	p.starting = true
	defer func() {
		if p.starting = was; !was {
			// A device first used after the start events: its start
			// state is what the restore made.
			d.endStart()
		}
	}()
	st, trimmed := fitState(d, st)
	if err := e.restoreState(d, st); err != nil {
		return startError(d, st, trimmed, err)
	}
	return nil
}

// Pages of expandable segments, as the pytorch strategy maps them: 20 MiB
// in the large pool, 2 MiB in the small one (kLargeBuffer, kSmallBuffer).
const (
	largePage = 20 << 20
	smallPage = 2 << 20
)

// fitState returns the start state st of device d as a replay restores it.
// Where its segments fit the device's memory, st itself. Where they do not,
// a program on that smaller device would have held only what was live:
// PyTorch, short of memory, releases its cached blocks and retries
// (release_cached_blocks in c10/cuda/CUDACachingAllocator.cpp, called from
// its malloc's out-of-memory path), returning every segment with no live
// block to the device and unmapping the free pages of expandable segments.
// So the state returned keeps only the segments that hold live blocks,
// each expandable one cut after the page of its last live block, and the
// private pools' segments, which the engine holds as they are; the rest is
// cache the allocator released, not restored, and trimmed is true. The
// live blocks, and so the start events, are the same in both.
func fitState(d *device, st *snapshot.State) (_ *snapshot.State, trimmed bool) {
	_, total := d.backend.MemInfo()
	if stateBytes(st.Segments) <= total {
		return st, false
	}
	out := *st
	out.Segments = make([]snapshot.Segment, 0, len(st.Segments))
	for _, sg := range st.Segments {
		if sg.Pool.Private() {
			out.Segments = append(out.Segments, sg)
			continue
		}
		if sg, ok := liveSegment(sg); ok {
			out.Segments = append(out.Segments, sg)
		}
	}
	return &out, true
}

// liveSegment returns sg as a replay short of memory restores it (see
// fitState): false when no block of it is live; an expandable segment cut
// after the page that holds the end of its last live block, the free block
// across the cut shortened to it.
func liveSegment(sg snapshot.Segment) (snapshot.Segment, bool) {
	var end int64
	for _, b := range sg.Blocks {
		if b.Live() {
			end = max(end, int64(b.Address-sg.Address)+b.Size)
		}
	}
	if end == 0 {
		return sg, false
	}
	if !sg.IsExpandable {
		return sg, true
	}
	page := int64(largePage)
	if sg.SegmentType == "small" || (sg.SegmentType == "" && sg.TotalSize%largePage != 0) {
		page = smallPage
	}
	size := (end + page - 1) / page * page
	if size >= sg.TotalSize {
		return sg, true
	}
	cut := sg
	cut.TotalSize = size
	cut.Blocks = make([]snapshot.Block, 0, len(sg.Blocks))
	for _, b := range sg.Blocks {
		off := int64(b.Address - sg.Address)
		if off >= size {
			continue
		}
		b.Size = min(b.Size, size-off) // only a free block lies across the cut
		cut.Blocks = append(cut.Blocks, b)
	}
	return cut, true
}

// stateBytes returns the bytes of segs.
func stateBytes(segs []snapshot.Segment) int64 {
	var held int64
	for _, sg := range segs {
		held += sg.TotalSize
	}
	return held
}

// A startOOM is the failure of a device that cannot hold the start state
// it is given: its segments need more memory than the device has, or the
// device's memory ran out while the allocator restored them (an expandable
// segment's range, sized from the device, too short to hold them). Where
// the device cannot hold the whole state, the state restored is the
// segments that hold live blocks (see fitState), and it is their bytes
// that it names. It reads the same whatever segment failed, expandable or
// not, and wraps gpualloc.ErrOutOfMemory, so that a replay that fails so
// is one that does not fit (see package mincap). The event whose device it
// is does not name it: it is the start state's.
type startOOM struct {
	device         int
	held, capacity int64
	live           bool  // held is the bytes of the segments that hold live blocks
	err            error // the failure, when the device has room for held: else gpualloc.ErrOutOfMemory
}

func (e *startOOM) Error() string {
	what := "the start state's segments"
	if e.live {
		what = "the start state's segments that hold live blocks"
	}
	if e.held > e.capacity {
		return fmt.Sprintf("device %d: %s need %d bytes (%s), more than the device's %d (%s): %v",
			e.device, what, e.held, gpualloc.FormatSize(e.held), e.capacity, gpualloc.FormatSize(e.capacity), e.err)
	}
	return fmt.Sprintf("device %d: %s need %d bytes (%s) of the device's %d (%s): %v",
		e.device, what, e.held, gpualloc.FormatSize(e.held), e.capacity, gpualloc.FormatSize(e.capacity), e.err)
}

func (e *startOOM) Unwrap() error { return e.err }

// startError returns err, the failure to restore start state st on
// device d (trimmed: the segments of the recorded state that hold live
// blocks, see fitState): a *startOOM when it is for want of memory.
func startError(d *device, st *snapshot.State, trimmed bool, err error) error {
	if !errors.Is(err, gpualloc.ErrOutOfMemory) {
		return err
	}
	held := stateBytes(st.Segments)
	_, total := d.backend.MemInfo()
	if held > total {
		err = gpualloc.ErrOutOfMemory
	}
	return &startOOM{device: d.index, held: held, capacity: total, live: trimmed, err: err}
}

// restoreState restores st on device d (see restore).
func (e *engine) restoreState(d *device, st *snapshot.State) error {
	if d.pooled == nil {
		if err := e.holdPrivate(d, st); err != nil {
			return err
		}
	}
	rs, ok := d.alloc.(Restorer)
	if !ok {
		for _, sg := range st.Segments {
			if sg.Pool.Private() {
				continue
			}
			for _, b := range sg.Blocks {
				if b.Live() {
					d.startBlocks = append(d.startBlocks, startBlock{})
				}
			}
		}
		for range st.Unplaced {
			d.startBlocks = append(d.startBlocks, startBlock{})
		}
		d.sortStart(st)
		return nil
	}
	expandable, err := restoreExpandable(rs, st, d.pooled != nil)
	if err != nil {
		return err
	}
	for _, sg := range st.Segments {
		if sg.Pool.Private() && d.pooled == nil {
			continue
		}
		if sg.IsExpandable {
			for _, b := range expandable[sg.Address] {
				d.startBlocks = append(d.startBlocks, startBlock{block: b, restored: true})
			}
			if _, ok := expandable[sg.Address]; ok {
				continue
			}
		}
		live := 0
		for _, b := range sg.Blocks {
			if b.Live() {
				live++
			}
		}
		blocks, err := e.restoreSegment(d, rs, sg)
		if err != nil {
			return err
		}
		if blocks == nil {
			for range live {
				d.startBlocks = append(d.startBlocks, startBlock{pool: sg.Pool})
			}
			continue
		}
		if len(blocks) != live {
			return fmt.Errorf("restore of the segment at %#x: %d live blocks returned, %d expected", sg.Address, len(blocks), live)
		}
		for _, b := range blocks {
			d.startBlocks = append(d.startBlocks, startBlock{block: b, restored: true})
		}
	}
	for range st.Unplaced {
		d.startBlocks = append(d.startBlocks, startBlock{})
	}
	d.sortStart(st)
	return nil
}

// holdPrivate takes from the device the memory of the segments of st that
// belong to a private pool (snapshot.Segment.Pool: a CUDA graph's, a
// torch.cuda.MemPool's), which the engine holds itself, apart from the
// strategy: no request of the default pools is served from them, the
// live blocks in them and the allocations that the trace makes in them
// (traces.Start.Private) are the engine's, and their frees give
// nothing back: the pool keeps its segments, as PyTorch's private pools do
// until they are released. The segments that the trace allocates or frees
// are followed (see pools.go).
// d.private collects their live blocks, in the order of the reader's start
// events (see sortStart).
func (e *engine) holdPrivate(d *device, st *snapshot.State) error {
	for _, sg := range st.Segments {
		if !sg.Pool.Private() {
			continue
		}
		addr, err := d.given.Malloc(sg.TotalSize)
		if err != nil {
			return fmt.Errorf("the segment at %#x (%d bytes) of private pool %v: %w", sg.Address, sg.TotalSize, sg.Pool, err)
		}
		d.holdSeg(sg.Address, addr, sg.TotalSize)
		for _, b := range sg.Blocks {
			if b.Live() {
				req := b.RequestedSize
				if req < 1 {
					req = b.Size
				}
				blk := gpualloc.Block{Addr: b.Address - sg.Address + addr, Size: b.Size, Requested: req, Stream: sg.Stream}
				d.private = append(d.private, startBlock{block: blk, held: true})
			}
		}
	}
	return nil
}

// sortStart puts the blocks of private pools (d.private) among
// d.startBlocks where the reader yields them: segment after segment in
// address order (see traces.Start.Initial).
func (d *device) sortStart(st *snapshot.State) {
	if len(d.private) == 0 {
		return
	}
	var out []startBlock
	i, p := 0, 0
	for _, sg := range st.Segments {
		for _, b := range sg.Blocks {
			if !b.Live() {
				continue
			}
			if sg.Pool.Private() {
				out = append(out, d.private[p])
				p++
			} else {
				out = append(out, d.startBlocks[i])
				i++
			}
		}
	}
	d.startBlocks, d.private = append(out, d.startBlocks[i:]...), nil
}

// An ExpandableRestorer is a Restorer that can also hold the mapped
// ranges of expandable segments of a recorded state, taking their memory
// from its backend itself (the pytorch strategy's RestoreExpandable): the
// segments of a range keep their offsets from one another. It returns each
// segment's live blocks in address order, in the order of segs, or
// nothing when it cannot hold expandable segments (holding none).
type ExpandableRestorer interface {
	RestoreExpandable(segs []snapshot.Segment) ([][]gpualloc.Block, []snapshot.Segment, error)
}

// restoreExpandable restores the expandable segments of st (of the default
// pools, and of private pools too when private) when rs can, and returns
// their live blocks by recorded address; nil when it cannot, their live
// blocks then allocated as the trace's start events ask.
func restoreExpandable(rs Restorer, st *snapshot.State, private bool) (map[uint64][]gpualloc.Block, error) {
	er, ok := rs.(ExpandableRestorer)
	if !ok {
		return nil, nil
	}
	var segs []snapshot.Segment
	for _, sg := range st.Segments {
		if sg.IsExpandable && (private || !sg.Pool.Private()) {
			segs = append(segs, sg)
		}
	}
	if len(segs) == 0 {
		return nil, nil
	}
	live, _, err := er.RestoreExpandable(segs)
	if err != nil || live == nil {
		return nil, err
	}
	out := make(map[uint64][]gpualloc.Block, len(segs))
	for i, sg := range segs {
		out[sg.Address] = live[i]
	}
	return out, nil
}

// restoreSegment takes memory for segment sg from the device and restores
// the segment there; it returns the live blocks, or nil when the allocator
// does not restore the segment (its memory then given back).
func (e *engine) restoreSegment(d *device, rs Restorer, sg snapshot.Segment) ([]gpualloc.Block, error) {
	if sg.IsExpandable || sg.TotalSize <= 0 {
		return nil, nil
	}
	addr, err := d.given.Malloc(sg.TotalSize)
	if err != nil {
		return nil, fmt.Errorf("restore of the segment at %#x (%d bytes): %w", sg.Address, sg.TotalSize, err)
	}
	moved := sg
	moved.Address = addr
	moved.Blocks = make([]snapshot.Block, len(sg.Blocks))
	for i, b := range sg.Blocks {
		b.Address = b.Address - sg.Address + addr
		moved.Blocks[i] = b
	}
	blocks, err := rs.Restore(moved)
	if err != nil {
		if ferr := d.given.Free(addr, sg.TotalSize); ferr != nil {
			return nil, ferr
		}
		return nil, nil
	}
	if blocks == nil {
		blocks = []gpualloc.Block{}
	}
	return blocks, nil
}

// A giver is the allocator through which a device's allocs go for a
// trace with a plan that has start events or private pools: an alloc that
// the plan says is one of those takes its block from the start state or
// the private pool, and any other goes to the strategy, as the engine's
// alloc would send it. It keeps that work off the step of every other
// trace.
type giver struct {
	p      *startPlan
	d      *device
	cat    gpualloc.CategoryAllocator
	stream gpualloc.StreamAllocator
	alloc  gpualloc.Allocator
}

func (g *giver) AllocCategory(size int64, stream uint64, cat gpualloc.Category) (gpualloc.Block, error) {
	if g.p.from != fromStrategy {
		b, ok, err := g.p.give(g.d, size, stream)
		if err != nil || ok {
			return b, err
		}
		if g.p.pool.Private() && g.d.pooled != nil {
			g.p.took = tookPool
			return g.d.pooled.AllocPool(size, stream, g.p.pool)
		}
	}
	switch {
	case g.cat != nil:
		return g.cat.AllocCategory(size, stream, cat)
	case g.stream != nil:
		return g.stream.AllocStream(size, stream)
	default:
		return g.alloc.Alloc(size)
	}
}

// give returns the block of a start event or of an allocation in a
// private pool that the engine serves itself, without the strategy: a
// block of the restored start state, or of a private pool's segments
// that the engine holds; ok is false when the event takes no such block.
// It notes in p.took what it returned.
func (p *startPlan) give(d *device, size int64, stream uint64) (b gpualloc.Block, ok bool, err error) {
	p.took = tookNone
	if p.from&fromPrivate == 0 {
		p.pool = snapshot.PoolID{}
	}
	if p.from&fromStart != 0 && d.startBlocks != nil {
		sb, err := d.takeStart(size)
		if err != nil {
			return b, false, err
		}
		b, ok = sb.block, sb.restored || sb.held
		if !ok {
			p.pool = sb.pool
		}
		switch {
		case sb.held:
			p.took = tookHeld
		case sb.restored:
			p.took = tookRestored
		}
	}
	if p.from&fromPrivate != 0 && d.heldSegs > 0 && d.pooled == nil {
		// Served from a private pool's segments, which the engine holds.
		b, ok, p.took = gpualloc.Block{Size: size, Requested: size, Stream: stream}, true, tookHeld
	}
	return b, ok, nil
}

// endStart notes the device calls made so far as those that built the
// start state: the device's calls before the end of the trace's start
// events, or of its restore when it is first used after them. Counted
// once, not per call, so that the device calls of the replay pay nothing
// for it.
func (d *device) endStart() {
	d.startSegs, d.startFrees = d.mallocs, d.mfrees
	d.startMallocBytes, d.startBytes = d.mallocBytes, d.reserved
	d.startCalls = d.calls
}

// endStart is device.endStart for every device, when the trace's start
// events end.
func (e *engine) endStart() {
	for _, d := range e.devs {
		if d != nil {
			d.endStart()
		}
	}
}

// takeStart returns the next start block of device d, for a start event
// of size bytes: restored or held, when it is one, else to be allocated.
func (d *device) takeStart(size int64) (startBlock, error) {
	if d.nextStart >= len(d.startBlocks) {
		return startBlock{}, nil
	}
	sb := d.startBlocks[d.nextStart]
	d.nextStart++
	if (sb.restored || sb.held) && sb.block.Requested != size {
		return startBlock{}, fmt.Errorf("the block restored at %#x was asked for %d bytes, the trace's start allocation %d", sb.block.Addr, sb.block.Requested, size)
	}
	return sb, nil
}
