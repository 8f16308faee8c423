// Package fidelity validates the pytorch strategy against PyTorch itself: it
// replays PyTorch memory snapshots through a model of PyTorch's CUDA caching
// allocator (the strategy, or a test's) and measures how often the model
// takes the decisions that the recorded allocator took: the address of each
// allocation and the size of each segment taken from the device.
//
// For each device of a snapshot, [Run] configures the allocator from the
// snapshot's allocator settings (see [snapshot.AllocatorSettings.AllocConf]),
// rebuilds the segments and blocks as they were when the device's trace
// began (see [snapshot.Snapshot.InitialState]), hands them to the
// allocator, and replays the trace's entries in order:
//
//   - alloc: the allocator serves the request on the entry's stream; its
//     address is compared with the recorded one. Its backend's Malloc hands
//     out the address of the segment_alloc recorded just before the alloc,
//     if any, and compares the size asked for with the recorded segment's
//     size, so that addresses stay comparable. A Malloc with no recorded
//     segment_alloc, and a recorded segment_alloc that the allocator did not
//     ask for, are mismatches.
//   - free_completed: the block returned for the recorded address is freed.
//   - segment_free: compared with the segments that the allocator gave back
//     to its backend; when it has given back none of them, its ReleaseAll
//     (PyTorch's empty_cache) is called first, if it has one.
//
// The match rate is (address matches + segment matches) / (allocs +
// segment allocs); 1 when a trace has neither.
package fidelity

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/pytorch/snapshot"
)

// An Allocator is the model replayed: the pytorch strategy, or a test's.
type Allocator interface {
	AllocStream(size int64, stream uint64) (gpualloc.Block, error)
	Free(b gpualloc.Block) error
	// Restore makes the allocator hold segment s as if it had allocated it
	// from its backend, without calling the backend, and returns the live
	// blocks of s in address order.
	Restore(s snapshot.Segment) ([]gpualloc.Block, error)
}

// A NewFunc makes an allocator on backend b, configured by conf in
// PYTORCH_CUDA_ALLOC_CONF syntax.
type NewFunc func(b gpualloc.Backend, conf string) (Allocator, error)

// DefaultMaxMismatches is how many mismatches a [Result] lists by default.
const DefaultMaxMismatches = 5

// Options configure [Run].
type Options struct {
	// New makes the allocator; required.
	New NewFunc
	// MaxMismatches is how many mismatches to keep: 0 means
	// DefaultMaxMismatches, a negative number none.
	MaxMismatches int
}

// A Mismatch is a decision of the model that differs from the recorded one.
type Mismatch struct {
	Device int    `json:"device"`
	Index  int    `json:"index"`  // of the entry in the device's trace
	Action string `json:"action"` // the entry's action
	Size   int64  `json:"size"`   // the entry's size
	Want   string `json:"want"`   // what was recorded
	Got    string `json:"got"`    // what the model did
}

func (m Mismatch) String() string {
	return fmt.Sprintf("device %d entry %d: %s of %d bytes: recorded %s, replayed %s", m.Device, m.Index, m.Action, m.Size, m.Want, m.Got)
}

// A Result is the fidelity of the model on one snapshot.
type Result struct {
	File           string  `json:"file"`
	Conf           string  `json:"conf"` // the allocator's configuration
	Allocs         int64   `json:"allocs"`
	AddressMatches int64   `json:"address_matches"`
	SegmentAllocs  int64   `json:"segment_allocs"`
	SegmentMatches int64   `json:"segment_matches"`
	MatchRate      float64 `json:"match_rate"`
	// ExtraMallocs counts the allocator's Mallocs with no recorded
	// segment_alloc.
	ExtraMallocs int64 `json:"extra_mallocs"`
	// SegmentFrees counts the recorded segment_free entries, of which
	// SegmentFreeMatches were segments the allocator gave back too.
	SegmentFrees       int64 `json:"segment_frees"`
	SegmentFreeMatches int64 `json:"segment_free_matches"`
	// DeviceFrees counts the allocator's Free calls to its backend.
	DeviceFrees  int64      `json:"device_frees"`
	AllocErrors  int64      `json:"alloc_errors"` // allocations the model failed
	InitialLive  int64      `json:"initial_live"` // blocks live when the trace began
	InitialSegs  int64      `json:"initial_segments"`
	Mismatches   []Mismatch `json:"mismatches"`
	mismatchesMx int
}

func (r *Result) mismatch(m Mismatch) {
	if len(r.Mismatches) < r.mismatchesMx {
		r.Mismatches = append(r.Mismatches, m)
	}
}

// Run replays snapshot s, named name, through the allocators that opts.New
// makes, one per device. An error means that the snapshot is inconsistent
// (its trace does not fit its segments) or that the allocator failed in a
// way that ends the replay; it does not name the file.
func Run(s *snapshot.Snapshot, name string, opts Options) (*Result, error) {
	if opts.New == nil {
		return nil, errors.New("fidelity: no allocator")
	}
	conf := s.AllocatorSettings.AllocConf()
	res := &Result{File: name, Conf: conf, Mismatches: []Mismatch{}, mismatchesMx: opts.MaxMismatches}
	if res.mismatchesMx == 0 {
		res.mismatchesMx = DefaultMaxMismatches
	}
	for _, d := range s.Devices() {
		if err := runDevice(s, d, conf, opts.New, res); err != nil {
			return nil, err
		}
	}
	res.MatchRate = 1
	if n := res.Allocs + res.SegmentAllocs; n > 0 {
		res.MatchRate = float64(res.AddressMatches+res.SegmentMatches) / float64(n)
	}
	return res, nil
}

