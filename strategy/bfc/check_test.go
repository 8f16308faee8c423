package bfc

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/backend/virtual"
	"github.com/gpualloc/gpualloc/strategy/internal/segment"
	"github.com/gpualloc/gpualloc/strategy/internal/segment/segmenttest"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// check verifies every invariant of p: its regions are sorted, disjoint
// and tiled by linked chunks of multiples of 256 bytes, no two free chunks
// neighbours; the index holds exactly the free chunks, each in its class; the
// byte counts agree with the chunks, the stats and the limit; FreeSpace
// agrees with a brute-force computation.
func (p *Pool) check() error {
	var free []int32
	var regionBytes, freeBytes, largest int64
	inUse := 0
	used := map[int32]bool{}
	for i, r := range p.regs {
		if i > 0 && p.regs[i-1].addr+uint64(p.regs[i-1].size) > r.addr {
			return fmt.Errorf("region %#x overlaps the one before", r.addr)
		}
		if r.size <= 0 || r.size%MinAllocationSize != 0 {
			return fmt.Errorf("region %#x has %d bytes", r.addr, r.size)
		}
		regionBytes += r.size
		addr, prev := r.addr, int32(0)
		for n := r.first; n != 0; n = p.nodes[n].Next {
			c := &p.nodes[n]
			switch {
			case used[n]:
				return fmt.Errorf("chunk %d is reached twice", n)
			case c.Addr != addr:
				return fmt.Errorf("chunk %d at %#x, want %#x", n, c.Addr, addr)
			case c.Prev != prev:
				return fmt.Errorf("chunk %d has prev %d, want %d", n, c.Prev, prev)
			case c.Size <= 0 || c.Size%MinAllocationSize != 0:
				return fmt.Errorf("chunk %d has %d bytes", n, c.Size)
			case c.Free && prev != 0 && p.nodes[prev].Free:
				return fmt.Errorf("free chunks %d and %d are neighbours", prev, n)
			case !c.Free && (c.Left != 0 || c.Right != 0):
				return fmt.Errorf("chunk %d in use is linked in the index", n)
			}
			used[n] = true
			if !c.Free {
				inUse++
			} else {
				free = append(free, n)
				freeBytes += c.Size
				largest = max(largest, c.Size)
			}
			addr += uint64(c.Size)
			prev = n
		}
		if addr != r.addr+uint64(r.size) {
			return fmt.Errorf("region %#x of %d bytes: its chunks end at %#x", r.addr, r.size, addr)
		}
	}
	if len(used)+len(p.spare) != len(p.nodes)-1 {
		return fmt.Errorf("%d chunks in regions and %d spare of %d", len(used), len(p.spare), len(p.nodes)-1)
	}
	indexed, err := p.free.Check(p.nodes)
	if err != nil {
		return err
	}
	slices.Sort(free)
	slices.Sort(indexed)
	if !slices.Equal(free, indexed) {
		return fmt.Errorf("the index holds chunks %v, the free chunks are %v", indexed, free)
	}
	st := p.Stats()
	switch {
	case regionBytes != p.total || p.total != st.Reserved:
		return fmt.Errorf("regions hold %d bytes, total %d, Reserved %d", regionBytes, p.total, st.Reserved)
	case p.total > p.limit:
		return fmt.Errorf("%d bytes held over the limit of %d", p.total, p.limit)
	case freeBytes != p.freeBytes:
		return fmt.Errorf("free chunks hold %d bytes, freeBytes says %d", freeBytes, p.freeBytes)
	case p.total-freeBytes != st.Allocated:
		return fmt.Errorf("chunks in use hold %d bytes, Allocated says %d", p.total-freeBytes, st.Allocated)
	case inUse != p.live.Len():
		return fmt.Errorf("%d chunks in use, %d live blocks", inUse, p.live.Len())
	}
	if l, t := p.FreeSpace(); l != largest || t != freeBytes {
		return fmt.Errorf("FreeSpace() = %d, %d; brute force says %d, %d", l, t, largest, freeBytes)
	}
	return nil
}

// layout returns the pool's regions in the notation of
// segmenttest.ParseLayout: "U512 F1K | F2M".
func (p *Pool) layout() string {
	var segs []segment.LayoutSegment
	for _, r := range p.regs {
		s := segment.LayoutSegment{Addr: r.addr}
		for n := r.first; n != 0; n = p.nodes[n].Next {
			s.Blocks = append(s.Blocks, segment.LayoutBlock{Size: p.nodes[n].Size, Free: p.nodes[n].Free})
		}
		segs = append(segs, s)
	}
	return segmenttest.FormatLayout(segs)
}

// build returns a pool of configuration c on dev (a test device, or a
// recorder of one) in the state layout
// describes (regions separated by "|", in address order), and its live
// blocks in layout order. Each region is a device allocation. The pool's
// next region size is left as New sets it.
func build(t *testing.T, c Config, dev gpualloc.Backend, layout string) (*Pool, []gpualloc.Block) {
	t.Helper()
	p, err := New(dev, c)
	require.NoError(t, err)
	segs, err := segmenttest.ParseLayout(layout)
	require.NoError(t, err)
	var live []gpualloc.Block
	for _, blocks := range segs {
		var size int64
		for _, b := range blocks {
			size += b.Size
		}
		addr, err := dev.Malloc(size)
		require.NoError(t, err)
		p.total += size
		p.m.CountDeviceMalloc(size)
		r := region{addr: addr, size: size}
		prev := int32(0)
		for _, b := range blocks {
			n := segment.NewNode(&p.nodes, &p.spare)
			p.nodes[n] = segment.Node{Addr: addr, Size: b.Size, Prev: prev, Free: b.Free}
			if prev == 0 {
				r.first = n
			} else {
				p.nodes[prev].Next = n
			}
			if b.Free {
				p.freeBytes += b.Size
				p.free.Insert(p.nodes, n)
			} else {
				p.nodes[n].Requested = b.Size
				h := p.live.Put(addr, n)
				p.m.CountAlloc(b.Size, b.Size, true)
				live = append(live, gpualloc.Block{Addr: addr, Size: b.Size, Requested: b.Size, Handle: h})
			}
			addr += uint64(b.Size)
			prev = n
		}
		p.regs = append(p.regs, r)
	}
	require.NoError(t, p.check(), layout)
	require.Equal(t, layout, p.layout())
	return p, live
}

// recorder is a device that records the size of every Malloc, refused or
// not.
type recorder struct {
	*virtual.Device
	asked []int64
}

func (r *recorder) Malloc(size int64) (uint64, error) {
	r.asked = append(r.asked, size)
	return r.Device.Malloc(size)
}
