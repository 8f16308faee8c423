package fidelity

import (
	"errors"
	"sort"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/snapshot"
)

// Sizes of PyTorch's CUDA caching allocator.
const (
	minBlockSize = 512 // every block is a multiple of it
)

// model is a small model of PyTorch's caching allocator, enough to test
// the replay: per-stream small and large pools, best fit by (size,
// address), blocks carved from the front of a free block, split when the
// rest is large enough, merged on free. No max_split_size, no
// roundup_power2_divisions, no garbage collection.
type model struct {
	be     gpualloc.Backend
	blocks map[uint64]*mblock // every block, by address
}

type mblock struct {
	addr       uint64
	size       int64
	stream     uint64
	small      bool
	live       bool
	prev, next *mblock
}

func newModel(b gpualloc.Backend, conf string) (Allocator, error) {
	if conf != "" {
		return nil, errors.New("model: configuration not supported: " + conf)
	}
	return &model{be: b, blocks: map[uint64]*mblock{}}, nil
}

func (m *model) Restore(s snapshot.Segment) ([]gpualloc.Block, error) {
	at := s.Address
	var prev *mblock
	var out []gpualloc.Block
	for _, b := range s.Blocks {
		mb := &mblock{addr: at, size: b.Size, stream: s.Stream, small: s.TotalSize == smallBuffer, live: b.Live(), prev: prev}
		if prev != nil {
			prev.next = mb
		}
		m.blocks[at] = mb
		if b.Live() {
			out = append(out, gpualloc.Block{Addr: at, Size: b.Size, Requested: b.RequestedSize, Stream: s.Stream})
		}
		prev = mb
		at += uint64(b.Size)
	}
	return out, nil
}

func (m *model) AllocStream(size int64, stream uint64) (gpualloc.Block, error) {
	if size <= 0 {
		return gpualloc.Block{}, gpualloc.ErrInvalidSize
	}
	r := roundSize(size)
	small := r <= smallSize
	var cands []*mblock
	for _, b := range m.blocks {
		if !b.live && b.small == small && b.stream == stream && b.size >= r {
			cands = append(cands, b)
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].size != cands[j].size {
			return cands[i].size < cands[j].size
		}
		return cands[i].addr < cands[j].addr
	})
	var b *mblock
	if len(cands) > 0 {
		b = cands[0]
	} else {
		seg := int64(smallBuffer)
		switch {
		case !small && r < 10<<20:
			seg = 20 << 20
		case !small:
			seg = (r + smallBuffer - 1) / smallBuffer * smallBuffer
		}
		a, err := m.be.Malloc(seg)
		if err != nil {
			return gpualloc.Block{}, err
		}
		b = &mblock{addr: a, size: seg, stream: stream, small: small}
		m.blocks[a] = b
	}
	rest := b.size - r
	if (small && rest >= minBlockSize) || (!small && rest > smallSize) {
		nb := &mblock{addr: b.addr + uint64(r), size: rest, stream: stream, small: small, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = nb
		}
		b.next, b.size = nb, r
		m.blocks[nb.addr] = nb
	}
	b.live = true
	return gpualloc.Block{Addr: b.addr, Size: b.size, Requested: size, Stream: stream}, nil
}

func (m *model) Free(blk gpualloc.Block) error {
	b, ok := m.blocks[blk.Addr]
	if !ok || !b.live {
		return gpualloc.ErrInvalidFree
	}
	b.live = false
	if n := b.next; n != nil && !n.live {
		m.merge(b, n)
	}
	if p := b.prev; p != nil && !p.live {
		m.merge(p, b)
	}
	return nil
}

// merge joins the block hi, which follows lo, to lo.
func (m *model) merge(lo, hi *mblock) {
	lo.size += hi.size
	lo.next = hi.next
	if hi.next != nil {
		hi.next.prev = lo
	}
	delete(m.blocks, hi.addr)
}

// roundSize is the size PyTorch gives a block of n requested bytes without
// roundup_power2_divisions: n rounded up to a multiple of 512.
func roundSize(n int64) int64 {
	if n < minBlockSize {
		return minBlockSize
	}
	return (n + minBlockSize - 1) / minBlockSize * minBlockSize
}