// backend is the replay's device: Malloc hands out the recorded segments.
type backend struct {
	res     *Result
	dev     int
	pending *snapshot.TraceEntry // the segment_alloc recorded before the current alloc
	index   int                  // of the current entry
	taken   bool                 // pending was taken by a Malloc
	next    uint64               // address of the next segment not in the trace
	freed   map[uint64]bool
}

func (b *backend) Malloc(size int64) (uint64, error) {
	if size <= 0 {
		return 0, gpualloc.ErrInvalidSize
	}
	if p := b.pending; p != nil && !b.taken {
		b.taken = true
		if size == p.Size {
			b.res.SegmentMatches++
		} else {
			b.res.mismatch(Mismatch{b.dev, b.index - 1, "segment_alloc", p.Size, fmt.Sprintf("%d bytes", p.Size), fmt.Sprintf("%d bytes", size)})
		}
		delete(b.freed, p.Addr)
		return p.Addr, nil
	}
	b.res.ExtraMallocs++
	b.res.mismatch(Mismatch{b.dev, b.index, "segment_alloc", size, "none", fmt.Sprintf("%d bytes", size)})
	a := b.next
	b.next += uint64(size+smallBuffer-1) / smallBuffer * smallBuffer
	return a, nil
}

func (b *backend) Free(addr uint64, size int64) error {
	b.res.DeviceFrees++
	b.freed[addr] = true
	return nil
}

func (b *backend) MemInfo() (free, total int64) { return 1 << 62, 1 << 62 }

func runDevice(s *snapshot.Snapshot, dev int, conf string, newAlloc NewFunc, res *Result) error {
	st, err := s.InitialState(dev)
	if err != nil {
		return err
	}
	t := s.Trace(dev)
	be := &backend{res: res, dev: dev, freed: map[uint64]bool{}}
	var top uint64
	for _, sg := range append(st.Segments, s.Segments...) {
		top = max(top, sg.Address+uint64(sg.TotalSize))
	}
	for i := range t {
		if t[i].Action == snapshot.SegmentAlloc || t[i].Action == snapshot.SegmentFree {
			top = max(top, t[i].Addr+uint64(t[i].Size))
		}
	}
	be.next = (top + 1<<30) &^ (1<<30 - 1)
	a, err := newAlloc(be, conf)
	if err != nil {
		return err
	}
	live := map[uint64]gpualloc.Block{} // recorded address -> the model's block
	for _, sg := range st.Segments {
		blocks, err := a.Restore(sg)
		if err != nil {
			return fmt.Errorf("restoring the segment at %s: %w", hex(sg.Address), err)
		}
		res.InitialSegs++
		n := 0
		for _, b := range sg.Blocks {
			if b.Live() {
				if n >= len(blocks) {
					return fmt.Errorf("restoring the segment at %s: %d live blocks returned, more expected", hex(sg.Address), len(blocks))
				}
				live[b.Address] = blocks[n]
				n++
				res.InitialLive++
			}
		}
	}
	failed := map[uint64]bool{} // recorded addresses the model failed to allocate
	released := false
	for i := range t {
		e := &t[i]
		be.index = i
		switch e.Action {
		case snapshot.SegmentAlloc:
			res.SegmentAllocs++
			be.endAlloc()
			be.pending, be.taken = e, false
		case snapshot.Alloc:
			res.Allocs++
			released = false
			b, err := a.AllocStream(e.Size, e.Stream)
			be.endAlloc()
			if err != nil {
				res.AllocErrors++
				failed[e.Addr] = true
				res.mismatch(Mismatch{dev, i, "alloc", e.Size, hex(e.Addr), "error: " + err.Error()})
				continue
			}
			if b.Addr == e.Addr {
				res.AddressMatches++
			} else {
				res.mismatch(Mismatch{dev, i, "alloc", e.Size, hex(e.Addr), hex(b.Addr)})
			}
			delete(failed, e.Addr)
			live[e.Addr] = b
		case snapshot.FreeCompleted:
			b, ok := live[e.Addr]
			if !ok {
				if failed[e.Addr] {
					delete(failed, e.Addr)
					continue
				}
				return fmt.Errorf("device_traces[%d][%d]: free_completed of %s never allocated", dev, i, hex(e.Addr))
			}
			delete(live, e.Addr)
			if err := a.Free(b); err != nil {
				return fmt.Errorf("device_traces[%d][%d]: free_completed of %s: %w", dev, i, hex(e.Addr), err)
			}
		case snapshot.SegmentFree:
			be.endAlloc()
			res.SegmentFrees++
			if !be.freed[e.Addr] && !released {
				if r, ok := a.(gpualloc.Releaser); ok {
					released = true
					if err := r.ReleaseAll(); err != nil {
						return fmt.Errorf("device_traces[%d][%d]: releasing cached segments: %w", dev, i, err)
					}
				}
			}
			if be.freed[e.Addr] {
				res.SegmentFreeMatches++
				delete(be.freed, e.Addr)
			} else {
				res.mismatch(Mismatch{dev, i, "segment_free", e.Size, hex(e.Addr), "kept"})
			}
		}
	}
	be.endAlloc()
	return nil
}

// endAlloc closes the recorded segment_alloc of the alloc just replayed: a
// segment that the allocator did not ask for is a mismatch.
func (b *backend) endAlloc() {
	if p := b.pending; p != nil && !b.taken {
		b.res.mismatch(Mismatch{b.dev, b.index, "segment_alloc", p.Size, fmt.Sprintf("%d bytes", p.Size), "none (served from the cache)"})
	}
	b.pending, b.taken = nil, false
}

// smallBuffer is the size of PyTorch's small segments, to which addresses
// made up for unrecorded segments are aligned.
const smallBuffer = 2 << 20

func hex(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }
