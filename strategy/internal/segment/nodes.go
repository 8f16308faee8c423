package segment

import "github.com/gpualloc/gpualloc/strategy/internal/blocktable"

// NewNode returns the index of a zero node of *nodes, whose elements refer
// to each other by index: the index most recently given back to spare by
// [RecycleNode], else that of a zero node appended to *nodes, which may
// then be replaced. So a strategy's nodes stop allocating once they have
// grown to its peak.
func NewNode(nodes *[]Node, spare *[]int32) int32 { return blocktable.Slot(nodes, spare) }

// RecycleNode zeroes node n, no longer used, and gives its index back to
// spare for [NewNode].
func RecycleNode(nodes []Node, spare *[]int32, n int32) {
	nodes[n] = Node{}
	*spare = append(*spare, n)
}

// SplitAt cuts node n at size bytes: r, a new zero node, takes the rest of
// n's bytes, as a free node linked after n in its segment, in no index.
func SplitAt(nodes []Node, n, r int32, size int64) {
	// Field by field: a composite literal is built on the stack and copied,
	// which stalls on store forwarding.
	nd, rn := &nodes[n], &nodes[r]
	rn.Addr = nd.Addr + uint64(size)
	rn.Size = nd.Size - size
	rn.Prev = n
	rn.Next = nd.Next
	rn.Free = true
	if rn.Next != 0 {
		nodes[rn.Next].Prev = r
	}
	nd.Next = r
	nd.Size = size
}

// MergeNext merges into node n the node after it in its segment, taking
// its bytes, and returns that node, unlinked, for the caller to recycle.
func MergeNext(nodes []Node, n int32) (x int32) {
	x = nodes[n].Next
	nodes[n].Size += nodes[x].Size
	next := nodes[x].Next
	nodes[n].Next = next
	if next != 0 {
		nodes[next].Prev = n
	}
	return x
}
