package planned

import (
	"slices"

	"github.com/gpualloc/gpualloc"
)

// A tracker is the device as the fallback sees it: it records the
// fallback's device allocations (its segments) and how many of the
// fallback's live blocks each holds, so that the memory a release of the
// fallback's cache would give back (its entirely free segments, which is
// what pytorch's and bestfit's ReleaseAll return) is known before
// releasing. A segment costs O(s) to add or remove for s segments; a block
// O(log s).
type tracker struct {
	gpualloc.Backend
	segs []seg // sorted by address
}

type seg struct {
	addr uint64
	size int64
	live int32
}

func (t *tracker) find(addr uint64) int {
	i, _ := slices.BinarySearchFunc(t.segs, addr, func(s seg, a uint64) int {
		switch {
		case s.addr < a:
			return -1
		case s.addr > a:
			return 1
		}
		return 0
	})
	return i
}

// Malloc takes a segment from the device.
func (t *tracker) Malloc(size int64) (uint64, error) {
	addr, err := t.Backend.Malloc(size)
	if err == nil {
		t.segs = slices.Insert(t.segs, t.find(addr), seg{addr: addr, size: size})
	}
	return addr, err
}

// Free gives a segment back.
func (t *tracker) Free(addr uint64, size int64) error {
	err := t.Backend.Free(addr, size)
	if err == nil {
		if i := t.find(addr); i < len(t.segs) && t.segs[i].addr == addr {
			t.segs = slices.Delete(t.segs, i, i+1)
		}
	}
	return err
}

// block counts a block of the fallback at addr in (d = 1) or out (d = -1).
func (t *tracker) block(addr uint64, d int32) {
	i := t.find(addr)
	if i == len(t.segs) || t.segs[i].addr != addr {
		i--
	}
	if i >= 0 {
		t.segs[i].live += d
	}
}

// releasable returns the bytes of the segments that hold no live block.
func (t *tracker) releasable() int64 {
	var n int64
	for _, s := range t.segs {
		if s.live == 0 {
			n += s.size
		}
	}
	return n
}
