package segment

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
)

// A Book is what a strategy that carves blocks out of segments records of
// them: their nodes, the live ones by Handle, and the meter that counts
// allocations and frees. Heap and cachepool's Cache embed one, so that the
// end of their Take, [Book.Hand], and the opening of their Free,
// [Book.Release], are written once. (bfc and dualcursor write Release out
// in their Free: the call costs them a tenth of an Alloc and Free.)
type Book struct {
	// Nodes holds every block; Nodes[0] is unused, so that index 0 means
	// none.
	Nodes []Node
	Live  blocktable.Table[int32] // the node of each live block, by Handle
	M     gpualloc.Meter
	Name  string // the strategy's, the prefix of errors
}

// Hand makes the free block n, out of its owner's index, live for a
// request of requested bytes: marked in use, put in the live table and
// counted as an allocation, served without a device allocation if hit. It
// returns the block's address, size and Handle; the caller takes its bytes
// out of its count of free bytes. It takes O(1) time. Heap's and
// cachepool's Take end with it, as their Free opens with [Book.Release].
func (k *Book) Hand(n int32, requested int64, hit bool) (addr uint64, size int64, handle uint64) {
	nd := &k.Nodes[n]
	nd.Free = false
	nd.Requested = requested
	addr, size = nd.Addr, nd.Size
	handle = k.Live.Put(addr, n)
	k.M.CountAlloc(requested, size, hit)
	return addr, size, handle
}

// Release takes the live block b off the live table and returns its node:
// counted as freed, marked free, Requested cleared. The caller counts its
// bytes as free and merges it with its neighbours. A block that is not
// live, or whose Size or Requested differ from its node's, is an error
// wrapping [gpualloc.ErrInvalidFree] that changes nothing. It takes O(1)
// time.
func (k *Book) Release(b gpualloc.Block) (int32, error) {
	p := k.Live.Get(b.Handle, b.Addr)
	if p == nil {
		return 0, blocktable.NotLive(k.Name, b)
	}
	n := *p
	nd := &k.Nodes[n]
	if nd.Size != b.Size || nd.Requested != b.Requested {
		return 0, blocktable.Mismatch(k.Name, b, nd.Size, nd.Requested)
	}
	k.Live.Delete(b.Handle)
	k.M.CountFree(nd.Requested, nd.Size)
	nd.Free = true
	nd.Requested = 0
	return n, nil
}
