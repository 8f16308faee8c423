package segment

import (
	"fmt"

	"github.com/gpualloc/gpualloc"
)

// A Fit is the index of free blocks of a [Pool]: how it finds the block a
// request gets.
type Fit uint8

const (
	// BestFit takes the smallest free block that fits, the lowest address
	// among equals ([Sorted]), and grows by segments sized for the rounded
	// request.
	BestFit Fit = iota
	// GoodFit takes the first block of the first non-empty list whose
	// blocks all fit, TLSF's good fit ([Lists]), and grows by segments
	// rounded up to the start of a list ([ClassStart]), so that once free
	// they serve the same request again.
	GoodFit
)

// A Pool is a [Heap] with its index of free blocks, and the Alloc and Free
// that the strategies built on this package share: bestfit (BestFit) and
// tlsf (GoodFit). The index is chosen at Init; both kinds are fields of
// the Pool, the other one left empty, and each use picks its own by a
// branch on the Fit, so that the hot paths make direct calls, never an
// interface call. The zero Pool is not ready: call [Pool.Init]. A Pool must
// not be copied once ready, and is not safe for concurrent use.
type Pool struct {
	Heap
	fit   Fit
	best  Sorted
	lists Lists
}

// Init makes p an empty pool with the index fit, as [Heap.Init] makes its
// heap.
func (p *Pool) Init(b gpualloc.Backend, name string, c Config, fit Fit) error {
	p.fit = fit
	return p.Heap.Init(b, name, c, p)
}

// Insert adds the free block n to the index: an [Index].
func (p *Pool) Insert(nodes []Node, n int32) {
	if p.fit == GoodFit {
		p.lists.Insert(nodes, n)
		return
	}
	p.best.Insert(nodes, n)
}

// Remove takes the free block n out of the index: an [Index].
func (p *Pool) Remove(nodes []Node, n int32) {
	if p.fit == GoodFit {
		p.lists.Remove(nodes, n)
		return
	}
	p.best.Remove(nodes, n)
}

// Alloc hands out a block for a request of size bytes, rounded by the
// heap's Config: the free block the index finds, else a new segment
// ([Heap.Grow]), split by [Heap.Take], the rest going back to the index.
// It returns the block's address, size and Handle, scalars for the
// strategy's Alloc to make its gpualloc.Block of (a struct result is
// copied at every level, and the copy stalls on store forwarding).
func (p *Pool) Alloc(size int64) (addr uint64, bsize int64, handle uint64, err error) {
	h := &p.Heap
	if size < 1 {
		return 0, 0, 0, h.ErrInvalidSize(size)
	}
	rounded := h.Round(size)
	if rounded == 0 {
		return 0, 0, 0, h.ErrTooLarge(size)
	}
	var n int32
	if p.fit == GoodFit {
		n = p.lists.Take(h.Nodes, rounded)
	} else {
		n = p.best.TakeBest(h.Nodes, rounded)
	}
	hit := n != 0
	if !hit {
		fit := rounded
		if p.fit == GoodFit {
			fit = ClassStart(rounded)
		}
		if n, err = h.Grow(size, rounded, fit); err != nil {
			return 0, 0, 0, err
		}
	}
	addr, bsize, handle, rest := h.Take(n, rounded, size, hit)
	if rest != 0 {
		if p.fit == GoodFit {
			p.lists.Insert(h.Nodes, rest)
		} else {
			p.best.Insert(h.Nodes, rest)
		}
	}
	return addr, bsize, handle, nil
}

// Free returns a live block to the index, merged with the free blocks just
// before and after it in its segment ([Book.Release], [Heap.MergeNext]).
func (p *Pool) Free(b gpualloc.Block) error {
	h := &p.Heap
	n, err := h.Release(b)
	if err != nil {
		return err
	}
	nodes := h.Nodes
	h.free += nodes[n].Size
	good := p.fit == GoodFit
	if prev := nodes[n].Prev; prev != 0 && nodes[prev].Free {
		if good {
			p.lists.Remove(nodes, prev)
		} else {
			p.best.Remove(nodes, prev)
		}
		h.MergeNext(prev)
		n = prev
	}
	if next := nodes[n].Next; next != 0 && nodes[next].Free {
		if good {
			p.lists.Remove(nodes, next)
		} else {
			p.best.Remove(nodes, next)
		}
		h.MergeNext(n)
	}
	if good {
		p.lists.Insert(nodes, n)
	} else {
		p.best.Insert(nodes, n)
	}
	return nil
}

// FreeSpace returns the largest free block and the bytes of free blocks:
// the total in O(1), the largest in O(log k) with best fit, for the k free
// blocks of the highest non-empty size class, and in O(k) with good fit,
// for the k blocks of the highest non-empty list.
func (p *Pool) FreeSpace() (largest, total int64) {
	if p.fit == GoodFit {
		largest = p.lists.Largest(p.Nodes)
	} else if n := p.best.Max(p.Nodes); n != 0 {
		largest = p.Nodes[n].Size
	}
	return largest, p.FreeBytes()
}

// CheckIndex verifies that the index holds exactly the free blocks free,
// each where its size says. It takes O(n) time, for tests.
func (p *Pool) CheckIndex(free []int32) error {
	if p.fit == GoodFit {
		return p.lists.Check(p.Nodes, free)
	}
	inTree, err := p.best.Check(p.Nodes)
	if err != nil {
		return err
	}
	if len(inTree) != len(free) {
		return fmt.Errorf("the index holds %d blocks, the heap has %d free", len(inTree), len(free))
	}
	want := map[int32]bool{}
	for _, n := range free {
		want[n] = true
	}
	for _, n := range inTree {
		if !want[n] {
			return fmt.Errorf("the index holds block %d, which is not free", n)
		}
	}
	return nil
}
