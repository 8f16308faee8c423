package fidelity

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/gpualloc/gpualloc/traces"
)

// Sizes of PyTorch's CUDA caching allocator that the rebuild relies on.
const (
	minBlockSize = 512     // every block is a multiple of it
	smallSize    = 1 << 20 // largest request served by the small pool
	smallBuffer  = 2 << 20 // size of a small pool's segment
)

// A SegmentState is a segment of the allocator and its blocks, in address
// order, as the pytorch strategy's Restore takes it.
type SegmentState struct {
	Addr       uint64
	Size       int64
	Stream     uint64
	Expandable bool
	Blocks     []BlockState
}

// A BlockState is one block of a [SegmentState].
type BlockState struct {
	Size      int64
	Requested int64 // bytes asked for; 0 for a free block
	Live      bool
}

// rseg is a segment during the rebuild.
type rseg struct {
	addr       uint64
	size       int64
	stream     uint64
	small      bool
	expandable bool
	blocks     []rblock // in address order, covering the segment
}

type rblock struct {
	addr      uint64
	size      int64
	requested int64
	live      bool
}

func (s *rseg) end() uint64 { return s.addr + uint64(s.size) }

func hex(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }

// InitialState returns the segments of device dev as they were when its
// trace began, in address order.
//
// It starts from the segments at dump time and walks the device's trace
// backwards, undoing each entry:
//
//   - alloc at A: the live block at A becomes free and merges with free
//     neighbours (PyTorch never leaves two free blocks side by side, and it
//     carves an allocation from the front of the free block it takes);
//   - free_completed at A of n bytes: the free block holding A is split
//     into the free bytes before A, a live block at A of n rounded up to a
//     multiple of 512 bytes, and the free bytes after it; when those last
//     bytes are too few for PyTorch to have split them off (under 512 in a
//     small segment, 1 MiB or less in a large one) they belong to the block;
//   - segment_alloc at A: the segment at A, by then one free block, goes;
//   - segment_free at A of n bytes: a segment of one free block comes back,
//     small when n is 2 MiB (PyTorch's small segments), large otherwise.
//
// The other actions (free_requested, oom, snapshot, segment_map and
// segment_unmap) change no block. An entry the segments cannot explain (an
// alloc where no live block starts, a free inside a live block) is an error.
func InitialState(s *traces.Snapshot, dev int) ([]SegmentState, error) {
	var segs []*rseg
	for _, sg := range s.Segments {
		if sg.Device != dev {
			continue
		}
		rs := &rseg{addr: sg.Address, size: sg.TotalSize, stream: sg.Stream,
			small: sg.SegmentType == "small", expandable: sg.IsExpandable}
		if rs.size == 0 {
			for _, b := range sg.Blocks {
				rs.size += b.Size
			}
		}
		at := rs.addr
		for _, b := range sg.Blocks {
			if b.Address != at {
				return nil, fmt.Errorf("segment %s: block at %s, expected %s", hex(sg.Address), hex(b.Address), hex(at))
			}
			rb := rblock{addr: b.Address, size: b.Size, live: b.Live()}
			if rb.live {
				rb.requested = b.RequestedSize
			}
			rs.blocks = append(rs.blocks, rb)
			at += uint64(b.Size)
		}
		if len(sg.Blocks) == 0 {
			rs.blocks = []rblock{{addr: rs.addr, size: rs.size}}
		} else if at != rs.end() {
			return nil, fmt.Errorf("segment %s: blocks cover %d of its %d bytes", hex(sg.Address), at-rs.addr, rs.size)
		}
		segs = append(segs, rs)
	}
	find := func(a uint64) int {
		for i, sg := range segs {
			if a >= sg.addr && a < sg.end() {
				return i
			}
		}
		return -1
	}
	var t []traces.TraceEntry
	if dev < len(s.Traces) {
		t = s.Traces[dev]
	}
	for i := len(t) - 1; i >= 0; i-- {
		e := &t[i]
		where := fmt.Sprintf("device_traces[%d][%d]: %s", dev, i, e.Action)
		switch e.Action {
		case "alloc":
			si := find(e.Addr)
			if si < 0 {
				return nil, fmt.Errorf("%s of %s outside every segment", where, hex(e.Addr))
			}
			if err := segs[si].unalloc(e.Addr); err != nil {
				return nil, fmt.Errorf("%s: %v", where, err)
			}
		case "free_completed":
			si := find(e.Addr)
			if si < 0 {
				return nil, fmt.Errorf("%s of %s outside every segment", where, hex(e.Addr))
			}
			if err := segs[si].unfree(e.Addr, e.Size); err != nil {
				return nil, fmt.Errorf("%s: %v", where, err)
			}
		case "segment_alloc":
			si := find(e.Addr)
			if si < 0 || segs[si].addr != e.Addr {
				return nil, fmt.Errorf("%s of %s: no segment starts there", where, hex(e.Addr))
			}
			sg := segs[si]
			if len(sg.blocks) != 1 || sg.blocks[0].live {
				return nil, fmt.Errorf("%s of %s: the segment still has live blocks", where, hex(e.Addr))
			}
			segs = append(segs[:si], segs[si+1:]...)
		case "segment_free":
			if e.Size <= 0 {
				return nil, fmt.Errorf("%s of %s: size %d", where, hex(e.Addr), e.Size)
			}
			end := e.Addr + uint64(e.Size)
			for _, sg := range segs {
				if e.Addr < sg.end() && sg.addr < end {
					return nil, fmt.Errorf("%s of %s: overlaps the segment at %s", where, hex(e.Addr), hex(sg.addr))
				}
			}
			segs = append(segs, &rseg{addr: e.Addr, size: e.Size, stream: e.Stream, small: e.Size == smallBuffer,
				blocks: []rblock{{addr: e.Addr, size: e.Size}}})
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].addr < segs[j].addr })
	out := make([]SegmentState, len(segs))
	for i, sg := range segs {
		st := SegmentState{Addr: sg.addr, Size: sg.size, Stream: sg.stream, Expandable: sg.expandable}
		for _, b := range sg.blocks {
			st.Blocks = append(st.Blocks, BlockState{Size: b.size, Requested: b.requested, Live: b.live})
		}
		out[i] = st
	}
	return out, nil
}

