package segment

import (
	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/strategy/internal/blocktable"
)

// FreeLive takes the live block b off live, the table of a strategy named
// name whose blocks are nodes, and returns its node: counted as freed in m,
// marked free, Requested cleared. The caller counts its bytes as free and
// merges it. A block that is not live, or whose Size or Requested differ
// from its node's, is an error wrapping [gpualloc.ErrInvalidFree] that
// changes nothing. It takes O(1) time.
func FreeLive(name string, nodes []Node, live *blocktable.Table[int32], m *gpualloc.Meter, b *gpualloc.Block) (int32, error) {
	p := live.Get(b.Handle, b.Addr)
	if p == nil {
		return 0, blocktable.NotLive(name, *b)
	}
	n := *p
	nd := &nodes[n]
	if nd.Size != b.Size || nd.Requested != b.Requested {
		return 0, blocktable.Mismatch(name, *b, nd.Size, nd.Requested)
	}
	live.Delete(b.Handle)
	m.CountFree(nd.Requested, nd.Size)
	nd.Free = true
	nd.Requested = 0
	return n, nil
}