// unalloc undoes the allocation of the live block at a.
func (s *rseg) unalloc(a uint64) error {
	i := sort.Search(len(s.blocks), func(i int) bool { return s.blocks[i].addr >= a })
	if i == len(s.blocks) || s.blocks[i].addr != a || !s.blocks[i].live {
		return fmt.Errorf("of %s where no live block starts", hex(a))
	}
	s.blocks[i].live, s.blocks[i].requested = false, 0
	if i+1 < len(s.blocks) && !s.blocks[i+1].live {
		s.blocks[i].size += s.blocks[i+1].size
		s.blocks = append(s.blocks[:i+1], s.blocks[i+2:]...)
	}
	if i > 0 && !s.blocks[i-1].live {
		s.blocks[i-1].size += s.blocks[i].size
		s.blocks = append(s.blocks[:i], s.blocks[i+1:]...)
	}
	return nil
}

// unfree undoes the free of the block of requested bytes at a.
func (s *rseg) unfree(a uint64, requested int64) error {
	i := sort.Search(len(s.blocks), func(i int) bool { return s.blocks[i].addr+uint64(s.blocks[i].size) > a })
	if i == len(s.blocks) || s.blocks[i].live {
		return fmt.Errorf("of %s inside a live block", hex(a))
	}
	f := s.blocks[i]
	size := roundSize(requested)
	rest := int64(f.addr+uint64(f.size)-a) - size
	if rest < 0 {
		return fmt.Errorf("of %s: %d bytes do not fit in the free block at %s of %d bytes", hex(a), size, hex(f.addr), f.size)
	}
	if rest > 0 && ((s.small && rest < minBlockSize) || (!s.small && rest <= smallSize)) {
		size, rest = size+rest, 0
	}
	var nb []rblock
	if a > f.addr {
		nb = append(nb, rblock{addr: f.addr, size: int64(a - f.addr)})
	}
	nb = append(nb, rblock{addr: a, size: size, requested: requested, live: true})
	if rest > 0 {
		nb = append(nb, rblock{addr: a + uint64(size), size: rest})
	}
	s.blocks = append(s.blocks[:i], append(nb, s.blocks[i+1:]...)...)
	return nil
}

// roundSize is the size PyTorch gives a block of n requested bytes without
// roundup_power2_divisions: n rounded up to a multiple of 512.
func roundSize(n int64) int64 {
	if n < minBlockSize {
		return minBlockSize
	}
	return (n + minBlockSize - 1) / minBlockSize * minBlockSize
}
